/* kd_proto.c - reading clients' messages and checking every field before use.
 *
 * A message is refused before its payload is read when its header is bad (magic,
 * version, a length over CK_PROTO_MAX_MSG); decoding checks counts against the hard
 * limits (proto.h); then every field is checked here: names are names, never paths
 * (ck_name_check), meshes, ranks, dims and dtypes are in range, and the staging memfd
 * is sealed and as large as declared. A bad message gets an ERROR reply and its
 * client is closed; the daemon and its other clients go on.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kd.h"

#include "format/decl.h"

static void refuse(kd_server *s, kd_client *c, int code, const char *what)
{
    kd_log(s, "client %llu (pid %d): bad message: %s; closing it", (unsigned long long)c->id,
           (int)c->pid, what);
    kd_send_error(s, c, "", code, what);
    c->drop = true;
}

/* Every field of a BEGIN the declaration does not check as it is decoded (its tensors,
 * their dims, placements and box writers: model/decl.c); what only its seal checks
 * (layouts, tilings) is the planner's, beside the loop. */
static int check_begin(const ck__begin *d, ck_err *err)
{
    int r = ck_name_check("checkpoint", d->name, err);
    if (r < 0)
        return r;
    uint64_t world = ck__begin_world(d);
    if (d->rank >= world)
        return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu on a mesh of %llu ranks",
                          d->name, (unsigned long long)d->rank, (unsigned long long)world);
    if (!ck__job_set(&d->job))
        return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu declares no job id (all "
                          "zero)", d->name, (unsigned long long)d->rank);
    if (d->nodes > world || d->nodes > CK_PROTO_MAX_NODES)
        return ck_err_set(err, -EINVAL, "checkpoint %s: %u daemons for a world of %llu ranks "
                          "(at most one per rank and %u)", d->name, d->nodes,
                          (unsigned long long)world, CK_PROTO_MAX_NODES);
    if (ck__decl_shards(d->decl) > KD_MAX_SHARDS)
        return ck_err_set(err, -E2BIG, "checkpoint %s: %llu shard records (at most %u per "
                          "save)", d->name, (unsigned long long)ck__decl_shards(d->decl),
                          KD_MAX_SHARDS);
    uint64_t blob_bytes;
    if (!ck__begin_blob_bytes(d, &blob_bytes))
        return ck_err_set(err, -EINVAL, "checkpoint %s: blob sizes overflow", d->name);
    for (uint32_t i = 0; i < d->nblobs; i++) {
        if ((r = ck_key_check("blob", d->blobs[i].name, err)) < 0)
            return ck_err_set(err, r, "checkpoint %s", d->name);
        if (d->blobs[i].len > CK_BLOB_MAX)
            return ck_err_set(err, -EFBIG, "blob %s: %llu bytes (at most %u)",
                              d->blobs[i].name, (unsigned long long)d->blobs[i].len,
                              CK_BLOB_MAX);
    }
    return 0;
}

static void on_hello(kd_server *s, kd_client *c, ck__rbuf *r)
{
    char root[PATH_MAX] = "";
    ck__get_str(r, root, sizeof root);
    if (!ck__rbuf_done(r)) {
        refuse(s, c, -EBADMSG, "malformed HELLO");
        return;
    }
    char real[PATH_MAX];
    if (root[0] && (!realpath(root, real) || strcmp(real, s->root) != 0)) {
        char msg[2 * PATH_MAX + 64];
        snprintf(msg, sizeof msg, "this ckptd serves root %s, not %s", s->root, root);
        refuse(s, c, -EXDEV, msg);
        return;
    }
    ck__wbuf w = { 0 };
    ck__proto_start(&w, CK_MSG_HELLO_OK);
    ck__put_str(&w, s->root);
    ck__put_u64(&w, s->o.staging);
    kd_send(s, c, &w);
    ck__wbuf_free(&w);
}

static void on_begin(kd_server *s, kd_client *c, const uint8_t *p, uint32_t len)
{
    ck_err err = { 0 };
    if (!c->nfds) {
        refuse(s, c, -EBADMSG, "BEGIN without its staging memfd");
        return;
    }
    int fd = c->fds[0];
    memmove(c->fds, c->fds + 1, --c->nfds * sizeof *c->fds);
    ck__begin d;
    int r = ck__proto_get_begin(p, len, &d, &err);
    if (r == 0 && (r = check_begin(&d, &err)) == 0)
        r = kd_staging_check(fd, d.staging_size, &err);
    if (r < 0) {
        close(fd);
        refuse(s, c, r, ck_err_msg(&err));
    } else {
        kd_ckpt_begin(s, c, &d, fd);
    }
    ck__begin_free(&d);
}

static void on_named(kd_server *s, kd_client *c, uint16_t type, ck__rbuf *r)
{
    char name[CK_NAME_MAX];
    ck_err err = { 0 };
    ck__get_str(r, name, sizeof name);
    uint64_t rank = type == CK_MSG_STAGED ? ck__get_u64(r) : 0;
    if (!ck__rbuf_done(r)) {
        refuse(s, c, -EBADMSG, type == CK_MSG_STAGED ? "malformed STAGED" : "malformed COMMIT");
        return;
    }
    if (ck_name_check("checkpoint", name, &err) < 0) {
        refuse(s, c, -EINVAL, ck_err_msg(&err));
        return;
    }
    if (type == CK_MSG_STAGED)
        kd_ckpt_staged(s, c, name, rank);
    else
        kd_ckpt_commit(s, c, name);
}

/* RESOLVE, FETCH, TIERS: every field checked (async/proto_restore.c), then the
 * restorer's. */
static void on_restore(kd_server *s, kd_client *c, uint16_t type, const uint8_t *p,
                       uint32_t len)
{
    ck_err err = { 0 };
    ck__restore_req q;
    int r = ck__proto_get_restore(type, p, len, &q, &err);
    if (r < 0)
        refuse(s, c, r, ck_err_msg(&err));
    else
        kd_restore_submit(s, c, type, &q);
}

/* DRAIN: str name ("": the state alone), u8 offer (0 or 1). */
static void on_drain(kd_server *s, kd_client *c, ck__rbuf *r)
{
    char name[CK_NAME_MAX];
    ck_err err = { 0 };
    ck__get_str(r, name, sizeof name);
    uint8_t offer = ck__get_u8(r);
    if (!ck__rbuf_done(r) || offer > 1)
        refuse(s, c, -EBADMSG, "malformed DRAIN");
    else if (name[0] && ck_name_check("checkpoint", name, &err) < 0)
        refuse(s, c, -EINVAL, ck_err_msg(&err));
    else
        kd_drain_request(s, c, name, offer);
}

void kd_proto_input(kd_server *s, kd_client *c)
{
    size_t off = 0;
    while (!c->drop && c->in_len - off >= CK_PROTO_HDR) {
        uint16_t type;
        uint32_t len;
        ck_err err = { 0 };
        int r = ck__proto_header(c->in + off, &type, &len, &err);
        if (r < 0) {
            refuse(s, c, r, ck_err_msg(&err));
            break;
        }
        if (c->in_len - off - CK_PROTO_HDR < len)
            break;                           /* the rest is on its way */
        const uint8_t *p = c->in + off + CK_PROTO_HDR;
        ck__rbuf rb = ck__rbuf_make(p, len);
        off += CK_PROTO_HDR + len;
        switch (type) {
        case CK_MSG_HELLO: on_hello(s, c, &rb); break;
        case CK_MSG_BEGIN: on_begin(s, c, p, len); break;
        case CK_MSG_STAGED:
        case CK_MSG_COMMIT: on_named(s, c, type, &rb); break;
        case CK_MSG_RESOLVE:
        case CK_MSG_FETCH:
        case CK_MSG_TIERS: on_restore(s, c, type, p, len); break;
        case CK_MSG_DRAIN: on_drain(s, c, &rb); break;
        case CK_MSG_STATUS:
            if (len)
                refuse(s, c, -EBADMSG, "malformed STATUS");
            else
                kd_status_reply(s, c);
            break;
        default: {
            char msg[64];
            snprintf(msg, sizeof msg, "unknown message type %u", type);
            refuse(s, c, -EPROTO, msg);
        }
        }
    }
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
}

void kd_proto_truncated(kd_server *s, kd_client *c)
{
    if (c->in_len)
        refuse(s, c, -EBADMSG, "truncated message: the connection closed inside it");
}
