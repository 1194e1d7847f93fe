/* kd_peer_client.c - calls to another node's peer service: INVENTORY, PUT, GET, PART
 * (docs/PROTOCOL.md, "Peer protocol"), each after the HELLO in which both sides prove
 * that they hold the job's peer key (kd_peer_key.c).
 *
 * Each call is synchronous and owns everything it uses: a UCX worker of its own, one
 * connection, the files it reads or writes. So it may run on any thread that may
 * block (the daemon's worker threads, ckptctl), never on the event loop, and calls on
 * several threads run side by side; the pieces that replicate and restore run them on
 * threads of their own and hand the outcome to the loop as the saver's threads do
 * (docs/decisions/0157-peer-calls-synchronous.md). Every wait ends when the peer has
 * said nothing for the call's timeout, naming the peer and what was awaited; a peer
 * that closes or dies fails the call at once. A peer that serves as many transfers as
 * it takes already refuses a PUT, GET or PART with -EBUSY: it is busy, not lost, and the
 * call is made again, after a pause that grows from 50 ms to 1 s, for at most the
 * call's timeout in all (the peer is speaking meanwhile); unless the caller, which has
 * other holders to ask, wants the refusal at once (busy_fails).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kd.h"

#include "io/rootfs.h"

typedef struct call {
    const kd_peer_call *c;
    kd_ucx *u;
    kd_pconn *pc;
    char peer_id[CK_COPY_ID_MAX];
} call;

static int failed(call *k, int r, ck_err *err)
{
    const char *why;
    int f = kd_pconn_failed(k->pc, &why);
    return ck_err_set(err, f ? f : r, "peer %s%s%s%s: %s", k->c->addr,
                      k->peer_id[0] ? " (ckptd " : "", k->peer_id, k->peer_id[0] ? ")" : "",
                      f ? why : strerror(-r));
}

static void progress(const kd_peer_call *c, uint64_t done, uint64_t total)
{
    if (c->progress)
        c->progress(c->arg, done, total);
}

/* A call its caller stopped (kd_peer_call.stop). */
static int given_up(const kd_peer_call *c, ck_err *err)
{
    return ck_err_set(err, -ECANCELED, "the call to peer %s was given up", c->addr);
}

/* The next message, within the timeout: one of the peer's version, an ERROR made an
 * error. what says what is awaited. With x, a stream being received, its writer's
 * progress is acknowledged meanwhile (and counts as the peer's: it awaits the ACKs),
 * and 1 with no message says the stream is all written. */
static int wait_msg(call *k, const char *what, kd_xrecv *x, kd_pmsg **out, ck_err *err)
{
    double last = kd_now();
    *out = NULL;
    for (;;) {
        int w = x ? kd_xrecv_poll(x, k->pc, err) : 0;
        if (w < 0)
            return w;
        /* The last bytes too: the stream is all written once they are. */
        if (w > 0) {
            uint64_t total, done = kd_xrecv_done(x, &total);
            progress(k->c, done, total);
            last = kd_now();
        }
        if (w == 1)
            return w;
        kd_pmsg *m = kd_pconn_next(k->pc);
        if (m && m->version != KD_PEER_VERSION) {
            int r = ck_err_set(err, -EPROTONOSUPPORT, "peer %s speaks ckptd peer protocol "
                               "version %u, this build version %d", k->c->addr, m->version,
                               KD_PEER_VERSION);
            kd_pmsg_free(m);
            return r;
        }
        if (m && (m->type == KD_P_ERROR || m->type == KD_P_ABORT)) {
            char peer[KD_PEER_ADDR_MAX + CK_COPY_ID_MAX + 16];
            snprintf(peer, sizeof peer, "peer %s%s%s%s", k->c->addr,
                     k->peer_id[0] ? " (ckptd " : "", k->peer_id, k->peer_id[0] ? ")" : "");
            int r = kd_pw_get_error(m, peer, err);
            kd_pmsg_free(m);
            return r;
        }
        if (m) {
            *out = m;
            return 0;
        }
        if (kd_pconn_failed(k->pc, NULL))
            return failed(k, -ECONNRESET, err);
        if (k->c->stop && k->c->stop(k->c->stop_arg))
            return given_up(k->c, err);
        if (kd_now() - last > k->c->timeout)
            return ck_err_set(err, -ETIMEDOUT, "peer %s%s%s%s said nothing for %u s while "
                              "this call waited for %s", k->c->addr,
                              k->peer_id[0] ? " (ckptd " : "", k->peer_id,
                              k->peer_id[0] ? ")" : "", k->c->timeout, what);
        kd_ucx_wait(k->u, 100);
    }
}

/* A message of type, or an error naming what came instead; with x, as wait_msg. */
static int expect_in(call *k, uint16_t type, kd_xrecv *x, kd_pmsg **out, ck_err *err)
{
    int r = wait_msg(k, kd_pw_type_name(type), x, out, err);
    if (r == 0 && (*out)->type != type) {
        r = ck_err_set(err, -EPROTO, "peer %s answered %s where %s was due", k->c->addr,
                       kd_pw_type_name((*out)->type), kd_pw_type_name(type));
        kd_pmsg_free(*out);
        *out = NULL;
    }
    return r;
}

static int expect(call *k, uint16_t type, kd_pmsg **out, ck_err *err)
{
    return expect_in(k, type, NULL, out, err);
}

static int call_open(call *k, const kd_peer_call *c, ck_err *err)
{
    *k = (call){ .c = c };
    int r = kd_ucx_open(NULL, &k->u, NULL, 0, err);
    if (r == 0)
        r = kd_ucx_connect(k->u, c->addr, &k->pc, err);
    if (r < 0)
        return r;
    /* Replies up to a message, and a window of a GET's DATA with it. */
    kd_pconn_set_budget(k->pc, KD_PEER_MSG_MAX + KD_PEER_WINDOW_MAX + KD_PEER_CHUNK_MAX);
    /* Each side proves that it holds the job's peer key before anything is asked. */
    ck__wbuf w = { 0 };
    kd_phello me, them;
    kd_pmsg *m;
    if ((r = kd_peer_greet(c->id, &me, &w, err)) < 0)
        return r;
    if ((r = kd_pconn_send_w(k->pc, KD_P_HELLO, &w)) < 0)
        return failed(k, r, err);
    if ((r = expect(k, KD_P_HELLO_OK, &m, err)) < 0)
        return r;
    ck_err why = { 0 };
    r = kd_peer_check_answer(c->key, &me, m, &them, &w, &why);
    kd_pmsg_free(m);
    if (r < 0) {
        ck__wbuf_free(&w);
        return ck_err_set(err, r, "peer %s: %s", c->addr, ck_err_msg(&why));
    }
    snprintf(k->peer_id, sizeof k->peer_id, "%s", them.id);
    if ((r = kd_pconn_send_w(k->pc, KD_P_AUTH, &w)) < 0)
        return failed(k, r, err);
    /* Everything after AUTH, both ways, is sealed under this connection's key. */
    kd_pconn_seal(k->pc, c->key, &me, &them, true);
    return 0;
}

/* done: the exchange ended as it should, so the connection closes after what was sent
 * went out; otherwise at once. */
static void call_close(call *k, bool done)
{
    if (k->pc)
        kd_pconn_close(k->pc, done ? KD_CLOSE_FLUSH : KD_CLOSE_NOW);
    kd_ucx_close(k->u);
}

int kd_peer_inventory(const kd_peer_call *c, kd_peer_copy **out, size_t *n, ck_err *err)
{
    call k;
    kd_pmsg *m = NULL;
    *out = NULL;
    *n = 0;
    int r = call_open(&k, c, err);
    if (r == 0 && (r = kd_pconn_send(k.pc, KD_P_INVENTORY, 0, NULL, 0)) < 0)
        r = failed(&k, r, err);
    if (r == 0 && (r = expect(&k, KD_P_INVENTORY_OK, &m, err)) == 0)
        r = kd_pw_get_inventory(m, out, n, err);
    kd_pmsg_free(m);
    call_close(&k, r == 0);
    return r;
}

/* Sends the stream under the peer's acks, then awaits its COMMITTED. */
static int stream_out(call *k, kd_xsend *x, const char *name, ck_err *err)
{
    kd_pmsg *m;
    uint64_t total;
    int r;
    while ((r = kd_xsend_pump(x, k->pc, err)) == 0) {
        if ((r = expect(k, KD_P_ACK, &m, err)) < 0)
            return r;
        r = kd_xsend_ack(x, m->arg, err);
        kd_pmsg_free(m);
        if (r < 0)
            return r;
        progress(k->c, kd_xsend_done(x, &total), total);
    }
    if (r < 0)
        return r;
    char got[CK_NAME_MAX];
    if ((r = expect(k, KD_P_COMMITTED, &m, err)) < 0)
        return r;
    r = kd_pw_get_name(m, got, err);
    kd_pmsg_free(m);
    if (r == 0 && strcmp(got, name))
        r = ck_err_set(err, -EPROTO, "peer %s committed %s, not %s", k->c->addr, got, name);
    return r;
}

/* After a busy peer's refusal of a call begun at t0: whether to make it again (within
 * the call's timeout), having paused *ms, which grows; the refusal's message is then
 * dropped. The pause ends early when the caller stops the call: *r is then -ECANCELED,
 * said in err. */
static bool again(const kd_peer_call *c, double t0, unsigned *ms, int *r, ck_err *err)
{
    if (c->busy_fails)
        return false;
    *ms = *ms ? (*ms < 500 ? *ms * 2 : 1000) : 50;
    if (kd_now() + *ms / 1000.0 - t0 > c->timeout)
        return false;
    /* In slices of at most 100 ms, the bound on a stop everywhere in a call. */
    for (unsigned left = *ms; left;) {
        if (c->stop && c->stop(c->stop_arg)) {
            *r = given_up(c, err);
            return false;
        }
        unsigned step = left < 100 ? left : 100;
        struct timespec ts = { 0, (long)step * 1000000 };
        nanosleep(&ts, NULL);
        left -= step;
    }
    *err = (ck_err){ 0 };
    return true;
}

static int put_once(const kd_peer_call *c, const char *root, const char *name, ck_err *err)
{
    call k = { .c = c };
    kd_preq q;
    kd_xsend *x;
    kd_pmsg *m;
    int r = kd_xsend_open(root, name, c->id, NULL, &q, &x, err);
    if (r < 0)
        return r;
    if ((r = call_open(&k, c, err)) == 0) {
        ck__wbuf w = { 0 };
        kd_pw_stream(&w, &q);
        if ((r = kd_pconn_send_w(k.pc, KD_P_PUT, &w)) < 0)
            r = failed(&k, r, err);
    }
    bool streaming = false;
    uint32_t window;
    if (r == 0 && (r = expect(&k, KD_P_PUT_READY, &m, err)) == 0) {
        ck_err why = { 0 };
        if ((r = kd_pw_get_window(m, &window, &why)) < 0)
            ck_err_set(err, r, "peer %s: %s", c->addr, ck_err_msg(&why));
        kd_pmsg_free(m);
    }
    if (r == 0) {
        kd_xsend_set_window(x, window);
        streaming = true;
        r = stream_out(&k, x, name, err);
    }
    /* A PUT refused before its stream (busy, a replica there already) has nothing to
     * give up. */
    bool aborted = streaming && r < 0 && r != -ETIMEDOUT && !kd_pconn_failed(k.pc, NULL);
    if (aborted) {
        /* The peer may be mid-stream: it drops the copy rather than wait it out. */
        ck__wbuf w = { 0 };
        kd_pw_abort(&w, r, ck_err_msg(err));
        kd_pconn_send_w(k.pc, KD_P_ABORT, &w);
    }
    kd_preq_free(&q);
    kd_xsend_free(x);
    call_close(&k, r == 0 || aborted);
    return r;
}

/* What GET_OK says is coming must be what was asked: the name, and the files named. */
static int check_offer(call *k, const kd_preq *ask, const kd_preq *q, ck_err *err)
{
    if (strcmp(q->name, ask->name) || (ask->source[0] && strcmp(q->source, ask->source)))
        return ck_err_set(err, -EPROTO, "peer %s offers %s of ckptd %s for %s of ckptd %s",
                          k->c->addr, q->name, q->source, ask->name,
                          ask->source[0] ? ask->source : "any");
    if (ask->all)
        return 0;
    bool same = q->n == ask->n;
    for (uint32_t i = 0; same && i < q->n; i++)
        same = !strcmp(q->files[i].name, ask->files[i].name);
    return same ? 0 : ck_err_set(err, -EPROTO, "peer %s offers other data files of %s than "
                                 "were asked for", k->c->addr, ask->name);
}

/* Takes the stream into x until it is whole: written and checked. */
static int stream_in(call *k, kd_xrecv *x, ck_err *err)
{
    kd_pmsg *m;
    int r;
    while ((r = expect_in(k, KD_P_DATA, x, &m, err)) == 0)
        if ((r = kd_xrecv_data(x, m, err)) < 0)
            return r;
    return r < 0 ? r : 0;
}

int kd_peer_put(const kd_peer_call *c, const char *root, const char *name, ck_err *err)
{
    double t0 = kd_now();
    unsigned ms = 0;
    int r;
    while ((r = put_once(c, root, name, err)) == -EBUSY && again(c, t0, &ms, &r, err))
        ;
    return r;
}

static int get_once(const kd_peer_call *c, const kd_preq *ask, const char *into, ck_err *err)
{
    call k = { .c = c };
    kd_preq q = { 0 };
    kd_xrecv *x = NULL;
    kd_pmsg *m = NULL;
    /* Said before the peer starts sending; the copy's own begin checks it again under
     * the name's lock. */
    int rootfd = ck__root_open(into, err);
    if (rootfd < 0)
        return rootfd;
    close(rootfd);
    ck_ckpt *ck = NULL;
    if (ck_open(into, ask->name, &ck, NULL) != -ENOENT) {
        ck_close(ck);
        return ck_err_set(err, -EEXIST, "%s/%s exists already: nothing is fetched", into,
                          ask->name);
    }
    int r = call_open(&k, c, err);
    if (r == 0) {
        /* The window of the receiver opened below, with the same checkers. */
        kd_preq stated = *ask;
        stated.window = kd_peer_window(c->checkers);
        ck__wbuf w = { 0 };
        kd_pw_ask(&w, &stated);
        if ((r = kd_pconn_send_w(k.pc, KD_P_GET, &w)) < 0)
            r = failed(&k, r, err);
    }
    if (r == 0 && (r = expect(&k, KD_P_GET_OK, &m, err)) == 0 &&
        (r = kd_pw_get_stream(m, &q, err)) == 0 && (r = check_offer(&k, ask, &q, err)) == 0)
        r = kd_xrecv_open(into, &q, k.u, c->checkers, NULL, NULL, &x, err);
    kd_pmsg_free(m);
    if (r == 0 && (r = stream_in(&k, x, err)) == 0)
        r = kd_xrecv_commit(x, err);
    kd_xrecv_free(x);
    kd_preq_free(&q);
    call_close(&k, r == 0);
    return r;
}

int kd_peer_get(const kd_peer_call *c, const kd_preq *ask, const char *into, ck_err *err)
{
    double t0 = kd_now();
    unsigned ms = 0;
    int r;
    while ((r = get_once(c, ask, into, err)) == -EBUSY && again(c, t0, &ms, &r, err))
        ;
    return r;
}

/* PART: the peer writes its files; it says how many bytes it wrote (ACK) as it goes,
 * which keeps the call's timeout from running out while it works. */
static int part_once(const kd_peer_call *c, const kd_preq *q, ck_err *err)
{
    call k;
    kd_pmsg *m = NULL;
    int r = call_open(&k, c, err);
    if (r == 0) {
        ck__wbuf w = { 0 };
        kd_pw_part(&w, q);
        if ((r = kd_pconn_send_w(k.pc, KD_P_PART, &w)) < 0)
            r = failed(&k, r, err);
    }
    while (r == 0 && (r = wait_msg(&k, "PART_DONE", NULL, &m, err)) == 0 &&
           m->type == KD_P_ACK && !m->len) {
        progress(c, m->arg, 0);
        kd_pmsg_free(m);
        m = NULL;
    }
    char got[CK_NAME_MAX];
    if (r == 0 && m->type != KD_P_PART_DONE)
        r = ck_err_set(err, -EPROTO, "peer %s answered %s where PART_DONE was due", c->addr,
                       kd_pw_type_name(m->type));
    if (r == 0 && (r = kd_pw_get_name(m, got, err)) == 0 && strcmp(got, q->name))
        r = ck_err_set(err, -EPROTO, "peer %s wrote a part of %s, not of %s", c->addr, got,
                       q->name);
    kd_pmsg_free(m);
    call_close(&k, r == 0);
    return r;
}

int kd_peer_part(const kd_peer_call *c, const kd_preq *q, ck_err *err)
{
    double t0 = kd_now();
    unsigned ms = 0;
    int r;
    while ((r = part_once(c, q, err)) == -EBUSY && again(c, t0, &ms, &r, err))
        ;
    return r;
}
