/* kd_peer_ucx.c - UCX for the peer service: one UCP context and worker per thread (the
 * service's, or a client call's), its listener, its endpoints, and whole messages
 * (docs/decisions/0156-peer-transport-ucx.md).
 *
 * Every message is one active message (ucp_am_send_nbx, id KD_PEER_AM_ID): a 16-byte
 * header and a payload. UCX picks the protocol: eager for small ones, rendezvous for
 * large ones where the transport has it (zero-copy RDMA on InfiniBand and RoCE), which
 * the handler receives into a buffer of its own (ucp_am_recv_data_nbx). Messages are
 * handed over in the order they arrived, each once its bytes are all here.
 *
 * Once sealed (kd_pconn_seal, after the HELLO and AUTH), every message but DATA is
 * sealed on its way out and handed over only with the right seal, which is taken off
 * (decision 0196): the seal is the transport's, so no message above can forget it.
 *
 * A connection is failed (and its messages dropped) at the first thing that is not
 * the protocol: a header of another size or magic, a message larger than its type
 * allows, or more bytes waiting to be taken than its budget. The peer's version is
 * passed up: the layers above answer another version with an error naming both. UCX's
 * peer error mode reports a peer that closed or died (its endpoint's error handler);
 * one that merely stops answering is the caller's timeout to catch.
 *
 * A closed connection stays in the list until every request on it completed (their
 * callbacks point at it), then is freed by kd_ucx_progress.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/crypto.h>
#include <ucp/api/ucp.h>

#include "kd.h"

#define BUDGET_DEFAULT ((size_t)KD_PEER_REQ_MAX + KD_PEER_HDR)

struct kd_pconn {
    struct kd_pconn *next;
    kd_ucx *u;
    ucp_ep_h ep;
    char peer[KD_PEER_ADDR_MAX];
    kd_pmsg *in_head, *in_tail;    /* in order of arrival */
    size_t in_bytes, budget;       /* waiting to be taken, and how many may */
    size_t unsent;
    unsigned reqs;                 /* sends and receives in flight */
    int failed;                    /* no more messages taken: -errno */
    bool broken;                   /* the transport failed: nothing can be sent either */
    char why[192];
    bool fresh;                    /* accepted, not yet handed out */
    bool closed;                   /* kd_pconn_close was called */
    double linger;                 /* closed: kd_now() until which sends may still finish */
    bool wait_peer;                /* ... and the peer close first (KD_CLOSE_LAST_WORD) */
    void *close_req;               /* the endpoint's close, in flight */
    bool ep_gone;                  /* the endpoint is closed (or never was) */
    void *user;
    /* Sealed (kd_pconn_seal): every message but DATA carries a seal, numbered in each
     * direction. */
    bool sealed, caller;
    uint8_t session[KD_PEER_KEY_LEN];
    uint64_t seq_out, seq_in;
};

struct kd_ucx {
    ucp_context_h ctx;
    ucp_worker_h worker;
    kd_bufs *bufs;                 /* DATA's buffers (kd_peer_bufs.c) */
    ucp_listener_h listener;
    int efd;
    kd_pconn *conns;
    unsigned nconns;
};

/* A send in flight: the header lives as long as the request. */
typedef struct tx {
    kd_pconn *c;
    uint8_t hdr[KD_PEER_HDR];
    void *payload;
    size_t len;
    void (*release)(void *ctx, void *payload);   /* NULL: free(payload) */
    void *ctx;
} tx;

static void tx_release(tx *t)
{
    if (t->release)
        t->release(t->ctx, t->payload);
    else
        free(t->payload);
}

static void put_header(uint8_t h[KD_PEER_HDR], uint16_t version, uint16_t type, uint64_t arg)
{
    uint32_t magic = KD_PEER_MAGIC;
    for (int i = 0; i < 4; i++)
        h[i] = (uint8_t)(magic >> (8 * i));
    h[4] = (uint8_t)version, h[5] = (uint8_t)(version >> 8);
    h[6] = (uint8_t)type, h[7] = (uint8_t)(type >> 8);
    for (int i = 0; i < 8; i++)
        h[8 + i] = (uint8_t)(arg >> (8 * i));
}

/* Frees the messages c holds, not yet taken. */
static void drop_queue(kd_pconn *c)
{
    while (c->in_head) {
        kd_pmsg *m = c->in_head;
        c->in_head = m->next;
        c->in_bytes -= m->len;
        kd_pmsg_free(m);
    }
    c->in_tail = NULL;
}

static void conn_free(kd_pconn *c)
{
    drop_queue(c);
    explicit_bzero(c->session, sizeof c->session);
    free(c);
}

/* A rendezvous receive in flight, into m. */
typedef struct rx {
    kd_pconn *c;
    kd_pmsg *m;
} rx;

void kd_pconn_fail(kd_pconn *c, int code, const char *why)
{
    if (c->failed)
        return;
    c->failed = code < 0 ? code : -EPROTO;
    snprintf(c->why, sizeof c->why, "%s", why);
}

int kd_pconn_failed(const kd_pconn *c, const char **why)
{
    if (why)
        *why = c->why;
    return c->failed;
}

bool kd_pconn_broken(const kd_pconn *c)
{
    return c->broken;
}

const char *kd_pconn_peer(const kd_pconn *c)
{
    return c->peer;
}

size_t kd_pconn_unsent(const kd_pconn *c)
{
    return c->unsent;
}

void kd_pconn_set_budget(kd_pconn *c, size_t bytes)
{
    c->budget = bytes;
}

void *kd_pconn_user(const kd_pconn *c)
{
    return c->user;
}

void kd_pconn_set_user(kd_pconn *c, void *user)
{
    c->user = user;
}

void kd_pmsg_free(kd_pmsg *m)
{
    if (m) {
        if (m->bufs)
            kd_bufs_put(m->bufs, m->data);
        else
            free(m->data);
        free(m);
    }
}

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    kd_pconn *c = arg;
    (void)ep;
    char why[160];
    snprintf(why, sizeof why, "the connection failed (UCX: %s)", ucs_status_string(status));
    kd_pconn_fail(c, status == UCS_ERR_ENDPOINT_TIMEOUT ? -ETIMEDOUT : -ECONNRESET, why);
    c->broken = true;
}

static kd_pconn *conn_new(kd_ucx *u, const char *peer)
{
    kd_pconn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->u = u;
    c->budget = BUDGET_DEFAULT;
    c->ep_gone = true;
    snprintf(c->peer, sizeof c->peer, "%s", peer);
    c->next = u->conns;
    u->conns = c;
    u->nconns++;
    return c;
}

static kd_pconn *conn_of(kd_ucx *u, ucp_ep_h ep)
{
    for (kd_pconn *c = u->conns; c && ep; c = c->next)
        if (c->ep == ep && !c->ep_gone)
            return c;
    return NULL;
}

static void on_conn_request(ucp_conn_request_h req, void *arg)
{
    kd_ucx *u = arg;
    ucp_conn_request_attr_t attr = { .field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR };
    char peer[KD_PEER_ADDR_MAX] = "a peer";
    if (ucp_conn_request_query(req, &attr) == UCS_OK)
        kd_addr_format((const struct sockaddr *)&attr.client_address, peer, sizeof peer);
    kd_pconn *c = u->nconns < KD_PEER_CONNS_MAX ? conn_new(u, peer) : NULL;
    if (!c) {
        ucp_listener_reject(u->listener, req);
        return;
    }
    ucp_ep_params_t p = { .field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLER,
                          .conn_request = req, .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                          .err_handler = { .cb = on_ep_error, .arg = c } };
    if (ucp_ep_create(u->worker, &p, &c->ep) != UCS_OK) {
        kd_pconn_fail(c, -ECONNABORTED, "could not take the connection");
        c->closed = true;
        return;
    }
    c->ep_gone = false;
    c->fresh = true;
}

kd_pconn *kd_ucx_accepted(kd_ucx *u)
{
    for (kd_pconn *c = u->conns; c; c = c->next)
        if (c->fresh) {
            c->fresh = false;
            return c;
        }
    return NULL;
}

static void enqueue(kd_pconn *c, kd_pmsg *m)
{
    if (c->in_tail)
        c->in_tail->next = m;
    else
        c->in_head = m;
    c->in_tail = m;
    c->in_bytes += m->len;
}

static void on_recv_done(void *req, ucs_status_t status, size_t length, void *arg)
{
    rx *x = arg;
    x->c->reqs--;
    if (status != UCS_OK || length != x->m->len)
        kd_pconn_fail(x->c, -EIO, "a message's bytes did not arrive");
    else
        x->m->ready = true;
    free(x);
    if (req)
        ucp_request_free(req);
}

/* Whether a message of type and len may come: its size against its type's limit and
 * the connection's budget. */
static bool admissible(kd_pconn *c, uint16_t type, size_t len)
{
    char why[160];
    size_t max = type == KD_P_DATA ? KD_PEER_CHUNK_MAX : KD_PEER_MSG_MAX + KD_PEER_SEAL_LEN;
    if (len > max) {
        snprintf(why, sizeof why, "a %s message of %zu bytes (at most %zu)",
                 kd_pw_type_name(type), len, max);
        kd_pconn_fail(c, -EMSGSIZE, why);
        return false;
    }
    if (c->in_bytes + len > c->budget) {
        snprintf(why, sizeof why, "more than %zu bytes of messages in flight (a %s of %zu "
                 "bytes came on top of %zu)", c->budget, kd_pw_type_name(type), len,
                 c->in_bytes);
        kd_pconn_fail(c, -ENOBUFS, why);
        return false;
    }
    return true;
}

static ucs_status_t on_am(void *arg, const void *header, size_t header_length, void *data,
                          size_t length, const ucp_am_recv_param_t *param)
{
    kd_ucx *u = arg;
    kd_pconn *c = param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP ? conn_of(u, param->reply_ep)
                                                                      : NULL;
    if (!c || c->failed || c->closed)
        return UCS_OK;   /* dropped: UCX releases a rendezvous it was not asked to take */
    const uint8_t *h = header;
    uint32_t magic = 0;
    if (header_length == KD_PEER_HDR)
        magic = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 |
                (uint32_t)h[3] << 24;
    if (magic != KD_PEER_MAGIC) {
        kd_pconn_fail(c, -EPROTO, "a message that is not of the ckptd peer protocol (its "
                      "header)");
        return UCS_OK;
    }
    uint16_t type = (uint16_t)(h[6] | h[7] << 8);
    if (!admissible(c, type, length))
        return UCS_OK;
    kd_pmsg *m = calloc(1, sizeof *m);
    /* A DATA's bytes go into a buffer of the pool, aligned as O_DIRECT wants them: the
     * copy writes them from there (ops/copy_in.c) rather than through its own. */
    if (m && type == KD_P_DATA && length <= kd_bufs_size(u->bufs) &&
        (m->data = kd_bufs_get(u->bufs)))
        m->bufs = u->bufs;
    else if (m)
        m->data = malloc(length ? length : 1);
    if (!m || !m->data) {
        kd_pmsg_free(m);
        kd_pconn_fail(c, -ENOMEM, "out of memory for a message");
        return UCS_OK;
    }
    m->version = (uint16_t)(h[4] | h[5] << 8);
    m->type = type;
    for (int i = 7; i >= 0; i--)
        m->arg = m->arg << 8 | h[8 + i];
    m->len = length;
    enqueue(c, m);
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        memcpy(m->data, data, length);
        m->ready = true;
        return UCS_OK;
    }
    rx *x = malloc(sizeof *x);
    if (!x) {
        kd_pconn_fail(c, -ENOMEM, "out of memory for a message");
        return UCS_OK;
    }
    *x = (rx){ .c = c, .m = m };
    ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                              UCP_OP_ATTR_FIELD_USER_DATA,
                              .cb.recv_am = on_recv_done, .user_data = x };
    c->reqs++;
    ucs_status_ptr_t r = ucp_am_recv_data_nbx(u->worker, data, m->data, length, &p);
    if (UCS_PTR_IS_ERR(r)) {
        c->reqs--;
        free(x);
        kd_pconn_fail(c, -EIO, "a message's bytes could not be received");
    } else if (r == NULL) {
        on_recv_done(NULL, UCS_OK, length, x);
    }
    return UCS_OK;
}

int kd_ucx_open(const char *listen, kd_ucx **out, char *bound, size_t len, ck_err *err)
{
    *out = NULL;
    kd_ucx *u = calloc(1, sizeof *u);
    if (!u)
        return ck_err_set(err, -ENOMEM, "out of memory");
    u->efd = -1;
    ucp_config_t *cfg;
    ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
    ucp_params_t pp = { .field_mask = UCP_PARAM_FIELD_FEATURES,
                        .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP };
    if (st == UCS_OK) {
        st = ucp_init(&pp, cfg, &u->ctx);
        ucp_config_release(cfg);
    }
    ucp_worker_params_t wp = { .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                               .thread_mode = UCS_THREAD_MODE_SINGLE };
    if (st == UCS_OK)
        st = ucp_worker_create(u->ctx, &wp, &u->worker);
    ucp_am_handler_param_t hp = { .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                                                UCP_AM_HANDLER_PARAM_FIELD_CB |
                                                UCP_AM_HANDLER_PARAM_FIELD_ARG |
                                                UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
                                  .id = KD_PEER_AM_ID, .cb = on_am, .arg = u,
                                  .flags = UCP_AM_FLAG_WHOLE_MSG };
    if (st == UCS_OK)
        st = ucp_worker_set_am_recv_handler(u->worker, &hp);
    if (st == UCS_OK)
        st = ucp_worker_get_efd(u->worker, &u->efd);
    if (st == UCS_OK && !(u->bufs = kd_bufs_new(KD_PEER_CHUNK, KD_PEER_BUFS_KEEP)))
        st = UCS_ERR_NO_MEMORY;
    if (st != UCS_OK) {
        kd_ucx_close(u);
        return ck_err_set(err, -EIO, "UCX: cannot start a worker: %s (UCX_TLS and "
                          "UCX_NET_DEVICES choose the transports)", ucs_status_string(st));
    }
    *out = u;
    if (!listen)
        return 0;
    struct sockaddr_storage sa;
    socklen_t sl;
    int r = kd_addr_parse(listen, KD_PEER_PORT, &sa, &sl, err);
    if (r < 0)
        return r;
    ucp_listener_params_t lp = { .field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                                               UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
                                 .sockaddr = { (const struct sockaddr *)&sa, sl },
                                 .conn_handler = { on_conn_request, u } };
    st = ucp_listener_create(u->worker, &lp, &u->listener);
    if (st != UCS_OK)
        return ck_err_set(err, st == UCS_ERR_BUSY ? -EADDRINUSE : -EADDRNOTAVAIL,
                          "listening for peers on %s: %s", listen, ucs_status_string(st));
    ucp_listener_attr_t la = { .field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR };
    if (ucp_listener_query(u->listener, &la) == UCS_OK)
        kd_addr_format((const struct sockaddr *)&la.sockaddr, bound, len);
    else
        snprintf(bound, len, "%s", listen);
    return 0;
}

int kd_ucx_connect(kd_ucx *u, const char *addr, kd_pconn **out, ck_err *err)
{
    struct sockaddr_storage sa;
    socklen_t sl;
    int r = kd_addr_parse(addr, KD_PEER_PORT, &sa, &sl, err);
    if (r < 0)
        return r;
    kd_pconn *c = conn_new(u, addr);
    if (!c)
        return ck_err_set(err, -ENOMEM, "out of memory");
    ucp_ep_params_t p = { .field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLER,
                          .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
                          .sockaddr = { (const struct sockaddr *)&sa, sl },
                          .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                          .err_handler = { .cb = on_ep_error, .arg = c } };
    ucs_status_t st = ucp_ep_create(u->worker, &p, &c->ep);
    if (st != UCS_OK) {
        c->closed = true;
        return ck_err_set(err, -ECONNREFUSED, "peer %s: cannot connect: %s", addr,
                          ucs_status_string(st));
    }
    c->ep_gone = false;
    *out = c;
    return 0;
}

/* Whether m carries its seal, which is then taken off; else c fails, and nothing it
 * still holds is handed out. */
static bool unseal(kd_pconn *c, kd_pmsg *m)
{
    char why[192];
    uint8_t h[KD_PEER_HDR], want[KD_PEER_SEAL_LEN];
    const char *type = kd_pw_type_name(m->type);
    int r = -EBADMSG;
    if (m->len < KD_PEER_SEAL_LEN) {
        snprintf(why, sizeof why, "a %s message (type %u) without its seal", type, m->type);
    } else {
        put_header(h, m->version, m->type, m->arg);
        size_t n = m->len - KD_PEER_SEAL_LEN;
        if ((r = kd_peer_seal(c->session, !c->caller, c->seq_in, h, m->data, n, want)) == 0 &&
            CRYPTO_memcmp(want, m->data + n, KD_PEER_SEAL_LEN) == 0) {
            m->len = n;
            c->seq_in++;
            return true;
        }
        snprintf(why, sizeof why, r < 0 ? "out of memory to check a %s message's seal"
                 : "a %s message whose seal is not this connection's (changed on the way, "
                 "played again, or not from the peer that proved it holds the key)", type);
        r = r < 0 ? r : -EBADMSG;
    }
    kd_pconn_fail(c, r, why);
    drop_queue(c);
    return false;
}

kd_pmsg *kd_pconn_next(kd_pconn *c)
{
    /* What arrived whole before a failure still counts: an ERROR just before the peer
     * closed says why it closed. */
    kd_pmsg *m = c->in_head;
    if (!m || !m->ready)
        return NULL;
    c->in_head = m->next;
    if (!c->in_head)
        c->in_tail = NULL;
    c->in_bytes -= m->len;
    m->next = NULL;
    if (c->sealed && m->type != KD_P_DATA && !unseal(c, m)) {
        kd_pmsg_free(m);
        return NULL;
    }
    return m;
}

void kd_pconn_seal(kd_pconn *c, const kd_peer_key *key, const kd_phello *caller,
                   const kd_phello *service, bool is_caller)
{
    kd_peer_session(key, caller, service, c->session);
    c->caller = is_caller;
    c->sealed = true;
}

static void on_send_done(void *req, ucs_status_t status, void *arg)
{
    tx *t = arg;
    t->c->reqs--;
    t->c->unsent -= t->len;
    if (status != UCS_OK) {
        char why[160];
        snprintf(why, sizeof why, "a send failed (UCX: %s)", ucs_status_string(status));
        kd_pconn_fail(t->c, -ECONNRESET, why);
        t->c->broken = true;
    }
    tx_release(t);
    free(t);
    if (req)
        ucp_request_free(req);
}

int kd_pconn_send_buf(kd_pconn *c, uint16_t type, uint64_t arg, void *payload, size_t len,
                      void (*release)(void *ctx, void *payload), void *ctx)
{
    tx *t = NULL;
    if (c->broken || c->closed || !(t = malloc(sizeof *t))) {
        tx_release(&(tx){ .payload = payload, .release = release, .ctx = ctx });
        if (c->broken || c->closed)
            return c->failed ? c->failed : -ENOTCONN;
        kd_pconn_fail(c, -ENOMEM, "out of memory for a send");
        return -ENOMEM;
    }
    *t = (tx){ .c = c, .payload = payload, .len = len, .release = release, .ctx = ctx };
    put_header(t->hdr, KD_PEER_VERSION, type, arg);
    if (c->sealed && type != KD_P_DATA) {
        /* The seal goes at the payload's end: only a malloc'd payload can grow. */
        uint8_t *b = release ? NULL : realloc(payload, len + KD_PEER_SEAL_LEN);
        int r = release ? -EINVAL : !b ? -ENOMEM
                : kd_peer_seal(c->session, c->caller, c->seq_out, t->hdr, b, len, b + len);
        if (r < 0) {
            t->payload = b ? b : payload;
            tx_release(t);
            free(t);
            kd_pconn_fail(c, r, release ? "a message to seal in a pool's buffer, which cannot "
                                          "grow by its seal" : "out of memory to seal a message");
            return r;
        }
        c->seq_out++;
        t->payload = payload = b;
        t->len = len += KD_PEER_SEAL_LEN;
    }
    ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                              UCP_OP_ATTR_FIELD_USER_DATA |
                                              UCP_OP_ATTR_FIELD_FLAGS,
                              .cb.send = on_send_done, .user_data = t,
                              .flags = UCP_AM_SEND_FLAG_REPLY };
    c->reqs++;
    c->unsent += len;
    ucs_status_ptr_t r = ucp_am_send_nbx(c->ep, KD_PEER_AM_ID, t->hdr, KD_PEER_HDR, payload,
                                         len, &p);
    if (UCS_PTR_IS_ERR(r)) {
        on_send_done(NULL, UCS_PTR_STATUS(r), t);
        return c->failed;
    }
    if (r == NULL)
        on_send_done(NULL, UCS_OK, t);
    return 0;
}

int kd_pconn_send(kd_pconn *c, uint16_t type, uint64_t arg, void *payload, size_t len)
{
    return kd_pconn_send_buf(c, type, arg, payload, len, NULL, NULL);
}

int kd_pconn_send_w(kd_pconn *c, uint16_t type, ck__wbuf *w)
{
    if (w->oom) {
        ck__wbuf_free(w);
        kd_pconn_fail(c, -ENOMEM, "out of memory for a message");
        return -ENOMEM;
    }
    void *p = w->p;
    size_t len = w->len;
    *w = (ck__wbuf){ 0 };
    return kd_pconn_send(c, type, 0, p, len);
}

/* Every close is forced: UCX's flushing close waits for a peer that may never answer
 * (one that stopped reading, or never finished connecting), and a worker destroyed with
 * such an endpoint still open aborts the process. What was sent gets a moment to go
 * out first (the linger), which is all an ERROR before a close needs. */
static void close_ep(kd_pconn *c)
{
    ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                              .flags = UCP_EP_CLOSE_FLAG_FORCE };
    ucs_status_ptr_t r = ucp_ep_close_nbx(c->ep, &p);
    c->linger = 0;
    if (r && !UCS_PTR_IS_ERR(r))
        c->close_req = r;
    else
        c->ep_gone = true;
}

#define LINGER_S 1.0

void kd_pconn_close(kd_pconn *c, kd_close how)
{
    if (c->closed)
        return;
    c->closed = true;
    c->wait_peer = how == KD_CLOSE_LAST_WORD;
    if (c->ep_gone)
        return;
    if (how != KD_CLOSE_NOW && !c->broken && (c->unsent || c->wait_peer))
        c->linger = kd_now() + LINGER_S;
    else
        close_ep(c);
}

/* Closes the endpoints whose linger is over, frees the connections that are closed and
 * have nothing in flight. */
static void reap(kd_ucx *u)
{
    double now = kd_now();
    for (kd_pconn **pp = &u->conns; *pp;) {
        kd_pconn *c = *pp;
        /* A TCP connection closed with bytes unread is reset, and a reset can discard
         * what the peer has not read yet: an ERROR is the peer's to read before the
         * close, so its connection lingers until the peer hangs up. */
        if (c->linger && (c->broken || now >= c->linger || (!c->unsent && !c->wait_peer)))
            close_ep(c);
        if (c->close_req && ucp_request_check_status(c->close_req) != UCS_INPROGRESS) {
            ucp_request_free(c->close_req);
            c->close_req = NULL;
            c->ep_gone = true;
        }
        if (!c->closed || !c->ep_gone || c->reqs) {
            pp = &c->next;
            continue;
        }
        *pp = c->next;
        u->nconns--;
        conn_free(c);
    }
}

void kd_ucx_progress(kd_ucx *u)
{
    while (ucp_worker_progress(u->worker))
        ;
    reap(u);
}

void kd_ucx_signal(kd_ucx *u)
{
    /* UCX: safe from any thread, whatever the worker's thread mode. */
    ucp_worker_signal(u->worker);
}

bool kd_ucx_arm(kd_ucx *u)
{
    return ucp_worker_arm(u->worker) == UCS_OK;
}

int kd_ucx_fd(const kd_ucx *u)
{
    return u->efd;
}

void kd_ucx_wait(kd_ucx *u, int ms)
{
    kd_ucx_progress(u);
    if (ms > 0 && kd_ucx_arm(u)) {
        struct pollfd pf = { .fd = u->efd, .events = POLLIN };
        poll(&pf, 1, ms);
    }
    kd_ucx_progress(u);
}

void kd_ucx_close(kd_ucx *u)
{
    if (!u)
        return;
    if (u->listener)
        ucp_listener_destroy(u->listener);
    for (kd_pconn *c = u->conns; c; c = c->next) {
        kd_pconn_close(c, KD_CLOSE_FLUSH);
        if (c->linger)
            c->linger = kd_now() + LINGER_S / 4;
    }
    /* Forced closes complete what was in flight with errors; a second is plenty. */
    double deadline = kd_now() + 2 * LINGER_S;
    while (u->worker && u->conns && kd_now() < deadline)
        kd_ucx_wait(u, 10);
    if (u->worker)
        ucp_worker_destroy(u->worker);
    if (u->ctx)
        ucp_cleanup(u->ctx);
    /* Whatever a worker that would not finish still held. */
    while (u->conns) {
        kd_pconn *c = u->conns;
        u->conns = c->next;
        conn_free(c);
    }
    kd_bufs_drop(u->bufs);
    free(u);
}
