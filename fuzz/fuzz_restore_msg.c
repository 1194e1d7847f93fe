/* fuzz_restore_msg.c - the decoders of restoring from the tiers on any bytes: the
 * requests ckptd takes from a client (RESOLVE, FETCH, TIERS; async/proto_restore.c,
 * which daemon_msg also reaches through the daemon), and the replies a client takes
 * from ckptd (RESOLVE_OK, FETCH_OK; TIERS_OK and DRAIN_OK, ckptctl's,
 * ckptd/kd_peer_wire.c).
 *
 * The input's first byte picks what decodes the rest. What decodes is used as a caller
 * would (names, files, directories, copies) and freed; what does not must be refused
 * with an error, never read past its bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "async/proto.h"
#include "fz_mdb.h"
#include "kd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t sink;   /* what decoded, touched so that nothing is optimized away */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    static const uint16_t req[3] = { CK_MSG_RESOLVE, CK_MSG_FETCH, CK_MSG_TIERS };
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    ck__restore_req q;
    ck__restore_pick k;
    ck__restore_dirs d;
    kd_tview t;
    kd_drain_rows dr;
    switch (data[0] % 7) {
    case 0:
    case 1:
    case 2:
        if (ck__proto_get_restore(req[data[0] % 7], p, n, &q, NULL) == 0) {
            sink += strlen(q.name) + q.newest;
            for (uint32_t i = 0; i < q.n; i++)
                sink += strlen(q.files[i]);
            ck__restore_req_free(&q);
        }
        break;
    case 3:
        if (ck__proto_get_pick(p, n, &k, NULL) == 0)
            sink += strlen(k.name) + strlen(k.why) + k.step;
        break;
    case 4:
        if (ck__proto_get_dirs(p, n, &d, NULL) == 0) {
            for (uint32_t i = 0; i < d.n; i++)
                sink += strlen(d.dirs[i]);
            ck__restore_dirs_free(&d);
        }
        break;
    case 5:
        if (kd_pw_get_tiers(p, n, &t, NULL) == 0) {
            for (size_t i = 0; i < t.n; i++)
                sink += t.v[i].c.n_held + strlen(t.v[i].holder);
            sink += kd_tiers_whole(&t, "step-12", 1) + t.npeers;
            kd_tview_free(&t);
        }
        break;
    default:
        if (kd_pw_get_drains(p, n, &dr, NULL) == 0) {
            for (uint32_t i = 0; i < dr.n; i++)
                sink += strlen(dr.rows[i].name) + strlen(dr.rows[i].why) + dr.rows[i].state;
            free(dr.rows);
        }
    }
    return 0;
}
