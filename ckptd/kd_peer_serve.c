/* kd_peer_serve.c - the peer service: a thread of its own that owns a UCX worker and its
 * listener, and answers other nodes' daemons (docs/PROTOCOL.md, "Peer protocol"):
 * HELLO and AUTH (each side proves it holds the job's peer key, kd_peer_key.c; nothing
 * else is taken before, and everything after is sealed under the connection's key),
 * INVENTORY of the copies in the local tier, PUT (a replica,
 * received into LOCAL/.replicas/SRC and committed there), GET (a copy's files, sent)
 * and PART (a copy's files written into the durable copy a drain's committer began,
 * kd_drain_part.c, on a thread of its own, one at a time, paced at --drain-rate).
 *
 * The daemon's event loop never waits on it: the thread does its own polling, and the
 * loop only starts and stops it. Nor does the thread move its transfers' data to or
 * from the disk: a PUT's copy is written by the transfer's writer and checkers, a
 * GET's read ahead by the stream's readers (kd_peer_xfer.c), a PART by its own thread;
 * what stays on it is a copy's opening and its commit (a few small files, the fsyncs
 * and the rename). Peers are other nodes:
 * a message that is not the protocol, of another version, out of order, or naming
 * what it may not is refused with ERROR, logged with the peer's address, and its
 * connection closed; nothing it sends can make the service write outside LOCAL (names
 * are checked as the core checks them, replica roots are this user's directories
 * reached without links, copies are written through the commit protocol). A peer
 * that stays silent for --peer-timeout seconds loses its connection and its transfer;
 * a transfer that fails leaves nothing (its pending directory is removed); one whose
 * receiver dies leaves pending debris that the next start's recovery removes.
 */
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "kd.h"

#include "format/layout.h"

#define TICK_MS 250               /* how often timeouts are looked at */

typedef struct sconn {
    struct sconn *next;
    kd_pconn *pc;
    bool hello, authed;           /* it said HELLO; it proved it holds the peer key */
    char id[CK_COPY_ID_MAX];      /* the peer's daemon id, once it said HELLO */
    kd_phello caller, me;         /* the HELLO and the HELLO_OK: their nonces */
    double last;                  /* kd_now() of its last message */
    kd_xrecv *rx;                 /* a PUT being received */
    double waiting;               /* kd_now() of its first WAITING since DATA; 0: none */
    kd_xsend *tx;                 /* a GET being sent */
    kd_dpart *part;               /* a PART being written */
    uint64_t part_said;           /* its bytes the caller was last told of */
    char name[CK_NAME_MAX];       /* of that transfer */
    char src[CK_COPY_ID_MAX];     /* the source of the PUT's copy */
    bool drop;
} sconn;

struct kd_peers {
    char local[PATH_MAX], durable[PATH_MAX], id[CK_COPY_ID_MAX], listen[KD_PEER_ADDR_MAX];
    char addr[KD_PEER_ADDR_MAX];  /* where it listens, as published */
    uint64_t instance;
    kd_peer_key key;
    unsigned timeout;
    unsigned wait;                /* s a PUT may wait with WAITING and no DATA */
    uint64_t drain_rate;          /* a PART's pace: --drain-rate */
    unsigned checkers;            /* a PUT's receiver's checker threads */
    void (*log)(void *arg, const char *msg);
    void *log_arg;
    kd_ucx *u;
    sconn *conns;
    unsigned xfers;               /* PUTs, GETs and PARTs in progress */
    bool parting;                 /* a PART is (one at a time: each paced at the rate) */
    int stop_fd, ep_fd;
    pthread_t th;
    pthread_mutex_t mu;           /* the start's outcome */
    pthread_cond_t cv;
    bool started;
    int start_r;
    ck_err start_err;
};

__attribute__((format(printf, 2, 3)))
static void say(struct kd_peers *p, const char *fmt, ...)
{
    char msg[2 * CK_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->log(p->log_arg, msg);
}

static const char *who(const sconn *c)
{
    return c->id[0] ? c->id : "?";
}

/* Ends what c was doing: a PUT's copy is removed, a GET's reading stops, a PART is
 * given up (what it wrote removed; the wait is at most its chunk). Returns "PUT",
 * "GET" or "PART" when there was one, for the log line said after (so that whoever
 * reads the log finds the cleanup done), else NULL. */
static const char *end_transfer(struct kd_peers *p, sconn *c)
{
    const char *what = c->rx ? "PUT" : c->tx ? "GET" : c->part ? "PART" : NULL;
    if (what)
        p->xfers--;
    if (c->part)
        p->parting = false;
    kd_xrecv_free(c->rx);
    kd_xsend_free(c->tx);
    kd_dpart_free(c->part);
    c->rx = NULL;
    c->waiting = 0;
    c->tx = NULL;
    c->part = NULL;
    kd_pconn_set_budget(c->pc, KD_PEER_REQ_MAX + KD_PEER_HDR);
    return what;
}

static void send_error(sconn *c, const char *name, int code, const char *msg)
{
    ck__wbuf w = { 0 };
    kd_pw_error(&w, name, code, msg);
    kd_pconn_send_w(c->pc, KD_P_ERROR, &w);
}

/* A peer that broke the protocol: told why, logged, its connection closed once the
 * ERROR went out. */
static void refuse(struct kd_peers *p, sconn *c, int code, const char *msg)
{
    const char *what = end_transfer(p, c);
    say(p, "peer %s (ckptd %s): refused: %s; connection closed", kd_pconn_peer(c->pc), who(c),
        msg);
    if (what)
        say(p, "peer %s: %s of %s abandoned; nothing of it is kept", kd_pconn_peer(c->pc),
            what, c->name);
    send_error(c, "", code, msg);
    c->drop = true;
}

static void on_hello(struct kd_peers *p, sconn *c, kd_pmsg *m)
{
    ck_err err = { 0 };
    if (c->hello) {
        refuse(p, c, -EPROTO, "a second HELLO");
        return;
    }
    ck__wbuf w = { 0 };
    if (kd_peer_answer(&p->key, p->id, p->instance, m, &c->caller, &c->me, &w, &err) < 0) {
        ck__wbuf_free(&w);
        refuse(p, c, err.code, ck_err_msg(&err));
        return;
    }
    snprintf(c->id, sizeof c->id, "%s", c->caller.id);
    c->hello = true;
    kd_pconn_send_w(c->pc, KD_P_HELLO_OK, &w);
}

/* The caller's proof: until it came and holds, nothing but it is taken. */
static void on_auth(struct kd_peers *p, sconn *c, kd_pmsg *m)
{
    ck_err err = { 0 };
    if (c->authed) {
        refuse(p, c, -EPROTO, "a second AUTH");
        return;
    }
    if (kd_peer_check_auth(&p->key, &c->caller, &c->me, m, &err) < 0) {
        if (err.code == -EACCES)
            say(p, "peer %s (says it is ckptd %s): it does not hold the job's peer key %s",
                kd_pconn_peer(c->pc), who(c), p->key.file);
        refuse(p, c, err.code, ck_err_msg(&err));
        return;
    }
    c->authed = true;
    /* From here on, both ways, every message but DATA is sealed under the connection's
     * key: what the caller asks and what it is told cannot be changed on the way. */
    kd_pconn_seal(c->pc, &p->key, &c->caller, &c->me, false);
}

static void on_inventory(struct kd_peers *p, sconn *c, kd_pmsg *m)
{
    ck_err err = { 0 };
    kd_peer_copy *v;
    size_t n;
    if (m->len) {
        refuse(p, c, -EBADMSG, "an INVENTORY with a payload");
        return;
    }
    if (kd_inv_scan(p->local, p->id, &v, NULL, &n, &err) < 0) {
        send_error(c, "", err.code, ck_err_msg(&err));
        return;
    }
    ck__wbuf w = { 0 };
    kd_pw_inventory(&w, v, n);
    kd_peer_copies_free(v, n);
    if (w.len > KD_PEER_MSG_MAX) {
        ck__wbuf_free(&w);
        snprintf(err.msg, sizeof err.msg, "the inventory of %s is larger than a message "
                 "(%u bytes)", p->local, KD_PEER_MSG_MAX);
        send_error(c, "", -E2BIG, err.msg);
        return;
    }
    kd_pconn_send_w(c->pc, KD_P_INVENTORY_OK, &w);
}

static bool may_start(struct kd_peers *p, sconn *c, const char *what, const char *name)
{
    char msg[256];
    if (c->rx || c->tx || c->part) {
        refuse(p, c, -EPROTO, "a request during a transfer");
        return false;
    }
    if (p->xfers < KD_PEER_XFERS_MAX)
        return true;
    snprintf(msg, sizeof msg, "ckptd %s serves %u transfers already (at most %u at once); "
             "try the %s again later", p->id, p->xfers, KD_PEER_XFERS_MAX, what);
    send_error(c, name, -EBUSY, msg);
    return false;
}

static void on_put(struct kd_peers *p, sconn *c, kd_pmsg *m)
{
    ck_err err = { 0 };
    kd_preq q;
    char root[PATH_MAX];
    int r = kd_pw_get_stream(m, &q, &err);
    if (r < 0) {
        kd_preq_free(&q);
        refuse(p, c, r, ck_err_msg(&err));
        return;
    }
    if (!may_start(p, c, "PUT", q.name)) {
        kd_preq_free(&q);
        return;
    }
    if ((r = kd_inv_replica_root(p->local, q.source, root, &err)) == 0)
        r = kd_xrecv_open(root, &q, p->u, p->checkers, p->log, p->log_arg, &c->rx, &err);
    if (r < 0) {
        say(p, "peer %s (ckptd %s): PUT of %s refused: %s", kd_pconn_peer(c->pc), who(c),
            q.name, ck_err_msg(&err));
        send_error(c, q.name, r, ck_err_msg(&err));
        kd_preq_free(&q);
        return;
    }
    p->xfers++;
    snprintf(c->name, sizeof c->name, "%s", q.name);
    snprintf(c->src, sizeof c->src, "%s", q.source);
    kd_preq_free(&q);
    /* Room for a window of DATA ahead of what the copy took, and a request. */
    uint32_t window = kd_xrecv_window(c->rx);
    kd_pconn_set_budget(c->pc, window + KD_PEER_CHUNK_MAX + KD_PEER_REQ_MAX);
    ck__wbuf w = { 0 };
    kd_pw_window(&w, window);
    kd_pconn_send_w(c->pc, KD_P_PUT_READY, &w);
}

/* A PUT's receiving failed (r, err): nothing of it is kept, the sender is told. */
static void put_failed(struct kd_peers *p, sconn *c, int r, const ck_err *err)
{
    end_transfer(p, c);
    say(p, "peer %s (ckptd %s): PUT of %s failed: %s; nothing of it is kept",
        kd_pconn_peer(c->pc), who(c), c->name, ck_err_msg(err));
    send_error(c, c->name, r, ck_err_msg(err));
    c->drop = true;          /* what it still sends is of the failed stream */
}

static void on_data(struct kd_peers *p, sconn *c, kd_pmsg *m)
{
    ck_err err = { 0 };
    if (!c->rx) {
        kd_pmsg_free(m);
        refuse(p, c, -EPROTO, "a DATA outside a PUT");
        return;
    }
    c->waiting = 0;
    int r = kd_xrecv_data(c->rx, m, &err);
    if (r < 0)
        put_failed(p, c, r, &err);
}

/* A PUT's sender has nothing to send yet: its files are being written, or its copy
 * committed (decision 0204). The PUT stays open, for at most --part-timeout from the
 * first WAITING after DATA (serve): the longest a save of the job waits for its parts,
 * past which the sender's save is lost anyway. */
static void on_waiting(struct kd_peers *p, sconn *c, kd_pmsg *m)
{
    ck_err err = { 0 };
    if (!c->rx || m->len) {
        refuse(p, c, -EPROTO, !c->rx ? "a WAITING outside a PUT" : "a WAITING with a payload");
        return;
    }
    int r = kd_xrecv_waiting(c->rx, &err);
    if (r < 0)
        refuse(p, c, r, ck_err_msg(&err));
    else if (!c->waiting)
        c->waiting = kd_now();
}

/* A PUT's manifest, which comes after its data files: its size and SHA-256. */
static void on_manifest(struct kd_peers *p, sconn *c, kd_pmsg *m)
{
    ck_err err = { 0 };
    uint64_t size;
    uint8_t sha[CK_SHA256_LEN];
    if (!c->rx) {
        refuse(p, c, -EPROTO, "a MANIFEST outside a PUT");
        return;
    }
    int r = kd_pw_get_manifest(m, &size, sha, &err);
    if (r == 0)
        r = kd_xrecv_manifest(c->rx, size, sha, &err);
    if (r < 0)
        put_failed(p, c, r, &err);
}

/* What a PUT's writer did: ACKed; once the stream is all written, the copy committed.
 * The writer's progress counts as the peer's: it waits for the ACKs. */
static void put_poll(struct kd_peers *p, sconn *c, double now)
{
    ck_err err = { 0 };
    uint64_t total;
    int r = kd_xrecv_poll(c->rx, c->pc, &err);
    if (r == 2)
        c->last = now;
    if (r == 1 && (r = kd_xrecv_commit(c->rx, &err)) == 0) {
        char waited[128] = "";
        unsigned nw = kd_xrecv_waitings(c->rx), ns = kd_xrecv_switches(c->rx);
        size_t k = 0;
        if (ns)
            k = (size_t)snprintf(waited, sizeof waited, "; its data files came interleaved, "
                                 "%u time(s) from a file not yet whole to another", ns);
        if (nw)
            snprintf(waited + k, sizeof waited - k, "; its sender said WAITING %u time(s)", nw);
        say(p, "peer %s (ckptd %s): replica %s of ckptd %s committed (%llu bytes, window %u "
            "MiB%s)", kd_pconn_peer(c->pc), who(c), c->name, c->src,
            (unsigned long long)kd_xrecv_done(c->rx, &total), kd_xrecv_window(c->rx) >> 20,
            waited);
        ck__wbuf w = { 0 };
        kd_pw_name(&w, c->name);
        kd_pconn_send_w(c->pc, KD_P_COMMITTED, &w);
        end_transfer(p, c);
        return;
    }
    if (r < 0)
        put_failed(p, c, r, &err);
}

static void on_get(struct kd_peers *p, sconn *c, kd_pmsg *m)
{
    ck_err err = { 0 };
    kd_preq ask, q = { 0 };
    char root[PATH_MAX], source[CK_COPY_ID_MAX];
    int r = kd_pw_get_ask(m, &ask, &err);
    if (r < 0) {
        kd_preq_free(&ask);
        refuse(p, c, r, ck_err_msg(&err));
        return;
    }
    if (!may_start(p, c, "GET", ask.name)) {
        kd_preq_free(&ask);
        return;
    }
    r = kd_inv_find(p->local, p->id, &ask, root, sizeof root, source, &err);
    if (r == 0)
        r = kd_xsend_open(root, ask.name, source, &ask, false, &q, &c->tx, &err);
    /* The requester is the stream's one lane: lane 0. */
    if (r == 0 && (r = kd_xsend_to(c->tx, c->pc, p->u, ask.window)) < 0)
        ck_err_set(&err, r, "out of memory");
    if (r < 0) {
        say(p, "peer %s (ckptd %s): GET of %s refused: %s", kd_pconn_peer(c->pc), who(c),
            ask.name, ck_err_msg(&err));
        send_error(c, ask.name, r, ck_err_msg(&err));
        kd_preq_free(&ask);
        return;
    }
    p->xfers++;
    snprintf(c->name, sizeof c->name, "%s", ask.name);
    kd_preq_free(&ask);
    ck__wbuf w = { 0 };
    kd_pw_stream(&w, &q);
    kd_preq_free(&q);
    kd_pconn_send_w(c->pc, KD_P_GET_OK, &w);
}

/* PART: this node's copy's files into the durable copy a drain's committer began. The
 * durable root is this daemon's own --root, the directory one a copy's commit makes
 * (the token), the files those of the copy of that save this node holds. */
static void on_part(struct kd_peers *p, sconn *c, kd_pmsg *m)
{
    ck_err err = { 0 };
    kd_preq q;
    char root[PATH_MAX], source[CK_COPY_ID_MAX];
    int r = kd_pw_get_part(m, &q, &err);
    if (r < 0) {
        kd_preq_free(&q);
        refuse(p, c, r, ck_err_msg(&err));
        return;
    }
    if (!may_start(p, c, "PART", q.name)) {
        kd_preq_free(&q);
        return;
    }
    if (p->parting) {
        send_error(c, q.name, -EBUSY, "this node writes another part of a drain (one at a "
                   "time, each at --drain-rate); try the PART again later");
        kd_preq_free(&q);
        return;
    }
    r = kd_inv_find(p->local, p->id, &q, root, sizeof root, source, &err);
    kd_drain_bucket b = { .rate = p->drain_rate };
    kd_dpart_opts o = { .root = root, .durable = p->durable, .id = p->id, .q = &q,
                        .bucket = &b };
    if (r == 0)
        r = kd_dpart_start(&o, &c->part, &err);
    if (r < 0) {
        say(p, "peer %s (ckptd %s): PART of %s refused: %s", kd_pconn_peer(c->pc), who(c),
            q.name, ck_err_msg(&err));
        send_error(c, q.name, r, ck_err_msg(&err));
        kd_preq_free(&q);
        return;
    }
    say(p, "peer %s (ckptd %s): PART of %s: writing %u data file(s) of the copy in %s into "
        "%s/.pending/%s.%s", kd_pconn_peer(c->pc), who(c), q.name, q.n, root, p->durable,
        q.name, q.token);
    p->xfers++;
    p->parting = true;
    c->part_said = 0;
    snprintf(c->name, sizeof c->name, "%s", q.name);
    kd_preq_free(&q);
}

/* What a PART's thread did: its progress told (an ACK a tick at most; it counts as
 * the peer's, which waits for it), its end said. */
static void part_poll(struct kd_peers *p, sconn *c, double now)
{
    ck_err err = { 0 };
    uint64_t done;
    int r = kd_dpart_poll(c->part, &done, &err);
    /* The last bytes too, before PART_DONE: the caller's count ends whole. */
    if (done != c->part_said) {
        c->part_said = done;
        c->last = now;
        kd_pconn_send(c->pc, KD_P_ACK, done, NULL, 0);
    }
    if (r == 0)
        return;
    if (r == 1) {
        say(p, "peer %s (ckptd %s): PART of %s: written (%llu bytes), checked and fsynced in "
            "the durable root", kd_pconn_peer(c->pc), who(c), c->name,
            (unsigned long long)done);
        ck__wbuf w = { 0 };
        kd_pw_name(&w, c->name);
        kd_pconn_send_w(c->pc, KD_P_PART_DONE, &w);
    } else {
        say(p, "peer %s (ckptd %s): PART of %s failed: %s; nothing of it is kept",
            kd_pconn_peer(c->pc), who(c), c->name, ck_err_msg(&err));
        send_error(c, c->name, r, ck_err_msg(&err));
    }
    end_transfer(p, c);
}

static void on_ack(struct kd_peers *p, sconn *c, kd_pmsg *m)
{
    ck_err err = { 0 };
    if (!c->tx || m->len) {
        refuse(p, c, -EPROTO, !c->tx ? "an ACK outside a GET" : "an ACK with a payload");
        return;
    }
    if (kd_xsend_ack(c->tx, 0, m->arg, &err) < 0)
        refuse(p, c, -EPROTO, ck_err_msg(&err));
}

static void on_abort(struct kd_peers *p, sconn *c, kd_pmsg *m)
{
    ck_err err = { 0 };
    kd_pw_get_error(m, kd_pconn_peer(c->pc), &err);
    if (!c->rx) {
        refuse(p, c, -EPROTO, "an ABORT outside a PUT");
        return;
    }
    end_transfer(p, c);
    say(p, "peer %s (ckptd %s): PUT of %s given up by its sender (%s); nothing of it is kept",
        kd_pconn_peer(c->pc), who(c), c->name, ck_err_msg(&err));
}

static void dispatch(struct kd_peers *p, sconn *c, kd_pmsg *m)
{
    char msg[256];
    if (m->version != KD_PEER_VERSION) {
        snprintf(msg, sizeof msg, "ckptd %s speaks peer protocol version %d; this peer sent "
                 "version %u", p->id, KD_PEER_VERSION, m->version);
        refuse(p, c, -EPROTONOSUPPORT, msg);
    } else if (!c->hello && m->type != KD_P_HELLO) {
        snprintf(msg, sizeof msg, "a %s (type %u) before HELLO", kd_pw_type_name(m->type),
                 m->type);
        refuse(p, c, -EPROTO, msg);
    } else if (c->hello && !c->authed && m->type != KD_P_AUTH) {
        snprintf(msg, sizeof msg, "a %s (type %u) before AUTH: a caller proves that it holds "
                 "the job's peer key first", kd_pw_type_name(m->type), m->type);
        refuse(p, c, -EACCES, msg);
    } else if (m->type == KD_P_AUTH) {
        on_auth(p, c, m);
    } else if (m->type == KD_P_DATA) {
        on_data(p, c, m);
        return;                  /* m is the transfer's now */
    } else if (m->type == KD_P_HELLO) {
        on_hello(p, c, m);
    } else if (m->type == KD_P_INVENTORY) {
        on_inventory(p, c, m);
    } else if (m->type == KD_P_PUT) {
        on_put(p, c, m);
    } else if (m->type == KD_P_MANIFEST) {
        on_manifest(p, c, m);
    } else if (m->type == KD_P_WAITING) {
        on_waiting(p, c, m);
    } else if (m->type == KD_P_GET) {
        on_get(p, c, m);
    } else if (m->type == KD_P_PART) {
        on_part(p, c, m);
    } else if (m->type == KD_P_ACK) {
        on_ack(p, c, m);
    } else if (m->type == KD_P_ABORT) {
        on_abort(p, c, m);
    } else {
        snprintf(msg, sizeof msg, "a message of type %u (%s), which a peer does not send",
                 m->type, kd_pw_type_name(m->type));
        refuse(p, c, -EPROTO, msg);
    }
    kd_pmsg_free(m);
}

/* One connection's turn: its messages, its GET's next chunks, its timeout. */
static void serve(struct kd_peers *p, sconn *c, double now)
{
    ck_err err = { 0 };
    const char *why;
    kd_pmsg *m;
    int r = 0;
    while (!c->drop && (m = kd_pconn_next(c->pc))) {
        c->last = now;
        dispatch(p, c, m);
    }
    if (!c->drop && (r = kd_pconn_failed(c->pc, &why)) && !kd_pconn_broken(c->pc)) {
        /* Refused by the transport layer's checks (a header, a size, a budget). */
        refuse(p, c, r, why);
    } else if (!c->drop && r) {
        /* A peer that hangs up between requests is done, not failed; one that hangs
         * up as its GET's last bytes went out may have taken them all (its final ACK
         * can be lost to the close): whether it kept them is its to say. */
        uint64_t total = 0;
        uint32_t window = 0;
        bool all_sent = c->tx && kd_xsend_all_sent(c->tx);
        if (all_sent) {
            kd_xsend_done(c->tx, 0, &total);
            window = kd_xsend_window(c->tx, 0);
        }
        const char *what = end_transfer(p, c);
        if (all_sent)
            say(p, "peer %s (ckptd %s): GET of %s: hung up with all %llu bytes sent (window %u "
                "MiB)", kd_pconn_peer(c->pc), who(c), c->name, (unsigned long long)total,
                window >> 20);
        else if (what)
            say(p, "peer %s (ckptd %s): %s of %s failed: %s; nothing of it is kept",
                kd_pconn_peer(c->pc), who(c), what, c->name, why);
        c->drop = true;
    }
    if (!c->drop && c->rx)
        put_poll(p, c, now);
    if (!c->drop && c->rx && c->waiting && now - c->waiting > p->wait) {
        ck_err_set(&err, -ETIMEDOUT, "its sender said WAITING for %u s (--part-timeout) and "
                   "sent nothing more", p->wait);
        put_failed(p, c, err.code, &err);
    }
    if (!c->drop && c->part)
        part_poll(p, c, now);
    if (!c->drop && c->tx && (r = kd_xsend_pump(c->tx, &err)) != 0) {
        uint64_t total, done = kd_xsend_done(c->tx, 0, &total);
        if (r > 0) {
            say(p, "peer %s (ckptd %s): GET of %s: sent %llu bytes (window %u MiB)",
                kd_pconn_peer(c->pc), who(c), c->name, (unsigned long long)done,
                kd_xsend_window(c->tx, 0) >> 20);
        } else {
            say(p, "peer %s (ckptd %s): GET of %s failed: %s", kd_pconn_peer(c->pc), who(c),
                c->name, ck_err_msg(&err));
            ck__wbuf w = { 0 };
            kd_pw_abort(&w, err.code, ck_err_msg(&err));
            kd_pconn_send_w(c->pc, KD_P_ABORT, &w);
        }
        end_transfer(p, c);
    }
    if (!c->drop && now - c->last > p->timeout) {
        const char *what = end_transfer(p, c);
        say(p, "peer %s (ckptd %s): silent for %u s (--peer-timeout)%s%s%s%s; connection "
            "closed", kd_pconn_peer(c->pc), who(c), p->timeout, what ? ": " : "",
            what ? what : "", what ? " of " : "", what ? c->name : "");
        if (what)
            say(p, "peer %s: %s of %s abandoned; nothing of it is kept", kd_pconn_peer(c->pc),
                what, c->name);
        c->drop = true;
    }
}

static void accept_new(struct kd_peers *p, double now)
{
    kd_pconn *pc;
    while ((pc = kd_ucx_accepted(p->u))) {
        sconn *c = calloc(1, sizeof *c);
        if (!c) {
            kd_pconn_close(pc, KD_CLOSE_NOW);
            continue;
        }
        c->pc = pc;
        c->last = now;
        c->next = p->conns;
        p->conns = c;
    }
}

static void drop_conns(struct kd_peers *p, bool all)
{
    for (sconn **pp = &p->conns; *pp;) {
        sconn *c = *pp;
        if (!c->drop && !all) {
            pp = &c->next;
            continue;
        }
        const char *what = end_transfer(p, c);
        if (all && what)
            say(p, "stopping: %s of %s with peer %s abandoned; nothing of it is kept", what,
                c->name, kd_pconn_peer(c->pc));
        kd_pconn_close(c->pc, all ? KD_CLOSE_NOW : KD_CLOSE_LAST_WORD);
        *pp = c->next;
        free(c);
    }
}

int kd_peers_check_listen(const char *listen, ck_err *err)
{
    struct sockaddr_storage sa;
    socklen_t len;
    int r = kd_addr_parse(listen, KD_PEER_PORT, &sa, &len, err);
    if (r < 0)
        return r;
    const struct sockaddr_in *a4 = (const void *)&sa;
    const struct sockaddr_in6 *a6 = (const void *)&sa;
    if ((sa.ss_family == AF_INET && a4->sin_addr.s_addr == htonl(INADDR_ANY)) ||
        (sa.ss_family == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&a6->sin6_addr)))
        return ck_err_set(err, -EINVAL, "--peer-listen %s: a wildcard address; name the one "
                          "other nodes reach this node at (it is published for them)", listen);
    return 0;
}

static int start(struct kd_peers *p, ck_err *err)
{
    int r = kd_peers_check_listen(p->listen, err);
    if (r == 0)
        r = kd_ucx_open(p->listen, &p->u, p->addr, sizeof p->addr, err);
    if (r < 0)
        return r;
    struct epoll_event ev = { .events = EPOLLIN };
    p->ep_fd = epoll_create1(EPOLL_CLOEXEC);
    if (p->ep_fd < 0 || epoll_ctl(p->ep_fd, EPOLL_CTL_ADD, kd_ucx_fd(p->u), &ev) < 0 ||
        epoll_ctl(p->ep_fd, EPOLL_CTL_ADD, p->stop_fd, &ev) < 0)
        return ck_err_set(err, -errno, "epoll: %s", strerror(errno));
    if ((r = kd_addr_publish(p->durable, p->id, p->addr, p->instance, err)) < 0)
        return r;
    char file[CK_NODE_ID_MAX + 16];
    ck__name_engine(p->id, CK_ENGINE_PEER, file, sizeof file);
    say(p, "peer service of ckptd %s listening on %s for the local tier %s (address in "
        "%s/%s, --peer-timeout %u s)", p->id, p->addr, p->local, p->durable, file, p->timeout);
    return 0;
}

static void *run(void *arg)
{
    struct kd_peers *p = arg;
    int r = start(p, &p->start_err);
    pthread_mutex_lock(&p->mu);
    p->start_r = r;
    p->started = true;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (r < 0)
        return NULL;
    for (;;) {
        uint64_t v;
        if (read(p->stop_fd, &v, sizeof v) == sizeof v)
            break;
        kd_ucx_progress(p->u);
        double now = kd_now();
        accept_new(p, now);
        for (sconn *c = p->conns; c; c = c->next)
            serve(p, c, now);
        drop_conns(p, false);
        kd_ucx_progress(p->u);
        struct epoll_event evs[4];
        if (kd_ucx_arm(p->u))
            epoll_wait(p->ep_fd, evs, 4, TICK_MS);
    }
    drop_conns(p, true);
    return NULL;
}

/* After the thread ended: what it left. */
static void teardown(struct kd_peers *p)
{
    kd_ucx_close(p->u);
    if (p->start_r == 0)
        kd_addr_unpublish(p->durable, p->id);
    if (p->ep_fd >= 0)
        close(p->ep_fd);
    close(p->stop_fd);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    explicit_bzero(&p->key, sizeof p->key);
    free(p);
}

void kd_peers_stop(struct kd_peers *p)
{
    if (!p)
        return;
    uint64_t one = 1;
    if (write(p->stop_fd, &one, sizeof one) != sizeof one)
        say(p, "stopping the peer service: eventfd: %s", strerror(errno));
    pthread_join(p->th, NULL);
    say(p, "peer service of ckptd %s stopped", p->id);
    teardown(p);
}

int kd_peers_start(const kd_peer_opts *o, struct kd_peers **out, ck_err *err)
{
    *out = NULL;
    struct kd_peers *p = calloc(1, sizeof *p);
    if (!p)
        return ck_err_set(err, -ENOMEM, "out of memory");
    snprintf(p->local, sizeof p->local, "%s", o->local_root);
    snprintf(p->durable, sizeof p->durable, "%s", o->durable_root);
    snprintf(p->id, sizeof p->id, "%s", o->id);
    snprintf(p->listen, sizeof p->listen, "%s", o->listen);
    p->instance = o->instance;
    p->key = *o->key;
    p->timeout = o->timeout;
    p->wait = o->wait;
    p->drain_rate = o->drain_rate;
    p->checkers = o->checkers;
    p->log = o->log;
    p->log_arg = o->log_arg;
    p->ep_fd = -1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (p->stop_fd < 0 || pthread_create(&p->th, NULL, run, p) != 0) {
        int e = p->stop_fd < 0 ? errno : EAGAIN;
        if (p->stop_fd >= 0)
            close(p->stop_fd);
        free(p);
        return ck_err_set(err, -e, "starting the peer service: %s", strerror(e));
    }
    pthread_mutex_lock(&p->mu);
    while (!p->started)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    if (p->start_r < 0) {
        int r = ck_err_set(err, p->start_r, "%s", ck_err_msg(&p->start_err));
        pthread_join(p->th, NULL);
        teardown(p);
        return r;
    }
    *out = p;
    return 0;
}
