/* fuzz_peer_msg.c - the peer service's decoders (ckptd/kd_peer_wire.c) and the copy
 * file's reader (libshard/ckpt/format/copy.c) on any bytes.
 *
 * The input's first byte picks what decodes the rest: a HELLO, a stream declaration
 * (PUT, GET_OK), an ask (GET), an ERROR, a name (COMMITTED) or a window (PUT_READY), an
 * INVENTORY_OK, a copy file read against a manifest of four data files (rank-00000.dat
 * to rank-00003.dat), a HELLO_OK, an AUTH or a PART. What decodes is used as a caller
 * would (names, sizes, listed files) and freed; what does not must be refused with an
 * error, never read past its bytes.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/copy.h"
#include "fz_mdb.h"
#include "kd.h"
#include "format/layout.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t sink;   /* what decoded, touched so that nothing is optimized away */

static void copy_file(const uint8_t *data, size_t size)
{
    static int dir = -1;
    if (dir < 0 && (dir = open(fz_scratch(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        abort();
    unlinkat(dir, CK_COPY_FILE, 0);
    int fd = openat(dir, CK_COPY_FILE, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, data, size) != (ssize_t)size)
        abort();
    close(fd);
    ck_file files[4] = { { .size = 4096 } };
    for (int i = 0; i < 4; i++)
        snprintf(files[i].name, sizeof files[i].name, "rank-%05d.dat", i);
    ck_copy copy;
    uint8_t *held;
    if (ck__copy_read(dir, fz_scratch(), files, 4, &copy, &held, NULL) == 0) {
        for (int i = 0; held && i < 4; i++)
            sink += held[i];
        sink += strlen(copy.source) + copy.files_held;
        free(held);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    kd_pmsg m = { .data = (uint8_t *)data + 1, .len = size - 1 };
    char name[CK_NAME_MAX];
    kd_phello h;
    uint8_t proof[KD_PEER_PROOF_LEN];
    kd_preq q;
    uint32_t window;
    kd_peer_copy *v;
    size_t n;
    switch (data[0] % 10) {
    case 0:
    case 7:
        m.type = data[0] % 10 ? KD_P_HELLO_OK : KD_P_HELLO;
        if (kd_pw_get_hello(&m, &h, NULL) == 0)
            sink += strlen(h.id) + h.instance + h.nonce[31] + h.proof[31];
        break;
    case 8:
        m.type = KD_P_AUTH;
        if (kd_pw_get_auth(&m, proof, NULL) == 0)
            sink += proof[0];
        break;
    case 1:
    case 2:
        m.type = data[0] % 10 == 1 ? KD_P_PUT : KD_P_GET;
        if ((data[0] % 10 == 1 ? kd_pw_get_stream(&m, &q, NULL) : kd_pw_get_ask(&m, &q, NULL)) == 0)
            for (uint32_t i = 0; i < q.n; i++)
                sink += strlen(q.files[i].name) + q.files[i].size;
        kd_preq_free(&q);
        break;
    case 3:
        m.type = KD_P_ERROR;
        kd_pw_get_error(&m, "fuzz", NULL);
        break;
    case 4:
        /* A name (COMMITTED) or, for an odd tens digit, a window (PUT_READY). */
        m.type = data[0] / 10 % 2 ? KD_P_PUT_READY : KD_P_COMMITTED;
        if (m.type == KD_P_COMMITTED && kd_pw_get_name(&m, name, NULL) == 0)
            sink += strlen(name);
        if (m.type == KD_P_PUT_READY && kd_pw_get_window(&m, &window, NULL) == 0)
            sink += window;
        break;
    case 5:
        m.type = KD_P_INVENTORY_OK;
        if (kd_pw_get_inventory(&m, &v, &n, NULL) == 0) {
            for (size_t i = 0; i < n; i++)
                for (uint32_t f = 0; v[i].held && f < v[i].n_held; f++)
                    sink += strlen(v[i].held[f]);
            kd_peer_copies_free(v, n);
        }
        break;
    case 9:
        m.type = KD_P_PART;
        if (kd_pw_get_part(&m, &q, NULL) == 0)
            for (uint32_t i = 0; i < q.n; i++)
                sink += strlen(q.files[i].name) + strlen(q.token) + q.manifest_sha256[31];
        kd_preq_free(&q);
        break;
    default:
        copy_file(data + 1, size - 1);
    }
    return 0;
}
