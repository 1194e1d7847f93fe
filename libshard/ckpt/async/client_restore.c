/* client_restore.c - restoring through ckptd's tiers (see ck/client.h; docs/PROTOCOL.md,
 * "Restoring"; docs/ARCHITECTURE.md, "Tiers").
 *
 * Connected, each call is one request on a connection of its own, so that a restore
 * never meets the replies of the client's saves: RESOLVE on the rank that picks the
 * checkpoint, FETCH (the manifest, then the files a rank's boxes touch) on every rank,
 * and the reader opens the copies the daemon names. The daemon may fetch from peers for
 * a while: the wait is bounded as a commit's is (commit_timeout), while ckptd keeps
 * answering the STATUS the client sends after half a timeout of silence (timeout). A
 * client without a daemon (embedded) has the root alone: the newest committed
 * checkpoint of it, opened where it is.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "async/client_int.h"
#include "ck/steps.h"

static const char *type_name(uint16_t type)
{
    return type == CK_MSG_RESOLVE ? "RESOLVE" : "FETCH";
}

/* The reply to the request on sock, of type want, into m: an ERROR is the request's
 * failure; silence past the limits gives it up. */
static int await(ck_client *cl, int sock, uint16_t type, const char *name, uint16_t want,
                 ck__msg *m, ck_err *err)
{
    double heard = ck__conn_now(), until = heard + cl->commit_timeout, probe = 0;
    for (;;) {
        double now = ck__conn_now();
        if (probe && now - probe >= cl->timeout)
            return ck_err_set(err, -ETIMEDOUT, "did not answer within %.1f s (CKPTD_TIMEOUT) "
                              "while this client waited for the answer to its %s of %s",
                              cl->timeout, type_name(type), name);
        if (now >= until)
            return ck_err_set(err, -ETIMEDOUT, "answers, but the %s of %s took more than "
                              "%.1f s (CKPTD_COMMIT_TIMEOUT)", type_name(type), name,
                              cl->commit_timeout);
        if (!probe && now - heard >= cl->timeout / 2) {
            ck__wbuf w = { 0 };
            ck__proto_start(&w, CK_MSG_STATUS);
            int r = ck__proto_end(&w);
            if (r == 0)
                r = ck__conn_send_by(sock, &w, -1, now + cl->timeout, err);
            ck__wbuf_free(&w);
            if (r < 0)
                return r;
            probe = now;
        }
        double next = probe ? probe + cl->timeout : heard + cl->timeout / 2;
        int r = ck__conn_recv_by(sock, next < until ? next : until, now + 2 * cl->timeout, m,
                                 err);
        if (r <= 0) {
            if (r < 0)
                return r;
            continue;
        }
        heard = ck__conn_now();
        if (m->type == want)
            return 0;
        ck__rbuf rb = ck__rbuf_make(m->payload, m->len);
        char said[CK_NAME_MAX], msg[CK_ERR_MSG_MAX];
        ck__get_str(&rb, said, sizeof said);
        int32_t code = (int32_t)ck__get_u32(&rb);
        ck__get_str(&rb, msg, sizeof msg);
        uint16_t type_got = m->type;
        free(m->payload);
        m->payload = NULL;
        if (type_got == CK_MSG_STATUS_OK) {
            probe = 0;
            continue;
        }
        if (type_got == CK_MSG_ERROR && ck__rbuf_done(&rb) && code < 0)
            return ck_err_set(err, code, "%s", msg);
        return ck_err_set(err, -EPROTO, "answered %s with message type %u", type_name(type),
                          type_got);
    }
}

/* One request and its reply (want), on a connection of its own. */
static int ask(ck_client *cl, uint16_t type, const ck__restore_req *q, uint16_t want,
               ck__msg *m, ck_err *err)
{
    int sock = -1;
    double t0 = ck__conn_now();
    ck__wbuf w = { 0 };
    ck__proto_start(&w, type);
    ck__proto_put_restore(&w, type, q);
    int r = ck__proto_end(&w);
    if (r < 0)
        r = ck_err_set(err, r, "a %s of %u data files is larger than a message (%u bytes)",
                       type_name(type), q->n, CK_PROTO_MAX_MSG);
    if (r == 0)
        r = ck__conn_connect_by(cl->sock_path, t0 + cl->timeout, &sock, err);
    if (r == 0)
        r = ck__conn_send_by(sock, &w, -1, t0 + cl->timeout, err);
    if (r == 0)
        r = await(cl, sock, type, q->name, want, m, err);
    ck__wbuf_free(&w);
    if (sock >= 0)
        close(sock);
    return r < 0 ? ck_err_set(err, r, "ckptd at %s", cl->sock_path) : 0;
}

int ck_client_resolve(ck_client *cl, const char *what, bool newest, char name[CK_NAME_MAX],
                      char *why, size_t why_len, ck_err *err)
{
    if (why_len)
        why[0] = '\0';
    if (!cl->t->connected) {
        if (newest)
            return ck_root_newest(cl->root, what, name, NULL, err);
        ck_ckpt *ck;
        int r = ck_open(cl->root, what, &ck, err);
        if (r == 0)
            snprintf(name, CK_NAME_MAX, "%s", ck_get_info(ck)->name);
        ck_close(ck);
        return r;
    }
    ck__restore_req q = { .newest = newest };
    if (snprintf(q.name, sizeof q.name, "%s", what) >= (int)sizeof q.name)
        return ck_err_set(err, -ENAMETOOLONG, "checkpoint name or prefix '%.64s...' is too "
                          "long", what);
    ck__msg m = { 0 };
    ck__restore_pick pick;
    int r = ask(cl, CK_MSG_RESOLVE, &q, CK_MSG_RESOLVE_OK, &m, err);
    if (r == 0)
        r = ck__proto_get_pick(m.payload, m.len, &pick, err);
    free(m.payload);
    if (r < 0)
        return r;
    snprintf(name, CK_NAME_MAX, "%s", pick.name);
    if (why_len)
        snprintf(why, why_len, "%s", pick.why);
    return 0;
}

/* FETCH of the files named (none: the manifest), and the copies it answers, opened. */
static int fetch_open(ck_client *cl, const char *name, char (*files)[CK_FILE_NAME_MAX],
                      uint32_t n, ck_ckpt **out, ck_err *err)
{
    ck__restore_req q = { .n = n, .files = files };
    snprintf(q.name, sizeof q.name, "%s", name);
    ck__msg m = { 0 };
    ck__restore_dirs d = { 0 };
    int r = ask(cl, CK_MSG_FETCH, &q, CK_MSG_FETCH_OK, &m, err);
    if (r == 0)
        r = ck__proto_get_dirs(m.payload, m.len, &d, err);
    free(m.payload);
    const char *dirs[CK_COPIES_MAX];
    for (uint32_t i = 0; r == 0 && i < d.n; i++)
        dirs[i] = d.dirs[i];
    if (r == 0)
        r = ck_open_copies(dirs, d.n, out, err);
    ck__restore_dirs_free(&d);
    return r;
}

int ck_client_restore_open(ck_client *cl, const char *name, ck_ckpt **out, ck_err *err)
{
    if (!cl->t->connected)
        return ck_open(cl->root, name, out, err);
    int r = ck_name_check("checkpoint", name, err);
    return r < 0 ? r : fetch_open(cl, name, NULL, 0, out, err);
}

int ck_client_restore_fetch(ck_client *cl, ck_ckpt **ck, const ck_load_item *items, size_t n,
                            ck_err *err)
{
    const ck_info *in = ck_get_info(*ck);
    uint8_t *need = malloc(in->n_files ? in->n_files : 1);
    char (*files)[CK_FILE_NAME_MAX] = malloc((in->n_files ? in->n_files : 1) * sizeof *files);
    int r = need && files ? ck_load_files(*ck, items, n, need, err)
                          : ck_err_set(err, -ENOMEM, "out of memory");
    uint32_t k = 0;
    for (uint32_t f = 0; r == 0 && f < in->n_files; f++)
        if (need[f])
            snprintf(files[k++], sizeof files[0], "%s", ck_file_get(*ck, f)->name);
    ck_ckpt *got = NULL;
    /* Even files the copies open hold are asked for: the durable root's copy, which
     * holds them all, is the farthest; the daemon answers at once what its local tier
     * holds. Without a daemon, a file the copies lack fails the load that reads it,
     * named. */
    if (r == 0 && k && cl->t->connected)
        r = fetch_open(cl, in->name, files, k, &got, err);
    if (got && ck_get_info(got)->time_ns != in->time_ns) {
        r = ck_err_set(err, -ESTALE, "checkpoint %s: ckptd's copies are of another save of it "
                       "(committed at %llu ns, not %llu ns)", in->name,
                       (unsigned long long)ck_get_info(got)->time_ns,
                       (unsigned long long)in->time_ns);
        ck_close(got);
        got = NULL;
    }
    if (got) {
        ck_close(*ck);
        *ck = got;
    }
    free(need);
    free(files);
    return r;
}
