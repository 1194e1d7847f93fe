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
#include <poll.h>
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

/* A message that came whole, without waiting (*out NULL: none yet): one of the peer's
 * version; an ERROR or ABORT is made an error, as is a connection that failed. */
static int take(call *k, kd_pmsg **out, ck_err *err)
{
    kd_pmsg *m = kd_pconn_next(k->pc);
    *out = NULL;
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
    *out = m;
    return m || !kd_pconn_failed(k->pc, NULL) ? 0 : failed(k, -ECONNRESET, err);
}

/* A peer that said nothing for secs while this call waited for what. */
static int silent(call *k, unsigned secs, const char *what, ck_err *err)
{
    return ck_err_set(err, -ETIMEDOUT, "peer %s%s%s%s said nothing for %u s while this call "
                      "waited for %s", k->c->addr, k->peer_id[0] ? " (ckptd " : "", k->peer_id,
                      k->peer_id[0] ? ")" : "", secs, what);
}

/* The next message, within the timeout (take). what says what is awaited. With x, a
 * stream being received, its writer's progress is acknowledged meanwhile (and counts
 * as the peer's: it awaits the ACKs), and 1 with no message says the stream is all
 * written. */
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
        int r = take(k, out, err);
        if (r < 0 || *out)
            return r;
        if (k->c->stop && k->c->stop(k->c->stop_arg))
            return given_up(k->c, err);
        if (kd_now() - last > k->c->timeout)
            return silent(k, k->c->timeout, what, err);
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

/* ---- PUT: a copy to one peer or to several, read once (decision 0201) ---- */

/* One peer of a PUT being made: a lane of the stream once it said PUT_READY. */
typedef struct lane {
    call k;
    kd_peer_put_to *to;
    kd_peer_call c;                /* to->c, as its PUT is opened */
    int at;                        /* its lane (kd_xsend_to) */
    bool began;                    /* it took the stream */
    bool streaming;                /* and it has not ended */
    double t0, last;               /* kd_now() of its PUT, and when it last spoke */
    double said;                   /* when it was last sent DATA or WAITING */
    uint64_t said_sent;            /* the stream's bytes sent then */
} lane;

/* PUT, then PUT_READY: the peer takes the stream, on a lane of x. With others already
 * waiting for the stream (first false), the peer has half its timeout to take it: the
 * waiting peers' services give a PUT up after their whole timeout without DATA. */
static int lane_open(lane *l, bool first, const kd_preq *q, kd_xsend *x, ck_err *err)
{
    call *k = &l->k;
    kd_pmsg *m;
    uint32_t window = 0;
    l->t0 = kd_now();
    l->c = *l->to->c;
    if (!first && l->c.timeout > 1)
        l->c.timeout /= 2;
    int r = call_open(k, &l->c, err);
    if (r == 0) {
        ck__wbuf w = { 0 };
        kd_pw_stream(&w, q);
        if ((r = kd_pconn_send_w(k->pc, KD_P_PUT, &w)) < 0)
            r = failed(k, r, err);
    }
    if (r == 0 && (r = expect(k, KD_P_PUT_READY, &m, err)) == 0) {
        ck_err why = { 0 };
        if ((r = kd_pw_get_window(m, &window, &why)) < 0)
            ck_err_set(err, r, "peer %s: %s", l->to->c->addr, ck_err_msg(&why));
        kd_pmsg_free(m);
    }
    if (r == 0 && (l->at = kd_xsend_to(x, k->pc, k->u, window)) < 0)
        r = ck_err_set(err, l->at, "out of memory");
    l->began = l->streaming = r == 0;
    l->last = l->said = kd_now();
    return r;
}

/* Lane l's PUT ended: r 0, its peer committed the replica; else r, said in err. */
static void lane_end(lane *l, kd_xsend *x, int r, const ck_err *err)
{
    if (l->streaming)
        kd_xsend_drop(x, l->at);
    l->streaming = false;
    l->to->r = r;
    l->to->err = r < 0 ? *err : (ck_err){ 0 };
    l->to->secs = kd_now() - l->t0;
}

/* What lane l's peer said since the last look (*heard: anything): ACKs, and once it
 * took every byte, COMMITTED. 1 once it committed, 0 while it goes on, < 0 failed. */
static int lane_poll(lane *l, kd_xsend *x, const char *name, bool *heard, ck_err *err)
{
    kd_pmsg *m;
    int r;
    kd_ucx_progress(l->k.u);
    while ((r = take(&l->k, &m, err)) == 0 && m) {
        uint64_t total, acked = kd_xsend_done(x, l->at, &total);
        l->last = kd_now();
        *heard = true;
        if (m->type == KD_P_ACK && acked < total) {
            if ((r = kd_xsend_ack(x, l->at, m->arg, err)) == 0)
                progress(l->to->c, kd_xsend_done(x, l->at, &total), total);
        } else if (m->type == KD_P_COMMITTED && acked == total) {
            char got[CK_NAME_MAX];
            if ((r = kd_pw_get_name(m, got, err)) == 0)
                r = strcmp(got, name) ? ck_err_set(err, -EPROTO, "peer %s committed %s, not %s",
                                                   l->to->c->addr, got, name) : 1;
        } else {
            r = ck_err_set(err, -EPROTO, "peer %s answered %s where %s was due", l->to->c->addr,
                           kd_pw_type_name(m->type),
                           kd_pw_type_name(acked < total ? KD_P_ACK : KD_P_COMMITTED));
        }
        kd_pmsg_free(m);
        if (r != 0)
            return r;
    }
    return r;
}

/* Whether lane l waits on its peer (bytes not acknowledged, or its COMMITTED), and
 * whether it is starved (it took all it was sent, and another's window holds the
 * rest back). */
static bool owed(const lane *l, kd_xsend *x)
{
    uint64_t total, acked = kd_xsend_done(x, l->at, &total);
    return acked < kd_xsend_sent(x) || acked == total;
}

static bool starved(const lane *l, kd_xsend *x)
{
    uint64_t total, acked = kd_xsend_done(x, l->at, &total);
    return acked == kd_xsend_sent(x) && acked < total;
}

/* A lane whose peer took all it was sent, while the stream waits for its source (its
 * files being written, its copy committed: kd_xsend_waits), says WAITING a third of the
 * timeout after it was last sent anything: the peer's service would give the PUT up at
 * its --peer-timeout (peer protocol 8). A lane held back by another's window says
 * nothing: that wait is bounded by the other's timeout (put_stream). */
static int lane_keep(lane *l, kd_xsend *x, double now, ck_err *err)
{
    uint64_t sent = kd_xsend_sent(x);
    if (sent != l->said_sent) {
        l->said_sent = sent;
        l->said = now;
    }
    if (now - l->said < l->to->c->timeout / 3.0 || !starved(l, x) || !kd_xsend_waits(x))
        return 0;
    l->said = now;
    int r = kd_pconn_send(l->k.pc, KD_P_WAITING, 0, NULL, 0);
    return r < 0 ? failed(&l->k, r, err) : 0;
}

/* Until a streaming lane's worker has something, ms at most. */
static void lanes_wait(lane *v, uint32_t n, int ms)
{
    struct pollfd pf[KD_REPLICAS_MAX];
    nfds_t k = 0;
    for (uint32_t i = 0; i < n && k < KD_REPLICAS_MAX; i++) {
        if (!v[i].streaming)
            continue;
        if (!kd_ucx_arm(v[i].k.u))
            return;                /* it has events: look again now */
        pf[k++] = (struct pollfd){ .fd = kd_ucx_fd(v[i].k.u), .events = POLLIN };
    }
    poll(pf, k, ms);
}

/* PUTs of the stream x, declared by q, to the n peers of to, each lane's end in its
 * to; x's readers stopped at the end. */
static void put_stream(kd_peer_put_to **to, uint32_t n, kd_xsend *x, const kd_preq *q,
                       const char *name)
{
    ck_err e = { 0 };
    int r = 0;
    lane *v = calloc(n, sizeof *v);
    for (uint32_t i = 0; !v && i < n; i++)
        to[i]->r = ck_err_set(&to[i]->err, -ENOMEM, "out of memory");
    if (!v)
        return;
    uint32_t live = 0;
    for (uint32_t i = 0; i < n; i++) {
        v[i].to = to[i];
        if ((r = lane_open(&v[i], live == 0, q, x, &e)) < 0)
            lane_end(&v[i], x, r, &e);
        live += r == 0;
    }
    while (live) {
        /* What every window allows goes out, each chunk read once for every lane. */
        if ((r = kd_xsend_pump(x, &e)) < 0) {
            for (uint32_t i = 0; i < n; i++) {
                ck_err le = e;
                if (v[i].streaming)
                    lane_end(&v[i], x, kd_pconn_failed(v[i].k.pc, NULL)
                                       ? failed(&v[i].k, r, &le) : r, &le);
            }
            break;
        }
        bool any_starved = false, heard = false;
        for (uint32_t i = 0; i < n; i++)
            any_starved |= v[i].streaming && starved(&v[i], x);
        for (uint32_t i = 0; i < n; i++) {
            lane *l = &v[i];
            const kd_peer_call *c = l->to->c;
            if (!l->streaming)
                continue;
            r = lane_poll(l, x, name, &heard, &e);
            if (r == 0 && c->stop && c->stop(c->stop_arg))
                r = given_up(c, &e);
            double now = kd_now();
            if (r == 0)
                r = lane_keep(l, x, now, &e);
            if (r == 0 && !owed(l, x))
                l->last = now;
            /* A lane that holds a starved one back is given up at half the timeout: the
             * starved one's peer, awaiting DATA, gives its PUT up at the whole. */
            unsigned limit = any_starved && !starved(l, x) && c->timeout > 1 ? c->timeout / 2
                                                                               : c->timeout;
            if (r == 0 && now - l->last > limit) {
                uint64_t total, acked = kd_xsend_done(x, l->at, &total);
                r = silent(&l->k, limit, acked < total ? "an ACK" : "COMMITTED", &e);
            }
            if (r != 0) {
                lane_end(l, x, r > 0 ? 0 : r, &e);
                live--;
            }
        }
        if (live && !heard)
            lanes_wait(v, n, 100);
    }
    /* The stream's readers end before the lanes' workers they wake. */
    kd_xsend_stop(x);
    for (uint32_t i = 0; i < n; i++) {
        lane *l = &v[i];
        /* A peer mid-stream drops the copy rather than wait it out; one that went
         * silent or whose connection failed is closed at once. */
        bool aborted = l->began && l->to->r < 0 && l->to->r != -ETIMEDOUT &&
                       !kd_pconn_failed(l->k.pc, NULL);
        if (aborted) {
            ck__wbuf w = { 0 };
            kd_pw_abort(&w, l->to->r, ck_err_msg(&l->to->err));
            kd_pconn_send_w(l->k.pc, KD_P_ABORT, &w);
        }
        call_close(&l->k, l->to->r == 0 || aborted);
    }
    free(v);
}

/* One attempt at PUTs of ROOT/NAME to the n peers of to, each lane's end in its to. */
static void put_once(kd_peer_put_to **to, uint32_t n, const char *root, const char *name)
{
    kd_preq q;
    kd_xsend *x;
    ck_err e = { 0 };
    int r = kd_xsend_open(root, name, to[0]->c->id, NULL, true, &q, &x, &e);
    for (uint32_t i = 0; r < 0 && i < n; i++) {
        to[i]->r = r;
        to[i]->err = e;
    }
    if (r < 0)
        return;
    put_stream(to, n, x, &q, name);
    kd_xsend_free(x);
    kd_preq_free(&q);
}

/* The peers of to[0, n) to ask, each one's outcome cleared; NULL (each told) when out of
 * memory. */
static kd_peer_put_to **asking(kd_peer_put_to *to, uint32_t n)
{
    kd_peer_put_to **ask = malloc((n ? n : 1) * sizeof *ask);
    for (uint32_t i = 0; i < n; i++) {
        to[i].r = ask ? 0 : ck_err_set(&to[i].err, -ENOMEM, "out of memory");
        if (ask)
            ask[i] = &to[i];
    }
    return ask;
}

static int first_error(const kd_peer_put_to *to, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (to[i].r < 0)
            return to[i].r;
    return 0;
}

int kd_peer_put_stream(kd_peer_put_to *to, uint32_t n, kd_xsend *x, const kd_preq *q,
                       const char *name)
{
    kd_peer_put_to **all = asking(to, n);
    if (!all)
        return -ENOMEM;
    put_stream(all, n, x, q, name);
    free(all);
    return first_error(to, n);
}

int kd_peer_put_fan(kd_peer_put_to *to, uint32_t n, const char *root, const char *name)
{
    kd_peer_put_to **ask = asking(to, n);
    if (!ask)
        return -ENOMEM;
    /* Peers that were busy are asked again, together, within the call's timeout. */
    double t0 = kd_now();
    unsigned ms = 0;
    for (uint32_t k = n; k;) {
        put_once(ask, k, root, name);
        uint32_t busy = 0;
        for (uint32_t i = 0; i < k; i++)
            if (ask[i]->r == -EBUSY)
                ask[busy++] = ask[i];
        int r = -EBUSY;
        ck_err e = { 0 };
        if (busy && again(ask[0]->c, t0, &ms, &r, &e)) {
            k = busy;
            continue;
        }
        /* Out of time they stay busy; stopped by the caller, they are given up. */
        for (uint32_t i = 0; r != -EBUSY && i < busy; i++) {
            ask[i]->r = r;
            ask[i]->err = e;
        }
        k = 0;
    }
    free(ask);
    return first_error(to, n);
}

int kd_fan_open(kd_fan *f, ck_err *err)
{
    *f = (kd_fan){ .p = calloc(KD_REPLICAS_MAX - 1, sizeof *f->p),
                   .to = calloc(KD_REPLICAS_MAX - 1, sizeof *f->to) };
    if (f->p && f->to)
        return 0;
    kd_fan_free(f);
    return ck_err_set(err, -ENOMEM, "out of memory");
}

int kd_fan_add(kd_fan *f, const char *root, const char *name, bool by_id,
               const kd_peer_call *proto, ck_err *err)
{
    if (f->n == KD_REPLICAS_MAX - 1)
        return ck_err_set(err, -E2BIG, "more than %u peers", KD_REPLICAS_MAX - 1);
    kd_fan_peer *p = &f->p[f->n];
    uint64_t instance;
    int r = by_id ? kd_addr_lookup(root, name, p->addr, sizeof p->addr, &instance, err) : 0;
    if (r < 0)
        return r;
    if (!by_id)
        snprintf(p->addr, sizeof p->addr, "%s", name);
    p->name = name;
    p->moved = 0;
    p->c = *proto;
    p->c.addr = p->addr;
    p->c.arg = &p->moved;
    f->to[f->n] = (kd_peer_put_to){ .c = &p->c };
    f->n++;
    return 0;
}

void kd_fan_free(kd_fan *f)
{
    free(f->p);
    free(f->to);
    *f = (kd_fan){ 0 };
}

int kd_peer_put(const kd_peer_call *c, const char *root, const char *name, ck_err *err)
{
    kd_peer_put_to to = { .c = c };
    int r = kd_peer_put_fan(&to, 1, root, name);
    if (r < 0)
        *err = to.err;
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
