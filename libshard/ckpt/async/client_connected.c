/* client_connected.c - the client's connected transport: ckptd over its Unix socket
 * (docs/PROTOCOL.md).
 *
 * Each step is a message; the engine's news come back as replies naming the save
 * (and the rank), read whenever the client waits or polls. A client is used by one
 * thread at a time, so there is nothing to lock: the socket is the only source of
 * news. A broken connection fails every save of the client at once, so that nobody
 * waits on replies that will never come.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "async/client_int.h"

/* Every save fails, with the daemon named: with one ckptd per node, which one died
 * is what the rank's error must say. */
static void conn_broken(ck_client *cl, int code, const char *msg)
{
    char named[CK_ERR_MSG_MAX];
    snprintf(named, sizeof named, "ckptd at %s: %s", cl->sock_path, msg);
    cl->dead = true;
    for (ck_client_save *sv = cl->saves; sv; sv = sv->next)
        ck__client_set_state(sv, CK_CLIENT_FAILED, code, named);
}

/* Applies one reply of the daemon to the saves it names. */
static void dispatch(ck_client *cl, const ck__msg *m)
{
    ck__rbuf r = ck__rbuf_make(m->payload, m->len);
    char name[CK_NAME_MAX] = "";
    if (m->type != CK_MSG_HELLO_OK && m->type != CK_MSG_STATUS_OK)
        ck__get_str(&r, name, sizeof name);
    uint64_t rank = 0, bytes = 0;
    int32_t code = 0;
    char msg[CK_ERR_MSG_MAX] = "";
    switch (m->type) {
    case CK_MSG_ADMIT:
        rank = ck__get_u64(&r);
        bytes = ck__get_u64(&r);
        break;
    case CK_MSG_DURABLE:
        rank = ck__get_u64(&r);
        break;
    case CK_MSG_ERROR:
        code = (int32_t)ck__get_u32(&r);
        ck__get_str(&r, msg, sizeof msg);
        break;
    case CK_MSG_COMMITTED:
        break;
    default:
        r.bad = true;
    }
    if (!ck__rbuf_done(&r) || (m->type == CK_MSG_ERROR && code >= 0)) {
        conn_broken(cl, -EPROTO, "ckptd sent a malformed reply");
        return;
    }
    if (m->type == CK_MSG_ERROR && !name[0]) {
        char full[CK_ERR_MSG_MAX + 32];
        snprintf(full, sizeof full, "ckptd: %s", msg);
        conn_broken(cl, code, full);
        return;
    }
    for (ck_client_save *sv = cl->saves; sv; sv = sv->next) {
        if (strcmp(sv->d.name, name) != 0)
            continue;
        if (m->type == CK_MSG_ADMIT && sv->d.rank == rank && !sv->admitted) {
            sv->admitted = true;
            sv->image_bytes = bytes;
        } else if (m->type == CK_MSG_DURABLE && sv->d.rank == rank) {
            ck__client_set_state(sv, CK_CLIENT_DURABLE, 0, NULL);
        } else if (m->type == CK_MSG_COMMITTED) {
            ck__client_set_state(sv, CK_CLIENT_COMMITTED, 0, NULL);
        } else if (m->type == CK_MSG_ERROR) {
            ck__client_set_state(sv, CK_CLIENT_FAILED, code, msg);
        }
    }
}

/* Reads replies (one, blocking, when block; else all that are there) and applies
 * them. */
static int pump(ck_client *cl, bool block)
{
    if (cl->dead)
        return -ECONNRESET;
    ck__msg m;
    ck_err err = { 0 };
    int r;
    while ((r = ck__conn_recv(cl->sock, block, &m, &err)) > 0) {
        dispatch(cl, &m);
        free(m.payload);
        if (block || cl->dead)
            break;
    }
    if (r < 0)
        conn_broken(cl, r, ck_err_msg(&err));
    return r < 0 ? r : 0;
}

static int send_msg(ck_client *cl, ck__wbuf *w, int fd, ck_err *err)
{
    int r = ck__proto_end(w);
    if (r == -EMSGSIZE)
        r = ck_err_set(err, r, "a message of %zu bytes, over ckptd's limit of %u (too many "
                       "tensors or boxes in one save)", w->len - CK_PROTO_HDR, CK_PROTO_MAX_MSG);
    else if (r < 0)
        r = ck_err_set(err, r, "out of memory building a message");
    else if (cl->dead)
        r = ck_err_set(err, -ECONNRESET, "the connection to ckptd at %s is broken",
                       cl->sock_path);
    else if ((r = ck__conn_send(cl->sock, w, fd, err)) < 0) {
        char why[CK_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", ck_err_msg(err));
        conn_broken(cl, r, why);
        ck_err_set(err, r, "ckptd at %s: %s", cl->sock_path, why);
    }
    ck__wbuf_free(w);
    return r;
}

/* A message naming a save, and nothing else: STAGED carries the rank too. */
static int send_named(ck_client_save *sv, uint16_t type, bool with_rank, ck_err *err)
{
    ck__wbuf w = { 0 };
    ck__proto_start(&w, type);
    ck__put_str(&w, sv->d.name);
    if (with_rank)
        ck__put_u64(&w, sv->d.rank);
    return send_msg(sv->cl, &w, -1, err);
}

static void conn_lock(ck_client *cl)
{
    (void)cl;
}

static int conn_await(ck_client *cl)
{
    return pump(cl, true);
}

static void conn_poll(ck_client *cl)
{
    pump(cl, false);
}

static ck_client_save **conn_saves(ck_client *cl)
{
    return &cl->saves;
}

static bool admitted(ck_client *cl, const void *arg)
{
    (void)cl;
    const ck_client_save *sv = arg;
    return sv->admitted || sv->state == CK_CLIENT_FAILED;
}

/* BEGIN with the memfd, then wait for ADMIT: the daemon holds it back while its
 * staging budget is spent (back-pressure). */
static int conn_join(ck_client_save *sv, const ck__client_slot *s, ck_err *err)
{
    ck__wbuf w = { 0 };
    ck__proto_start(&w, CK_MSG_BEGIN);
    ck__proto_put_decl(&w, &sv->d);
    int r = send_msg(sv->cl, &w, s->fd, err);
    if (r < 0)
        return r;
    ck__client_wait_for(sv->cl, admitted, sv);
    if (sv->state == CK_CLIENT_FAILED)
        return ck_err_set(err, sv->code, "%s", sv->msg);
    return 0;
}

static int conn_stage(ck_client_save *sv, const ck__client_slot *s, ck_err *err)
{
    (void)s;
    return send_named(sv, CK_MSG_STAGED, true, err);
}

static int conn_commit(ck_client_save *sv, ck_err *err)
{
    return send_named(sv, CK_MSG_COMMIT, false, err);
}

static void conn_close(ck_client *cl)
{
    if (cl->sock >= 0)
        close(cl->sock);
    cl->sock = -1;
}

static const ck__client_transport connected = {
    .connected = true,
    .lock = conn_lock,
    .unlock = conn_lock,
    .await = conn_await,
    .poll = conn_poll,
    .saves = conn_saves,
    .join = conn_join,
    .stage = conn_stage,
    .commit = conn_commit,
    .close = conn_close,
};

static int hello(ck_client *cl, const char *root, ck_err *err)
{
    ck__wbuf w = { 0 };
    ck__proto_start(&w, CK_MSG_HELLO);
    ck__put_str(&w, root ? root : "");
    int r = send_msg(cl, &w, -1, err);
    ck__msg m;
    if (r == 0 && (r = ck__conn_recv(cl->sock, true, &m, err)) > 0) {
        ck__rbuf rb = ck__rbuf_make(m.payload, m.len);
        char msg[CK_ERR_MSG_MAX] = "";
        if (m.type == CK_MSG_HELLO_OK) {
            ck__get_str(&rb, cl->root, sizeof cl->root);
            ck__get_u64(&rb);
            r = ck__rbuf_done(&rb) ? 0 : ck_err_set(err, -EPROTO, "malformed HELLO reply");
        } else if (m.type == CK_MSG_ERROR) {
            ck__get_str(&rb, msg, sizeof msg);
            int32_t code = (int32_t)ck__get_u32(&rb);
            ck__get_str(&rb, msg, sizeof msg);
            r = ck_err_set(err, code < 0 ? code : -EPROTO, "ckptd refused: %s", msg);
        } else {
            r = ck_err_set(err, -EPROTO, "unexpected reply %u to HELLO", m.type);
        }
        free(m.payload);
    }
    return r < 0 ? ck_err_set(err, r, "ckptd at %s", cl->sock_path) : 0;
}

int ck__client_open_connected(ck_client *cl, const char *sock, const char *root,
                              ck_err *err)
{
    cl->t = &connected;
    cl->sock = -1;
    snprintf(cl->sock_path, sizeof cl->sock_path, "%s", sock);
    int r = ck__conn_connect(sock, &cl->sock, err);
    return r < 0 ? r : hello(cl, root, err);
}
