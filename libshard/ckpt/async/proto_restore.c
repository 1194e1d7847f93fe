/* proto_restore.c - the messages that restore from the tiers: RESOLVE, FETCH and TIERS
 * and the replies RESOLVE_OK and FETCH_OK (see async/proto.h; docs/PROTOCOL.md,
 * "Restoring"). Every decoder checks each field before the caller sees it. */
#include "async/proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int bad(uint16_t type, const char *what, ck_err *err)
{
    static const char *const names[] = { [CK_MSG_RESOLVE] = "RESOLVE", [CK_MSG_FETCH] = "FETCH",
                                         [CK_MSG_TIERS] = "TIERS" };
    return ck_err_set(err, -EBADMSG, "malformed %s: %s",
                      type < sizeof names / sizeof names[0] && names[type] ? names[type]
                      : type == CK_MSG_RESOLVE_OK ? "RESOLVE reply" : "FETCH reply", what);
}

void ck__restore_req_free(ck__restore_req *q)
{
    free(q->files);
    q->files = NULL;
    q->n = 0;
}

void ck__proto_put_restore(ck__wbuf *w, uint16_t type, const ck__restore_req *q)
{
    ck__put_str(w, q->name);
    if (type == CK_MSG_RESOLVE)
        ck__put_u8(w, q->newest);
    if (type != CK_MSG_FETCH)
        return;
    ck__put_u32(w, q->n);
    for (uint32_t i = 0; i < q->n; i++)
        ck__put_str(w, q->files[i]);
}

/* A checkpoint name, or where empty is allowed (TIERS: every checkpoint; RESOLVE of the
 * newest: the bare numbers), the start of one. */
static bool name_ok(const char *s, bool empty_ok)
{
    return (empty_ok && !s[0]) || ck_name_check("checkpoint", s, NULL) == 0;
}

int ck__proto_get_restore(uint16_t type, const void *p, size_t len, ck__restore_req *q,
                          ck_err *err)
{
    ck__rbuf r = ck__rbuf_make(p, len);
    memset(q, 0, sizeof *q);
    ck__get_str(&r, q->name, sizeof q->name);
    uint8_t newest = type == CK_MSG_RESOLVE ? ck__get_u8(&r) : 0;
    if (r.bad)
        return bad(type, "a name too long, cut short or holding a NUL", err);
    if (newest > 1)
        return bad(type, "a 'newest' flag that is neither 0 nor 1", err);
    q->newest = newest;
    if (!name_ok(q->name, type == CK_MSG_TIERS || q->newest))
        return ck_err_set(err, -EBADMSG, "malformed %s: '%.64s' is not %s", type == CK_MSG_TIERS
                          ? "TIERS" : type == CK_MSG_FETCH ? "FETCH" : "RESOLVE", q->name,
                          q->newest ? "the start of a checkpoint name" : "a checkpoint name");
    if (type == CK_MSG_FETCH) {
        q->n = ck__get_u32(&r);
        /* Each name takes at least 3 bytes: the count is checked before it allocates. */
        if (r.bad || q->n > CK_PROTO_MAX_FILES || q->n > (len - r.pos) / 3)
            return bad(type, "a file count larger than its bytes can hold or the limit", err);
        q->files = calloc(q->n ? q->n : 1, sizeof *q->files);
        if (!q->files)
            return ck_err_set(err, -ENOMEM, "out of memory");
        for (uint32_t i = 0; i < q->n; i++) {
            ck__get_str(&r, q->files[i], sizeof q->files[i]);
            if (r.bad || ck_name_check("data file", q->files[i], NULL) < 0) {
                ck__restore_req_free(q);
                return bad(type, "a data file name that is not a plain file name", err);
            }
        }
    }
    if (!ck__rbuf_done(&r)) {
        ck__restore_req_free(q);
        return bad(type, "bytes left over after its fields", err);
    }
    return 0;
}

void ck__proto_put_pick(ck__wbuf *w, const ck__restore_pick *k)
{
    ck__put_str(w, k->name);
    ck__put_u64(w, k->step);
    ck__put_u64(w, k->time_ns);
    ck__put_str(w, k->why);
}

int ck__proto_get_pick(const void *p, size_t len, ck__restore_pick *k, ck_err *err)
{
    ck__rbuf r = ck__rbuf_make(p, len);
    ck__get_str(&r, k->name, sizeof k->name);
    k->step = ck__get_u64(&r);
    k->time_ns = ck__get_u64(&r);
    ck__get_str(&r, k->why, sizeof k->why);
    if (!ck__rbuf_done(&r) || !name_ok(k->name, false))
        return bad(CK_MSG_RESOLVE_OK, "not a checkpoint name, a step, a time and a reason", err);
    return 0;
}

void ck__restore_dirs_free(ck__restore_dirs *d)
{
    free(d->dirs);
    d->dirs = NULL;
    d->n = 0;
}

void ck__proto_put_dirs(ck__wbuf *w, const ck__restore_dirs *d)
{
    ck__put_str(w, d->name);
    ck__put_u32(w, d->n);
    for (uint32_t i = 0; i < d->n; i++)
        ck__put_str(w, d->dirs[i]);
}

int ck__proto_get_dirs(const void *p, size_t len, ck__restore_dirs *d, ck_err *err)
{
    ck__rbuf r = ck__rbuf_make(p, len);
    memset(d, 0, sizeof *d);
    ck__get_str(&r, d->name, sizeof d->name);
    d->n = ck__get_u32(&r);
    if (r.bad || !name_ok(d->name, false) || d->n == 0 || d->n > CK_COPIES_MAX)
        return bad(CK_MSG_FETCH_OK, "not a checkpoint name and 1 to 64 directories", err);
    d->dirs = calloc(d->n, sizeof *d->dirs);
    if (!d->dirs)
        return ck_err_set(err, -ENOMEM, "out of memory");
    for (uint32_t i = 0; i < d->n; i++) {
        ck__get_str(&r, d->dirs[i], sizeof d->dirs[i]);
        if (r.bad || d->dirs[i][0] != '/') {
            ck__restore_dirs_free(d);
            return bad(CK_MSG_FETCH_OK, "a directory that is not an absolute path", err);
        }
    }
    if (!ck__rbuf_done(&r)) {
        ck__restore_dirs_free(d);
        return bad(CK_MSG_FETCH_OK, "bytes left over after its directories", err);
    }
    return 0;
}
