/* client_connected.c - the client's connected transport: ckptd over its Unix socket
 * (docs/PROTOCOL.md).
 *
 * Each step is a message; the engine's news come back as replies naming the save
 * (and the rank), read whenever the client waits or polls. A client is used by one
 * thread at a time, so there is nothing to lock: the socket is the only source of
 * news. A broken connection fails every save of the client at once, so that nobody
 * waits on replies that will never come.
 *
 * Nothing waits on the daemon without a limit (docs/PROTOCOL.md, "Time limits"): the
 * HELLO's reply, a message taken, the ADMIT within cl->timeout; a part's durability
 * and the commit within cl->commit_timeout, while ckptd keeps answering: after half a
 * timeout of silence the client asks for a STATUS, and a daemon that does not answer
 * it within the timeout is given up. A link given up fails its saves with -ETIMEDOUT
 * naming the socket, the daemon's pid and the wait, and the next save connects again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "async/client_int.h"

/* Every save fails, with the daemon named: with one ckptd per node, which one died
 * is what the rank's error must say. A part already handed over may still be written
 * by a daemon that lives on (one that was only slow): its staging is forsaken, and
 * its save's error says that the outcome is the daemon's. */
static void conn_broken(ck_client *cl, int code, const char *msg)
{
    char named[CK_ERR_MSG_MAX], handed[CK_ERR_MSG_MAX + 128];
    snprintf(named, sizeof named, "ckptd at %s (pid %d): %s", cl->sock_path,
             (int)cl->daemon_pid, msg);
    snprintf(handed, sizeof handed, "%s; its part was handed over, so ckptd may still "
             "commit it if it runs on", named);
    cl->dead = true;
    cl->dead_code = code;
    snprintf(cl->dead_msg, sizeof cl->dead_msg, "%s", named);
    if (cl->sock >= 0)
        close(cl->sock);
    cl->sock = -1;
    for (ck_client_save *sv = cl->saves; sv; sv = sv->next) {
        bool given = sv->state == CK_CLIENT_STAGED;
        if (given)
            ck__client_forsake(sv);
        ck__client_set_state(sv, CK_CLIENT_FAILED, code,
                             given && code == -ETIMEDOUT ? handed : named);
    }
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
    uint8_t level = 0;
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
        level = ck__get_u8(&r);
        ck__get_str(&r, msg, sizeof msg);
        break;
    default:
        r.bad = true;
    }
    if (!ck__rbuf_done(&r) || (m->type == CK_MSG_ERROR && code >= 0) ||
        level > CK_LEVEL_DURABLE) {
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
        if (strcmp(sv->b.name, name) != 0)
            continue;
        if (m->type == CK_MSG_ADMIT && sv->b.rank == rank && !sv->admitted) {
            sv->admitted = true;
            sv->image_bytes = bytes;
        } else if (m->type == CK_MSG_DURABLE && sv->b.rank == rank) {
            ck__client_set_state(sv, CK_CLIENT_DURABLE, 0, NULL);
        } else if (m->type == CK_MSG_COMMITTED) {
            ck__client_committed(sv, level, msg);
        } else if (m->type == CK_MSG_ERROR) {
            ck__client_set_state(sv, CK_CLIENT_FAILED, code, msg);
        }
    }
}

/* Reads the replies that begin by start_by (all that are there, or the first that
 * comes) and applies them; a STATUS_OK is the answer to the client's probe. 1: some
 * came, 0: none, or -errno (the link broke: every save failed). */
static int pump(ck_client *cl, double start_by)
{
    if (cl->dead)
        return -ECONNRESET;
    ck__msg m;
    ck_err err = { 0 };
    int r, got = 0;
    double now = ck__conn_now();
    while ((r = ck__conn_recv_by(cl->sock, start_by, (start_by > now ? start_by : now) +
                                 cl->timeout, &m, &err)) > 0) {
        got = 1;
        cl->heard = now = ck__conn_now();
        if (m.type == CK_MSG_STATUS_OK)
            cl->probe_sent = 0;
        else
            dispatch(cl, &m);
        free(m.payload);
        start_by = now;             /* then only what is there already */
        if (cl->dead)
            break;
    }
    if (r < 0)
        conn_broken(cl, r, ck_err_msg(&err));
    return r < 0 ? r : got;
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
        r = ck_err_set(err, cl->dead_code, "%s", cl->dead_msg);
    else if ((r = ck__conn_send_by(cl->sock, w, fd, ck__conn_now() + cl->timeout, err)) < 0) {
        char why[CK_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s%s", ck_err_msg(err), r == -ETIMEDOUT ? " within the "
                 "time limit (CKPTD_TIMEOUT)" : "");
        conn_broken(cl, r, why);
        ck_err_clear(err);
        ck_err_set(err, r, "%s", cl->dead_msg);
    }
    ck__wbuf_free(w);
    return r;
}

/* A message naming a save, and nothing else: STAGED carries the rank too. */
static int send_named(ck_client_save *sv, uint16_t type, bool with_rank, ck_err *err)
{
    ck__wbuf w = { 0 };
    ck__proto_start(&w, type);
    ck__put_str(&w, sv->b.name);
    if (with_rank)
        ck__put_u64(&w, sv->b.rank);
    return send_msg(sv->cl, &w, -1, err);
}

static void conn_lock(ck_client *cl)
{
    (void)cl;
}

/* Gives the link up: a wait that outlived its limit, or a daemon that stopped
 * answering. */
static int give_up(ck_client *cl, bool silent, double now)
{
    char why[CK_ERR_MSG_MAX];
    if (silent)
        snprintf(why, sizeof why, "did not answer within %.1f s (CKPTD_TIMEOUT; nothing "
                 "heard for %.1f s) while this client waited for %s; the link is given up "
                 "(the next save connects again)", cl->timeout, now - cl->heard,
                 cl->waiting_for);
    else
        snprintf(why, sizeof why, "answers, but %s took more than %.1f s (%s); the link "
                 "is given up (the next save connects again)", cl->waiting_for,
                 cl->wait_limit, cl->wait_limit == cl->timeout ? "CKPTD_TIMEOUT"
                                                               : "CKPTD_COMMIT_TIMEOUT");
    conn_broken(cl, -ETIMEDOUT, why);
    return -ETIMEDOUT;
}

/* One round of a wait: the news that come before the wait's limit, asking ckptd
 * whether it is alive after half a timeout of silence. */
static int conn_await(ck_client *cl)
{
    for (;;) {
        if (cl->dead)
            return -ECONNRESET;
        double now = ck__conn_now();
        /* Silent: the probe went unanswered for a timeout, or is out when the wait's
         * limit comes (the daemon is not known to be alive). */
        if ((cl->probe_sent && now - cl->probe_sent >= cl->timeout) ||
            (now >= cl->wait_until && cl->probe_sent))
            return give_up(cl, true, now);
        if (now >= cl->wait_until)
            return give_up(cl, false, now);
        if (!cl->probe_sent && now - cl->heard >= cl->timeout / 2) {
            ck__wbuf w = { 0 };
            ck_err err = { 0 };
            ck__proto_start(&w, CK_MSG_STATUS);
            cl->probe_sent = now;
            if (send_msg(cl, &w, -1, &err) < 0)
                return -ECONNRESET;
        }
        double next = cl->probe_sent ? cl->probe_sent + cl->timeout
                                     : cl->heard + cl->timeout / 2;
        int r = pump(cl, next < cl->wait_until ? next : cl->wait_until);
        if (r != 0)
            return r < 0 ? r : 0;
    }
}

static void conn_poll(ck_client *cl)
{
    pump(cl, ck__conn_now());
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
    ck__proto_put_begin(&w, &sv->b);
    int r = send_msg(sv->cl, &w, s->fd, err);
    if (r < 0)
        return r;
    ck__client_wait_for(sv->cl, admitted, sv, sv->cl->timeout,
                        "the ADMIT of its part (ckptd's staging may be full)");
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

static int hello(ck_client *cl, const char *root, ck_err *err);

/* A new link for the next save, where the last one was given up. */
static int conn_revive(ck_client *cl, ck_err *err)
{
    if (!cl->dead)
        return 0;
    char root[PATH_MAX];
    snprintf(root, sizeof root, "%s", cl->root);
    cl->dead = false;
    cl->probe_sent = 0;
    int r = ck__conn_connect_by(cl->sock_path, ck__conn_now() + cl->timeout, &cl->sock, err);
    if (r == 0)
        r = hello(cl, root, err);
    if (r < 0) {
        if (cl->sock >= 0)
            close(cl->sock);
        cl->sock = -1;
        cl->dead = true;
        cl->dead_code = r;
        snprintf(cl->dead_msg, sizeof cl->dead_msg, "%s", ck_err_msg(err));
    }
    return r;
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
    .revive = conn_revive,
};

/* HELLO and its reply, within the time limit; the error names the daemon, its pid
 * and the wait. */
static int hello(ck_client *cl, const char *root, ck_err *err)
{
    struct ucred cr;
    socklen_t crlen = sizeof cr;
    cl->daemon_pid = getsockopt(cl->sock, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) == 0
                   ? cr.pid : 0;
    double t0 = ck__conn_now();
    ck__wbuf w = { 0 };
    ck__proto_start(&w, CK_MSG_HELLO);
    ck__put_str(&w, root ? root : "");
    int r = send_msg(cl, &w, -1, err);
    if (r < 0)
        return r;                   /* named by send_msg */
    ck__msg m;
    if ((r = ck__conn_recv_by(cl->sock, t0 + cl->timeout, t0 + cl->timeout, &m, err)) == 0)
        r = ck_err_set(err, -ETIMEDOUT, "no answer to HELLO within %.1f s (CKPTD_TIMEOUT)",
                       cl->timeout);
    else if (r > 0) {
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
    cl->heard = ck__conn_now();
    return r < 0 ? ck_err_set(err, r, "ckptd at %s (pid %d)", cl->sock_path,
                              (int)cl->daemon_pid) : 0;
}

int ck__client_open_connected(ck_client *cl, const char *sock, const char *root,
                              ck_err *err)
{
    cl->t = &connected;
    cl->sock = -1;
    snprintf(cl->sock_path, sizeof cl->sock_path, "%s", sock);
    int r = ck__conn_connect_by(sock, ck__conn_now() + cl->timeout, &cl->sock, err);
    return r < 0 ? r : hello(cl, root, err);
}
