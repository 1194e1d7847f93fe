/* peer_tool - test machinery for ckptd's peer service (never installed):
 *
 *   peer_tool put ADDR FROM NAME ID [kill|stop]
 *       kd_peer_put of FROM/NAME to ADDR as daemon ID; with kill or stop, after the
 *       first acknowledgement it SIGKILLs or SIGSTOPs itself: a sender that dies or
 *       stops answering mid-transfer.
 *   peer_tool get ADDR INTO NAME PID kill|stop|none [--all | FILE...]
 *       kd_peer_get of NAME into INTO; after the first DATA taken it SIGKILLs or
 *       SIGSTOPs process PID (the serving daemon): a sender that dies or stops mid-GET.
 *   peer_tool serve-version ADDR VERSION SECS
 *       a fake service at ADDR whose every reply claims VERSION, for SECS seconds: what
 *       a client of this build says to a service of another version.
 *   peer_tool serve-dying DURABLE ID LOCAL
 *       a service that dies mid-GET: it publishes daemon ID's address in DURABLE as a
 *       ckptd does, answers HELLO and the INVENTORY of the local tier LOCAL as the real
 *       service does, serves a GET of a manifest alone whole, and to a GET of data
 *       files sends GET_OK and the stream's first window, then dies (SIGKILL) at the
 *       first ACK: a holder that dies mid-transfer. It serves for 60 s at most.
 *   peer_tool serve-slow DURABLE ID LOCAL SECS
 *       the same service, but a GET of data files is answered SECS seconds late, then
 *       served whole: a holder slow to start a transfer.
 *   peer_tool serve-unsealed DURABLE ID LOCAL
 *       the same service, serving whole, but nothing it says after AUTH is sealed: what
 *       someone on the path who does not hold the key would say in its place.
 *   peer_tool serve-lying DURABLE ID LOCAL
 *       the same service, serving whole and sealed, but its GET_OK declares a manifest
 *       SHA-256 that is not that of the manifest it sends.
 *   peer_tool serve-greedy DURABLE ID LOCAL
 *       the same service, but it answers a PUT with a PUT_READY that states a window
 *       of 1 GiB, more than a sender may be made to hold.
 *   peer_tool serve-mute DURABLE ID LOCAL
 *       the same service, but it answers a PUT with a PUT_READY of the least window,
 *       then takes its DATA and never acknowledges any: a peer that goes silent
 *       mid-stream while its connection stays up.
 *   peer_tool put-spread ADDR FROM NAME
 *       a PUT of FROM/NAME that begins every data file at once (4096 bytes of each in
 *       turn, then the rest of each, then the manifest): more files in part than a
 *       copy holds open, which the service holds back (exit 0 once COMMITTED, 1 when
 *       refused).
 *   peer_tool hostile ADDR CASE
 *       one exchange that breaks the protocol (CASE: see cases[] below) and what came
 *       back; exit 0 when the service refused it (an ERROR, or the connection closed),
 *       1 when it took it, 2 on a usage or local error.
 *
 * Every call waits at most --timeout-like bounds of its own (TIMEOUT, 5 s unless
 * $PEER_TOOL_TIMEOUT says otherwise). Prints "ok ..." or "error: MESSAGE" and exits
 * 0 or 1. The job's peer key is $CKPTD_PEER_KEY's, else (serve-*) DURABLE/.ckptd.key. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include "kd.h"

#include "format/owner.h"
#include "ops/copy.h"

static pid_t victim;
static kd_peer_key key;            /* the job's, as its daemons hold it */
static const char *action = "none";
static bool acted;

static void after_first(void *arg, uint64_t done, uint64_t total)
{
    (void)arg;
    (void)total;
    if (acted || !done || !strcmp(action, "none"))
        return;
    acted = true;
    int sig = !strcmp(action, "kill") ? SIGKILL : SIGSTOP;
    printf("acting: %s on pid %d after %llu bytes\n", action, (int)(victim ? victim : getpid()),
           (unsigned long long)done);
    fflush(stdout);
    kill(victim ? victim : getpid(), sig);
}

static unsigned timeout(void)
{
    const char *e = getenv("PEER_TOOL_TIMEOUT");
    return e && atoi(e) > 0 ? (unsigned)atoi(e) : 5;
}

static int report(int r, ck_err *err)
{
    if (r < 0) {
        printf("error: %s\n", ck_err_msg(err));
        return 1;
    }
    printf("ok\n");
    return 0;
}

/* ---- hostile exchanges ---- */

typedef struct conn {
    kd_ucx *u;
    kd_pconn *pc;
} conn;

static int connect_to(const char *addr, conn *c)
{
    ck_err err = { 0 };
    if (kd_ucx_open(NULL, &c->u, NULL, 0, &err) < 0 ||
        kd_ucx_connect(c->u, addr, &c->pc, &err) < 0) {
        fprintf(stderr, "peer_tool: %s\n", ck_err_msg(&err));
        return -1;
    }
    kd_pconn_set_budget(c->pc, KD_PEER_MSG_MAX + KD_PEER_WINDOW_MAX + KD_PEER_CHUNK_MAX);
    return 0;
}

/* The service's next message within secs, an ERROR said as a refusal; NULL when none
 * came, or when the connection closed (*closed, and why said). */
static kd_pmsg *next_in(conn *c, double secs, bool *closed)
{
    const char *why;
    *closed = false;
    for (double end = kd_now() + secs; kd_now() < end; kd_ucx_wait(c->u, 50)) {
        kd_pmsg *m = kd_pconn_next(c->pc);
        if (m && m->type == KD_P_ERROR) {
            ck_err err = { 0 };
            kd_pw_get_error(m, "service", &err);
            printf("refused: %s\n", ck_err_msg(&err));
        }
        if (m)
            return m;
        if ((*closed = kd_pconn_failed(c->pc, &why))) {
            printf("closed: %s\n", why);
            return NULL;
        }
    }
    return NULL;
}

/* The service's answer within secs: 0 for an ERROR or a closed connection (printed), 1
 * for a message of type want or anything else (printed), 2 for none. */
static int answer_in(conn *c, uint16_t want, double secs)
{
    bool closed;
    kd_pmsg *m = next_in(c, secs, &closed);
    int r = !m ? (closed ? 0 : 2) : m->type == KD_P_ERROR ? 0 : 1;
    if (m && m->type != want && m->type != KD_P_ERROR)
        printf("unexpected: a %s\n", kd_pw_type_name(m->type));
    kd_pmsg_free(m);
    return r;
}

/* The same within the tool's timeout, and said when none came. */
static int answer(conn *c, uint16_t want)
{
    int r = answer_in(c, want, timeout());
    if (r == 2)
        printf("no answer within %u s\n", timeout());
    return r;
}

static void send_raw(conn *c, uint16_t type, uint64_t arg, const void *p, size_t n);

/* Sends the HELLO of me; the service's HELLO_OK (the caller frees it), or NULL when it
 * refused or said something else (printed). */
static kd_pmsg *greeted(conn *c, const kd_phello *me)
{
    ck__wbuf w = { 0 };
    kd_pw_hello(&w, me, false);
    kd_pconn_send_w(c->pc, KD_P_HELLO, &w);
    for (double end = kd_now() + timeout(); kd_now() < end; kd_ucx_wait(c->u, 50)) {
        kd_pmsg *m = kd_pconn_next(c->pc);
        if (m && m->type == KD_P_HELLO_OK)
            return m;
        if (m || kd_pconn_failed(c->pc, NULL)) {
            printf("no HELLO_OK: %s\n", m ? kd_pw_type_name(m->type) : "connection closed");
            kd_pmsg_free(m);
            return NULL;
        }
    }
    printf("no HELLO_OK within %u s\n", timeout());
    return NULL;
}

/* HELLO and AUTH as a daemon of the job says them; out (may be NULL) gets the AUTH,
 * them the service's HELLO_OK (what follows is sealed, or not, by the caller). */
static int hello_auth(conn *c, kd_phello *me, ck__wbuf *out, kd_phello *them)
{
    ck_err err = { 0 };
    ck__wbuf w = { 0 };
    kd_pmsg *m = NULL;
    if (kd_peer_greet("hostile", me, &w, &err) < 0 || (ck__wbuf_free(&w), !(m = greeted(c, me))))
        return -1;
    int r = kd_peer_check_answer(&key, me, m, them, &w, &err);
    kd_pmsg_free(m);
    if (r < 0) {
        printf("error: %s\n", ck_err_msg(&err));
        return -1;
    }
    if (out)
        ck__put_bytes(out, w.p, w.len);
    kd_pconn_send_w(c->pc, KD_P_AUTH, &w);
    return 0;
}

/* HELLO and AUTH, then the connection sealed, as a daemon of the job goes on. */
static int hello(conn *c)
{
    kd_phello me, them;
    int r = hello_auth(c, &me, NULL, &them);
    if (r == 0)
        kd_pconn_seal(c->pc, &key, &me, &them, true);
    return r;
}

/* After HELLO and AUTH, one INVENTORY (empty) the way case cs seals it, sent as it is;
 * then the connection is sealed, to read the service's sealed answer:
 *   unsealed         no seal at all
 *   bad-seal         the right seal with one bit flipped
 *   reflected-seal   the seal the service would put on it: the other direction's
 *   replayed-seal    the right seal, and the same message again (its number is not the
 *                    next one); the first is answered, the second refused */
static int sealed_case(conn *c, const char *cs)
{
    kd_phello me, them;
    uint8_t session[KD_PEER_KEY_LEN], seal[KD_PEER_SEAL_LEN], h[KD_PEER_HDR] = { 0x43, 0x4b,
        0x50, 0x31, KD_PEER_VERSION & 0xff, KD_PEER_VERSION >> 8, KD_P_INVENTORY, 0 };
    if (hello_auth(c, &me, NULL, &them) < 0)
        return 2;
    kd_peer_session(&key, &me, &them, session);
    if (kd_peer_seal(session, strcmp(cs, "reflected-seal") != 0, 0, h, NULL, 0, seal) < 0)
        return 2;
    if (!strcmp(cs, "bad-seal"))
        seal[7] ^= 0x10;
    send_raw(c, KD_P_INVENTORY, 0, seal, strcmp(cs, "unsealed") ? sizeof seal : 0);
    if (!strcmp(cs, "replayed-seal"))
        send_raw(c, KD_P_INVENTORY, 0, seal, sizeof seal);
    kd_pconn_seal(c->pc, &key, &me, &them, true);
    if (!strcmp(cs, "replayed-seal") && answer(c, KD_P_INVENTORY_OK) != 1)
        return 1;   /* the good one was not answered: printed */
    return -1;
}

/* The service's answer to the HELLO of a caller that holds no key, then what the AUTH of
 * case cs (before-auth, forged-auth, auth-short, replayed-auth) brings. */
static int unproven(const char *addr, conn *c, const char *cs)
{
    ck_err err = { 0 };
    ck__wbuf w = { 0 };
    kd_phello me;
    uint8_t junk[KD_PEER_PROOF_LEN];
    if (!strcmp(cs, "replayed-auth")) {
        /* A caller that saw a good AUTH on the wire plays it again, with the HELLO it
         * went with: the service's nonce is a new one. */
        conn first;
        ck__wbuf seen = { 0 };
        kd_phello them;
        if (connect_to(addr, &first) < 0 || hello_auth(&first, &me, &seen, &them) < 0)
            return 2;
        kd_pconn_close(first.pc, KD_CLOSE_FLUSH);
        kd_ucx_close(first.u);
        kd_pmsg *m = greeted(c, &me);
        if (!m)
            return 2;
        kd_pmsg_free(m);
        kd_pconn_send_w(c->pc, KD_P_AUTH, &seen);
        return -1;
    }
    if (kd_peer_greet("hostile", &me, &w, &err) < 0 || kd_peer_random(junk, sizeof junk, &err))
        return 2;
    ck__wbuf_free(&w);
    kd_pmsg *m = greeted(c, &me);
    if (!m)
        return 2;
    kd_pmsg_free(m);
    if (!strcmp(cs, "before-auth"))
        kd_pconn_send(c->pc, KD_P_INVENTORY, 0, NULL, 0);
    else if (!strcmp(cs, "forged-auth"))
        send_raw(c, KD_P_AUTH, 0, junk, sizeof junk);
    else
        send_raw(c, KD_P_AUTH, 0, junk, 5);
    return -1;
}

/* Sends a raw payload p of n bytes (copied) as type. */
static void send_raw(conn *c, uint16_t type, uint64_t arg, const void *p, size_t n)
{
    void *b = malloc(n ? n : 1);
    memcpy(b, p, n);
    kd_pconn_send(c->pc, type, arg, b, n);
}

/* A PUT of NAME from SOURCE of one file (none when file is NULL) in blocks of bs bytes,
 * its manifest to come last. */
static void put_decl(conn *c, const char *name, const char *source, const char *file,
                     uint64_t fsize, uint32_t bs)
{
    ck_file f = { .size = fsize };
    snprintf(f.name, sizeof f.name, "%s", file ? file : "");
    kd_preq q = { .block_size = bs, .n = file ? 1 : 0, .files = &f };
    snprintf(q.name, sizeof q.name, "%s", name);
    snprintf(q.source, sizeof q.source, "%s", source);
    ck__wbuf w = { 0 };
    kd_pw_stream(&w, &q);
    kd_pconn_send_w(c->pc, KD_P_PUT, &w);
}

/* A PUT's MANIFEST: msize bytes, whose SHA-256 is that of msize bytes of fill. */
static void put_manifest(conn *c, uint64_t msize, uint8_t fill)
{
    uint8_t sha[CK_SHA256_LEN] = { 0 };
    uint8_t *m = msize <= 4096 ? malloc(msize) : NULL;
    if (m) {
        memset(m, fill, msize);
        ck__sha256(m, msize, sha);
        free(m);
    }
    ck__wbuf w = { 0 };
    kd_pw_manifest(&w, msize, sha);
    kd_pconn_send_w(c->pc, KD_P_MANIFEST, &w);
}

/* A PUT of x whose count says count files and whose list holds the n given, 4096
 * bytes each: the wire as a liar writes it. */
static void put_lying(conn *c, uint32_t count, const char *const *files, unsigned n)
{
    ck__wbuf w = { 0 };
    static const uint8_t sha[CK_SHA256_LEN];
    ck__put_str(&w, "x");
    ck__put_str(&w, "hostile");
    ck__put_u64(&w, 0);
    ck__put_bytes(&w, sha, sizeof sha);
    ck__put_u32(&w, CK_BLOCK_SIZE_DEFAULT);
    ck__put_u32(&w, count);
    for (unsigned i = 0; i < n; i++) {
        ck__put_str(&w, files[i]);
        ck__put_u64(&w, 4096);
    }
    kd_pconn_send_w(c->pc, KD_P_PUT, &w);
}

/* A string with an embedded NUL, as the wire carries it (u16 length, bytes). */
static void put_nul_name(ck__wbuf *w)
{
    ck__put_u16(w, 3);
    ck__put_bytes(w, "a\0b", 3);
}

/* ---- raw UCP: what kd_pconn_send never sends (another header size or version) ---- */

typedef struct raw {
    ucp_context_h ctx;
    ucp_worker_h wk;
    ucp_listener_h ls;
    ucp_ep_h ep;
    ucp_ep_h served[8];            /* serve: the endpoints it made */
    unsigned nserved;
    uint16_t version;              /* serve: the version its replies claim */
    char got[CK_ERR_MSG_MAX];      /* client: the ERROR that came back */
} raw;

static void raw_reply(raw *x, ucp_ep_h ep, uint16_t type)
{
    static uint8_t h[KD_PEER_HDR];
    static uint8_t payload[2 + 4 + 8] = { 4, 0, 'f', 'a', 'k', 'e' };
    h[0] = 0x43, h[1] = 0x4b, h[2] = 0x50, h[3] = 0x31;
    h[4] = (uint8_t)x->version, h[5] = (uint8_t)(x->version >> 8);
    h[6] = (uint8_t)type, h[7] = (uint8_t)(type >> 8);
    ucp_request_param_t rp = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                               .flags = UCP_AM_SEND_FLAG_REPLY };
    ucs_status_ptr_t s = ucp_am_send_nbx(ep, KD_PEER_AM_ID, h, sizeof h, payload,
                                         sizeof payload, &rp);
    if (s && !UCS_PTR_IS_ERR(s))
        ucp_request_free(s);
}

static ucs_status_t raw_am(void *arg, const void *header, size_t hlen, void *data, size_t len,
                           const ucp_am_recv_param_t *param)
{
    raw *x = arg;
    if (x->ls && (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
        raw_reply(x, param->reply_ep, KD_P_HELLO_OK);
        return UCS_OK;
    }
    const uint8_t *h = header;
    if (hlen == KD_PEER_HDR && h[6] == KD_P_ERROR &&
        !(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        kd_pmsg m = { .type = KD_P_ERROR, .data = data, .len = len };
        ck_err err = { 0 };
        kd_pw_get_error(&m, "service", &err);
        snprintf(x->got, sizeof x->got, "%s (in a version %u header)", ck_err_msg(&err),
                 h[4] | h[5] << 8);
    }
    return UCS_OK;
}

static void raw_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)arg, (void)ep, (void)status;   /* the peer hung up: expected here */
}

static void raw_conn(ucp_conn_request_h req, void *arg)
{
    raw *x = arg;
    ucp_ep_params_t p = { .field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                        UCP_EP_PARAM_FIELD_ERR_HANDLER,
                          .conn_request = req, .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                          .err_handler = { .cb = raw_ep_error } };
    if (x->nserved < 8 && ucp_ep_create(x->wk, &p, &x->served[x->nserved]) == UCS_OK)
        x->nserved++;
    else
        ucp_listener_reject(x->ls, req);
}

static int raw_open(raw *x, const char *listen, const char *addr)
{
    ucp_config_t *cfg;
    ucp_params_t pp = { .field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM };
    if (ucp_config_read(NULL, NULL, &cfg) != UCS_OK || ucp_init(&pp, cfg, &x->ctx) != UCS_OK)
        return -1;
    ucp_config_release(cfg);
    ucp_worker_params_t wp = { .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                               .thread_mode = UCS_THREAD_MODE_SINGLE };
    ucp_am_handler_param_t hp = { .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                                                UCP_AM_HANDLER_PARAM_FIELD_CB |
                                                UCP_AM_HANDLER_PARAM_FIELD_ARG,
                                  .id = KD_PEER_AM_ID, .cb = raw_am, .arg = x };
    struct sockaddr_storage sa;
    socklen_t sl;
    ck_err err = { 0 };
    if (ucp_worker_create(x->ctx, &wp, &x->wk) != UCS_OK ||
        ucp_worker_set_am_recv_handler(x->wk, &hp) != UCS_OK ||
        kd_addr_parse(listen ? listen : addr, KD_PEER_PORT, &sa, &sl, &err) < 0)
        return -1;
    if (listen) {
        ucp_listener_params_t lp = { .field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                                                   UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
                                     .sockaddr = { (struct sockaddr *)&sa, sl },
                                     .conn_handler = { raw_conn, x } };
        return ucp_listener_create(x->wk, &lp, &x->ls) == UCS_OK ? 0 : -1;
    }
    /* The service's endpoints handle peer errors: UCX wants both ends to agree. */
    ucp_ep_params_t ep_p = { .field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                                           UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                           UCP_EP_PARAM_FIELD_ERR_HANDLER,
                             .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
                             .sockaddr = { (struct sockaddr *)&sa, sl },
                             .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                             .err_handler = { .cb = raw_ep_error } };
    return ucp_ep_create(x->wk, &ep_p, &x->ep) == UCS_OK ? 0 : -1;
}

static void raw_close_ep(raw *x, ucp_ep_h ep)
{
    ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                              .flags = UCP_EP_CLOSE_FLAG_FORCE };
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
    while (r && !UCS_PTR_IS_ERR(r) && ucp_request_check_status(r) == UCS_INPROGRESS)
        ucp_worker_progress(x->wk);
    if (r && !UCS_PTR_IS_ERR(r))
        ucp_request_free(r);
}

/* Everything UCX holds, given back (LeakSanitizer counts what is not). */
static void raw_close(raw *x)
{
    if (x->ep)
        raw_close_ep(x, x->ep);
    for (unsigned i = 0; i < x->nserved; i++)
        raw_close_ep(x, x->served[i]);
    if (x->ls)
        ucp_listener_destroy(x->ls);
    if (x->wk)
        ucp_worker_destroy(x->wk);
    if (x->ctx)
        ucp_cleanup(x->ctx);
}

static void raw_spin(raw *x, double secs)
{
    for (double end = kd_now() + secs; kd_now() < end;)
        if (!ucp_worker_progress(x->wk))
            usleep(1000);
}

/* A HELLO with a header of hlen bytes claiming version: what the service answers. */
static int raw_hello(const char *addr, size_t hlen, uint16_t version)
{
    raw x = { .version = version };
    if (raw_open(&x, NULL, addr) < 0) {
        raw_close(&x);
        return 2;
    }
    if (hlen == KD_PEER_HDR) {
        raw_reply(&x, x.ep, KD_P_HELLO);
    } else {
        static uint8_t h[8] = { 0x43, 0x4b, 0x50, 0x31, 1, 0, KD_P_HELLO, 0 };
        ucp_request_param_t rp = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                   .flags = UCP_AM_SEND_FLAG_REPLY };
        ucs_status_ptr_t s = ucp_am_send_nbx(x.ep, KD_PEER_AM_ID, h, hlen, NULL, 0, &rp);
        if (s && !UCS_PTR_IS_ERR(s))
            ucp_request_free(s);
    }
    raw_spin(&x, 1.0);
    printf("sent a HELLO with a %zu-byte header, version %u; answer: %s\n", hlen, version,
           x.got[0] ? x.got : "none");
    raw_close(&x);
    return 0;
}

/* A fake service at listen whose every reply claims version: for the client's side. */
static int raw_serve(const char *listen, uint16_t version, double secs)
{
    raw x = { .version = version };
    if (raw_open(&x, listen, NULL) < 0) {
        raw_close(&x);
        return 2;
    }
    ucp_listener_attr_t la = { .field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR };
    char at[KD_PEER_ADDR_MAX] = "?";
    if (ucp_listener_query(x.ls, &la) == UCS_OK)
        kd_addr_format((const struct sockaddr *)&la.sockaddr, at, sizeof at);
    printf("serving as version %u at %s\n", version, at);
    raw_spin(&x, secs);
    raw_close(&x);
    return 0;
}

static int hostile(const char *addr, const char *cs)
{
    if (!strcmp(cs, "short-header"))
        return raw_hello(addr, 8, KD_PEER_VERSION);
    if (!strcmp(cs, "other-version"))
        return raw_hello(addr, KD_PEER_HDR, KD_PEER_VERSION + 1);
    conn c;
    if (connect_to(addr, &c) < 0)
        return 2;
    int r = -1;
    ck__wbuf w = { 0 };
    static uint8_t junk[KD_PEER_CHUNK_MAX + 4096];
    if (!strcmp(cs, "before-hello")) {
        kd_pconn_send(c.pc, KD_P_INVENTORY, 0, NULL, 0);
    } else if (!strcmp(cs, "second-hello")) {
        if (hello(&c) == 0) {
            kd_pw_hello(&w, &(kd_phello){ .id = "again" }, false);
            kd_pconn_send_w(c.pc, KD_P_HELLO, &w);
        }
    } else if (!strcmp(cs, "bad-id")) {
        kd_pw_hello(&w, &(kd_phello){ .id = "../../etc" }, false);
        kd_pconn_send_w(c.pc, KD_P_HELLO, &w);
    } else if (!strcmp(cs, "hello-no-nonce")) {
        ck__put_str(&w, "hostile");        /* a version-2 HELLO: no nonce */
        ck__put_u64(&w, 0);
        kd_pconn_send_w(c.pc, KD_P_HELLO, &w);
    } else if (!strcmp(cs, "hello-trailing")) {
        kd_pw_hello(&w, &(kd_phello){ .id = "hostile" }, false);
        ck__put_u32(&w, 7);
        kd_pconn_send_w(c.pc, KD_P_HELLO, &w);
    } else if (!strcmp(cs, "before-auth") || !strcmp(cs, "forged-auth") ||
               !strcmp(cs, "auth-short") || !strcmp(cs, "replayed-auth")) {
        r = unproven(addr, &c, cs);
    } else if (!strcmp(cs, "unsealed") || !strcmp(cs, "bad-seal") ||
               !strcmp(cs, "reflected-seal") || !strcmp(cs, "replayed-seal")) {
        r = sealed_case(&c, cs);
    } else if (hello(&c) < 0) {
        r = 2;
    } else if (!strcmp(cs, "second-auth")) {
        uint8_t zero[KD_PEER_PROOF_LEN] = { 0 };
        send_raw(&c, KD_P_AUTH, 0, zero, sizeof zero);
    } else if (!strcmp(cs, "unknown-type")) {
        kd_pconn_send(c.pc, 200, 0, NULL, 0);
    } else if (!strcmp(cs, "reply-type")) {
        kd_pconn_send(c.pc, KD_P_COMMITTED, 0, NULL, 0);
    } else if (!strcmp(cs, "inventory-payload")) {
        send_raw(&c, KD_P_INVENTORY, 0, "xx", 2);
    } else if (!strcmp(cs, "put-dotdot-name")) {
        put_decl(&c, "../escape", "hostile", "rank-00000.dat", 4096, CK_BLOCK_SIZE_DEFAULT);
    } else if (!strcmp(cs, "put-slash-name")) {
        put_decl(&c, "a/b", "hostile", "rank-00000.dat", 4096, CK_BLOCK_SIZE_DEFAULT);
    } else if (!strcmp(cs, "put-dot-name")) {
        put_decl(&c, ".pending", "hostile", "rank-00000.dat", 4096, CK_BLOCK_SIZE_DEFAULT);
    } else if (!strcmp(cs, "put-nul-name") || !strcmp(cs, "put-long-name")) {
        char name[300];
        memset(name, 'n', sizeof name - 1);
        name[sizeof name - 1] = '\0';
        if (!strcmp(cs, "put-nul-name"))
            put_nul_name(&w);
        else
            ck__put_str(&w, name);
        ck__put_str(&w, "hostile");
        ck__put_u64(&w, 4096);
        ck__put_u32(&w, 0);
        kd_pconn_send_w(c.pc, KD_P_PUT, &w);
    } else if (!strcmp(cs, "put-dotdot-source")) {
        put_decl(&c, "x", "..", "rank-00000.dat", 4096, CK_BLOCK_SIZE_DEFAULT);
    } else if (!strcmp(cs, "put-slash-source")) {
        put_decl(&c, "x", "a/b", "rank-00000.dat", 4096, CK_BLOCK_SIZE_DEFAULT);
    } else if (!strcmp(cs, "put-link-source")) {
        put_decl(&c, "x", "planted", "rank-00000.dat", 4096, CK_BLOCK_SIZE_DEFAULT);
    } else if (!strcmp(cs, "put-dotdot-file")) {
        put_decl(&c, "x", "hostile", "../../../escape.dat", 4096, CK_BLOCK_SIZE_DEFAULT);
    } else if (!strcmp(cs, "put-slash-file")) {
        put_decl(&c, "x", "hostile", "a/b.dat", 4096, CK_BLOCK_SIZE_DEFAULT);
    } else if (!strcmp(cs, "put-unaligned-size")) {
        put_decl(&c, "x", "hostile", "rank-00000.dat", 4095, CK_BLOCK_SIZE_DEFAULT);
    } else if (!strcmp(cs, "put-absurd-size")) {
        put_decl(&c, "x", "hostile", "rank-00000.dat", UINT64_C(1) << 63, CK_BLOCK_SIZE_DEFAULT);
    } else if (!strcmp(cs, "put-odd-block-size")) {
        put_decl(&c, "x", "hostile", "rank-00000.dat", 4096, 5000);
    } else if (!strcmp(cs, "put-declares-manifest")) {
        /* A PUT of protocol 6's form: its manifest first. */
        ck_file f = { .name = "rank-00000.dat", .size = 4096 };
        kd_preq q = { .manifest_size = 4096, .block_size = CK_BLOCK_SIZE_DEFAULT, .n = 1,
                      .files = &f };
        snprintf(q.name, sizeof q.name, "x");
        snprintf(q.source, sizeof q.source, "hostile");
        kd_pw_stream(&w, &q);
        kd_pconn_send_w(c.pc, KD_P_PUT, &w);
    } else if (!strcmp(cs, "manifest-outside-put")) {
        put_manifest(&c, 4096, 0x5a);
    } else if (!strcmp(cs, "put-absurd-manifest") || !strcmp(cs, "put-manifest-twice")) {
        put_decl(&c, "hostile-put", "hostile", NULL, 0, CK_BLOCK_SIZE_DEFAULT);
        if (answer(&c, KD_P_PUT_READY) == 1) {
            put_manifest(&c, !strcmp(cs, "put-absurd-manifest") ? UINT64_C(1) << 40 : 4096, 0x5a);
            if (!strcmp(cs, "put-manifest-twice"))
                put_manifest(&c, 4096, 0x5a);
        }
    } else if (!strcmp(cs, "put-more-files")) {
        static const char *const one[] = { "rank-00000.dat" };
        put_lying(&c, 1000, one, 1);
    } else if (!strcmp(cs, "put-files-beyond-count")) {
        static const char *const two[] = { "rank-00000.dat", "rank-00001.dat" };
        put_lying(&c, 1, two, 2);
    } else if (!strcmp(cs, "put-twice-file")) {
        static const char *const twice[] = { "rank-00000.dat", "rank-00000.dat" };
        put_lying(&c, 2, twice, 2);
    } else if (!strcmp(cs, "data-past-window") || !strcmp(cs, "data-across-files")) {
        /* data-past-window: a PUT of one file of 16 MiB whose first MiB never comes, so
         * nothing is acknowledged, and whose next nine do: past the least window (the
         * daemons of the tests state it, --peer-checkers 1). data-across-files: a PUT of
         * two files of 4096 bytes, and one DATA of both (peer protocol 9: each file's
         * bytes are its own run). */
        bool win = !strcmp(cs, "data-past-window");
        ck_file f[2] = { { .name = "rank-00000.dat", .size = win ? 16u << 20 : 4096 },
                         { .name = "rank-00001.dat", .size = 4096 } };
        kd_preq q = { .block_size = CK_BLOCK_SIZE_DEFAULT, .n = win ? 1 : 2, .files = f };
        snprintf(q.name, sizeof q.name, "hostile-put");
        snprintf(q.source, sizeof q.source, "hostile");
        kd_pw_stream(&w, &q);
        kd_pconn_send_w(c.pc, KD_P_PUT, &w);
        if (answer(&c, KD_P_PUT_READY) == 1) {
            static uint8_t mib[1u << 20];
            memset(mib, 0x5a, sizeof mib);
            for (uint64_t i = 1; win && i <= KD_PEER_WINDOW_MIN / sizeof mib + 1; i++)
                send_raw(&c, KD_P_DATA, i * sizeof mib, mib, sizeof mib);
            if (!win)
                send_raw(&c, KD_P_DATA, 0, mib, 8192);
        }
    } else if (!strcmp(cs, "put-garbage-manifest") || !strcmp(cs, "put-other-manifest") ||
               !strcmp(cs, "data-past-end") ||
               !strcmp(cs, "data-overlap") || !strcmp(cs, "data-too-big") ||
               !strcmp(cs, "data-before-manifest")) {
        /* A PUT of no data file, whose manifest (4096 bytes) is declared at once;
         * put-other-manifest: the manifest sent is not the one MANIFEST declared;
         * data-before-manifest: its bytes come, undeclared. */
        put_decl(&c, "hostile-put", "hostile", NULL, 0, CK_BLOCK_SIZE_DEFAULT);
        if (answer(&c, KD_P_PUT_READY) == 1) {
            if (strcmp(cs, "data-before-manifest"))
                put_manifest(&c, 4096, !strcmp(cs, "put-other-manifest") ? 0x5b : 0x5a);
            memset(junk, 0x5a, sizeof junk);
            if (!strcmp(cs, "put-garbage-manifest") || !strcmp(cs, "put-other-manifest")) {
                send_raw(&c, KD_P_DATA, 0, junk, 4096);
            } else if (!strcmp(cs, "data-before-manifest")) {
                send_raw(&c, KD_P_DATA, 0, junk, 4096);
            } else if (!strcmp(cs, "data-past-end")) {
                send_raw(&c, KD_P_DATA, 4000, junk, 200);
            } else if (!strcmp(cs, "data-overlap")) {
                send_raw(&c, KD_P_DATA, 100, junk, 100);
                send_raw(&c, KD_P_DATA, 150, junk, 100);
            } else {
                send_raw(&c, KD_P_DATA, 0, junk, sizeof junk);
            }
        }
    } else if (!strcmp(cs, "waiting-outside-put")) {
        kd_pconn_send(c.pc, KD_P_WAITING, 0, NULL, 0);
    } else if (!strcmp(cs, "waiting-with-payload") || !strcmp(cs, "waiting-after-manifest") ||
               !strcmp(cs, "waiting-forever")) {
        /* A PUT of no data file whose sender says WAITING: with a payload; once its
         * MANIFEST declared the stream's end; or only ever, every half second, never
         * sending the stream (the service gives it up at its bound). */
        put_decl(&c, "hostile-put", "hostile", NULL, 0, CK_BLOCK_SIZE_DEFAULT);
        if (answer(&c, KD_P_PUT_READY) == 1) {
            if (!strcmp(cs, "waiting-with-payload")) {
                send_raw(&c, KD_P_WAITING, 0, "xx", 2);
            } else if (!strcmp(cs, "waiting-after-manifest")) {
                put_manifest(&c, 4096, 0x5a);
                kd_pconn_send(c.pc, KD_P_WAITING, 0, NULL, 0);
            } else {
                for (unsigned i = 0; i < 6 * timeout(); i++) {
                    kd_pconn_send(c.pc, KD_P_WAITING, 0, NULL, 0);
                    if ((r = answer_in(&c, 0xffff, 0.5)) != 2)
                        break;
                }
                if (r == 2)
                    printf("no answer within %u s\n", 3 * timeout());
            }
        }
    } else if (!strcmp(cs, "data-outside-put")) {
        send_raw(&c, KD_P_DATA, 0, "abcd", 4);
    } else if (!strcmp(cs, "ack-outside-get")) {
        kd_pconn_send(c.pc, KD_P_ACK, 4096, NULL, 0);
    } else if (!strcmp(cs, "request-too-big")) {
        void *b = calloc(1, 2u << 20);
        kd_pconn_send(c.pc, KD_P_PUT, 0, b, 2u << 20);
    } else if (!strcmp(cs, "get-dotdot-name")) {
        kd_preq q = { .all = true, .window = KD_PEER_WINDOW_MIN };
        snprintf(q.name, sizeof q.name, "..");
        kd_pw_ask(&w, &q);
        kd_pconn_send_w(c.pc, KD_P_GET, &w);
    } else if (!strcmp(cs, "get-dotdot-file")) {
        ck_file f = { .name = "../manifest.mdb" };
        kd_preq q = { .n = 1, .files = &f, .window = KD_PEER_WINDOW_MIN };
        snprintf(q.name, sizeof q.name, "x");
        kd_pw_ask(&w, &q);
        kd_pconn_send_w(c.pc, KD_P_GET, &w);
    } else if (!strcmp(cs, "get-all-and-files")) {
        ck__put_str(&w, "x");
        ck__put_str(&w, "");
        ck__put_u64(&w, 0);
        ck__put_u8(&w, 1);
        ck__put_u32(&w, 1);
        ck__put_str(&w, "rank-00000.dat");
        kd_pconn_send_w(c.pc, KD_P_GET, &w);
    } else if (!strcmp(cs, "get-window-zero") || !strcmp(cs, "get-window-huge")) {
        /* A window the sender would have to hold: none, or 1 GiB. */
        kd_preq q = { .all = true, .window = cs[11] == 'z' ? 0 : 1u << 30 };
        snprintf(q.name, sizeof q.name, "x");
        kd_pw_ask(&w, &q);
        kd_pconn_send_w(c.pc, KD_P_GET, &w);
    } else if (!strcmp(cs, "get-missing")) {
        kd_preq q = { .all = true, .window = KD_PEER_WINDOW_MIN };
        snprintf(q.name, sizeof q.name, "no-such-checkpoint");
        kd_pw_ask(&w, &q);
        kd_pconn_send_w(c.pc, KD_P_GET, &w);
    } else if (!strncmp(cs, "part-", 5)) {
        /* part-dotdot-token: a token that is a path; part-meet-token: one of another
         * kind of directory (too long for a token); part-no-time: of no save;
         * part-no-files: nothing to write; part-missing: of a copy the node lacks. */
        ck_file f = { .name = "rank-00000.dat" };
        kd_preq q = { .n = 1, .files = &f, .time_ns = 1 };
        snprintf(q.name, sizeof q.name, "no-such-checkpoint");
        snprintf(q.token, sizeof q.token, "%s", !strcmp(cs, "part-dotdot-token") ?
                 "../../../../etc" : "0123456789ab");
        q.time_ns = !strcmp(cs, "part-no-time") ? 0 : 1;
        q.n = !strcmp(cs, "part-no-files") ? 0 : 1;
        kd_pw_part(&w, &q);
        if (!strcmp(cs, "part-meet-token")) {
            ck__wbuf_free(&w);
            w = (ck__wbuf){ 0 };
            ck__put_str(&w, q.name);
            ck__put_str(&w, "");
            ck__put_u64(&w, 1);
            ck__put_bytes(&w, q.manifest_sha256, sizeof q.manifest_sha256);
            ck__put_str(&w, "0123456789ab-meet");
            ck__put_u32(&w, 1);
            ck__put_str(&w, f.name);
        }
        kd_pconn_send_w(c.pc, KD_P_PART, &w);
    } else {
        fprintf(stderr, "peer_tool: no case %s\n", cs);
        r = 2;
    }
    if (r < 0)
        r = answer(&c, 0xffff);
    kd_pconn_close(c.pc, KD_CLOSE_NOW);
    kd_ucx_close(c.u);
    return r;
}

/* ---- a PUT that begins every file at once ---- */

/* The service's next message within the tool's timeout; NULL (said) when none came
 * or the connection closed. An ERROR is said as a refusal. */
static kd_pmsg *spread_next(conn *c)
{
    bool closed;
    kd_pmsg *m = next_in(c, timeout(), &closed);
    if (!m && !closed)
        printf("no answer within %u s\n", timeout());
    return m;
}

/* One DATA of a put_spread, sent once the window takes it (the service's ACKs
 * followed). -1: go on; 1: the service refused, or said something else (said). */
static int spread_send(conn *c, const uint8_t *stream, uint64_t off, uint64_t len,
                       uint64_t *sent, uint64_t *acked, uint32_t window)
{
    while (*sent + len > *acked + window) {
        kd_pmsg *m = spread_next(c);
        if (!m || m->type != KD_P_ACK) {
            if (m && m->type != KD_P_ERROR)
                printf("unexpected: a %s\n", kd_pw_type_name(m->type));
            kd_pmsg_free(m);
            return 1;
        }
        *acked = m->arg;
        kd_pmsg_free(m);
    }
    send_raw(c, KD_P_DATA, off, stream + off, (size_t)len);
    *sent += len;
    return -1;
}

/* PUT of FROM/NAME whose DATA begin every data file at once, as protocol 9 allows: the
 * first 4096 bytes of each file in turn, then the rest of each, then the manifest. The
 * service hands on a file's first piece while fewer than 32 files are in part and
 * holds the others' (at most 64 DATA held): the stream of a node of more ranks than
 * that, written at once. Exit 0 once the service says COMMITTED, 1 when it refused. */
static int put_spread(const char *addr, const char *from, const char *name)
{
    ck_err err = { 0 };
    ck__copy_out *co = NULL;
    uint8_t *stream = NULL;
    size_t got = 0;
    if (ck__copy_out_open(from, name, NULL, 0, &co, &err) < 0)
        return printf("error: %s\n", ck_err_msg(&err)), 2;
    ck__copy_out_manifest_last(co);
    if (co->total > (64u << 20) || !(stream = malloc(co->total ? co->total : 1)) ||
        ck__copy_out_read(co, stream, co->total, &got, &err) < 0 || got != co->total) {
        printf("error: %s/%s: %s\n", from, name, err.code ? ck_err_msg(&err) :
               "more than 64 MiB, or out of memory");
        free(stream);
        ck__copy_out_close(co);
        return 2;
    }
    conn c;
    bool up = connect_to(addr, &c) == 0;
    int r = up && hello(&c) == 0 ? -1 : 2;
    kd_preq q = { .block_size = co->info.block_size, .n = co->n_files, .files = co->files };
    snprintf(q.name, sizeof q.name, "%s", name);
    snprintf(q.source, sizeof q.source, "peer-tool");
    uint32_t window = 0;
    if (r < 0) {
        ck__wbuf w = { 0 };
        kd_pw_stream(&w, &q);
        kd_pconn_send_w(c.pc, KD_P_PUT, &w);
        kd_pmsg *m = spread_next(&c);
        if (m && m->type != KD_P_PUT_READY && m->type != KD_P_ERROR)
            printf("unexpected: a %s\n", kd_pw_type_name(m->type));
        else if (m && m->type == KD_P_PUT_READY && kd_pw_get_window(m, &window, &err) < 0)
            printf("error: %s\n", ck_err_msg(&err));
        if (!m || m->type != KD_P_PUT_READY || err.code)
            r = 1;
        kd_pmsg_free(m);
    }
    /* The files in the stream's order; at[i]: where file i begins in it. */
    uint64_t sent = 0, acked = 0, data = co->total - co->manifest_size;
    uint64_t *at = calloc(co->n_files + 1, sizeof *at);
    if (!at)
        r = 2;
    for (uint32_t i = 0; at && i < co->n_files; i++)
        at[i + 1] = at[i] + co->files[i].size;
    const uint64_t piece = 1u << 20;
    for (uint32_t i = 0; r < 0 && i < co->n_files; i++)
        if (co->files[i].size)
            r = spread_send(&c, stream, at[i], co->files[i].size < 4096 ? co->files[i].size
                                                                         : 4096,
                            &sent, &acked, window);
    for (uint32_t i = 0; r < 0 && i < co->n_files; i++)
        for (uint64_t o = at[i] + 4096; r < 0 && o < at[i + 1]; o += piece)
            r = spread_send(&c, stream, o, at[i + 1] - o < piece ? at[i + 1] - o : piece, &sent,
                            &acked, window);
    if (r < 0) {
        ck__wbuf w = { 0 };
        kd_pw_manifest(&w, co->manifest_size, co->manifest_sha256);
        kd_pconn_send_w(c.pc, KD_P_MANIFEST, &w);
    }
    for (uint64_t o = data; r < 0 && o < co->total; o += piece)
        r = spread_send(&c, stream, o, co->total - o < piece ? co->total - o : piece, &sent,
                        &acked, window);
    /* The ACKs the service still owes, then its COMMITTED. */
    while (r < 0) {
        kd_pmsg *m = spread_next(&c);
        if (m && m->type == KD_P_COMMITTED)
            printf("ok committed %s: %u data files begun at once\n", name, co->n_files);
        else if (m && m->type != KD_P_ACK && m->type != KD_P_ERROR)
            printf("unexpected: a %s\n", kd_pw_type_name(m->type));
        if (!m || m->type != KD_P_ACK)
            r = m && m->type == KD_P_COMMITTED ? 0 : 1;
        kd_pmsg_free(m);
    }
    if (up) {
        kd_pconn_close(c.pc, KD_CLOSE_NOW);
        kd_ucx_close(c.u);
    }
    free(at);
    free(stream);
    ck__copy_out_close(co);
    return r;
}

/* A fake service (serve-*): how it departs from the real one. */
typedef enum fake_how {
    FAKE_DYING,                    /* dies at the first ACK of a GET of data files */
    FAKE_SLOW,                     /* answers a GET of data files slow seconds late */
    FAKE_UNSEALED,                 /* seals nothing after AUTH */
    FAKE_LYING,                    /* declares a manifest SHA-256 that is not its manifest's */
    FAKE_GREEDY,                   /* states a window of 1 GiB to a PUT */
    FAKE_MUTE,                     /* takes a PUT's DATA and acknowledges none */
} fake_how;

typedef struct fake {
    const char *id, *local;
    fake_how how;
    double slow;
} fake;

/* One connection of a fake service. */
typedef struct fake_conn {
    kd_pconn *pc;
    kd_ucx *u;                     /* the service's worker, which the GET's readers wake */
    kd_xsend *tx;
    bool files;                    /* its GET asked for data files */
    kd_phello caller, me;
} fake_conn;

/* One message to a connection of a fake service: as the real service answers it, but
 * for what f->how says. */
static int fake_answer(const fake *f, fake_conn *fc, kd_pmsg *m)
{
    ck_err err = { 0 };
    ck__wbuf w = { 0 };
    kd_preq ask = { 0 }, q = { 0 };
    char root[PATH_MAX], source[CK_COPY_ID_MAX];
    int r = 0;
    if (m->type == KD_P_HELLO) {
        /* It proves that it holds the key, as a holder of the job does. */
        if ((r = kd_peer_answer(&key, f->id, 1, m, &fc->caller, &fc->me, &w, &err)) == 0)
            kd_pconn_send_w(fc->pc, KD_P_HELLO_OK, &w);
    } else if (m->type == KD_P_AUTH) {
        /* The caller's proof is taken on trust (what is tested here is what follows);
         * the connection is sealed as the real service seals it, but by FAKE_UNSEALED. */
        if (f->how != FAKE_UNSEALED)
            kd_pconn_seal(fc->pc, &key, &fc->caller, &fc->me, false);
    } else if (m->type == KD_P_INVENTORY) {
        kd_peer_copy *v;
        size_t n;
        if ((r = kd_inv_scan(f->local, f->id, &v, NULL, &n, &err)) == 0) {
            kd_pw_inventory(&w, v, n);
            kd_peer_copies_free(v, n);
            kd_pconn_send_w(fc->pc, KD_P_INVENTORY_OK, &w);
        }
    } else if (m->type == KD_P_GET && !fc->tx) {
        if ((r = kd_pw_get_ask(m, &ask, &err)) == 0 &&
            (r = kd_inv_find(f->local, f->id, &ask, root, sizeof root, source, &err)) == 0 &&
            (r = kd_xsend_open(root, ask.name, source, &ask, false, &q, &fc->tx, &err)) == 0 &&
            (r = kd_xsend_to(fc->tx, fc->pc, fc->u, ask.window)) == 0) {
            if (f->how == FAKE_SLOW && q.n > 0) {
                printf("answering a GET of %u data file(s) in %.1f s\n", q.n, f->slow);
                usleep((useconds_t)(f->slow * 1e6));
            }
            if (f->how == FAKE_LYING)
                q.manifest_sha256[0] ^= 1;
            kd_pw_stream(&w, &q);
            kd_pconn_send_w(fc->pc, KD_P_GET_OK, &w);
            kd_pconn_set_budget(fc->pc, KD_PEER_MSG_MAX);
            fc->files = q.n > 0;
            r = kd_xsend_pump(fc->tx, &err);
        }
        kd_preq_free(&ask);
        kd_preq_free(&q);
    } else if (m->type == KD_P_PUT && f->how == FAKE_GREEDY) {
        kd_pw_window(&w, 1u << 30);
        kd_pconn_send_w(fc->pc, KD_P_PUT_READY, &w);
    } else if (m->type == KD_P_PUT && f->how == FAKE_MUTE) {
        /* Room for the window it states, as the real service makes: its DATA arrives,
         * and is dropped unanswered. */
        kd_pconn_set_budget(fc->pc, KD_PEER_WINDOW_MIN + KD_PEER_CHUNK_MAX + KD_PEER_REQ_MAX);
        kd_pw_window(&w, KD_PEER_WINDOW_MIN);
        kd_pconn_send_w(fc->pc, KD_P_PUT_READY, &w);
        printf("taking a PUT, acknowledging nothing\n");
    } else if (m->type == KD_P_PART) {
        /* A fake writes no part of a drain: the drain falls back to fetching (decision
         * 0197), which is what the fakes are for. */
        kd_pw_error(&w, "", -EOPNOTSUPP, "a fake service writes no part of a drain");
        kd_pconn_send_w(fc->pc, KD_P_ERROR, &w);
    } else if (m->type == KD_P_ACK && fc->tx && fc->files && f->how == FAKE_DYING) {
        printf("dying at the first ACK of a GET, %llu bytes taken\n", (unsigned long long)m->arg);
        /* SIGKILL, as a holder that crashes: nothing of the process runs after it (an
         * _exit still runs ThreadSanitizer's exit checks, which report the stream's
         * readers as leaked threads). */
        kill(getpid(), SIGKILL);
    } else if (m->type == KD_P_ACK && fc->tx) {
        r = kd_xsend_ack(fc->tx, 0, m->arg, &err);
    }
    if (r < 0)
        printf("error: %s\n", ck_err_msg(&err));
    return r;
}

static int serve_fake(const char *durable, const fake *f)
{
    ck_err err = { 0 };
    kd_ucx *u;
    char bound[KD_PEER_ADDR_MAX];
    int lock;
    /* Held as a daemon holds it: a ckptd starting on the root meanwhile removes the
     * address file of a daemon whose lock is free. */
    if (ck__engine_lock(durable, f->id, "the fake holder", &lock, &err) < 0 ||
        kd_ucx_open("127.0.0.1:0", &u, bound, sizeof bound, &err) < 0 ||
        kd_addr_publish(durable, f->id, bound, 1, &err) < 0) {
        printf("error: %s\n", ck_err_msg(&err));
        return 2;
    }
    printf("serving as ckptd %s at %s\n", f->id, bound);
    /* Each call of a client is a connection of its own: a slot is free again once
     * its peer hung up. */
    fake_conn conns[16] = { 0 };
    for (double end = kd_now() + 60; kd_now() < end;) {
        kd_ucx_wait(u, 100);
        for (unsigned i = 0; i < 16; i++) {
            fake_conn *fc = &conns[i];
            if (fc->pc && kd_pconn_failed(fc->pc, NULL)) {
                kd_pconn_close(fc->pc, KD_CLOSE_NOW);
                kd_xsend_free(fc->tx);
                *fc = (fake_conn){ 0 };
            }
            if (!fc->pc && (fc->pc = kd_ucx_accepted(u))) {
                fc->u = u;
                kd_pconn_set_budget(fc->pc, KD_PEER_REQ_MAX + KD_PEER_HDR);
            }
            for (kd_pmsg *m; fc->pc && (m = kd_pconn_next(fc->pc));) {
                fake_answer(f, fc, m);
                kd_pmsg_free(m);
            }
            /* What the stream's readers read goes out as windows allow, as the real
             * service sends it (they wake u). */
            ck_err e = { 0 };
            if (fc->tx && kd_xsend_pump(fc->tx, &e) < 0) {
                printf("error: %s\n", ck_err_msg(&e));
                kd_xsend_free(fc->tx);
                fc->tx = NULL;
            }
        }
    }
    for (unsigned i = 0; i < 16; i++)
        kd_xsend_free(conns[i].tx);
    kd_ucx_close(u);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    ck_err err = { 0 };
    const char *file = getenv("CKPTD_PEER_KEY");
    bool serve = argc >= 3 && !strncmp(argv[1], "serve-", 6) && strcmp(argv[1], "serve-version");
    if ((file || serve) && kd_peer_key_load(file, serve ? argv[2] : NULL, serve, &key, &err) < 0) {
        printf("error: %s\n", ck_err_msg(&err));
        return 2;
    }
    if (argc >= 5 && !strcmp(argv[1], "put-spread"))
        return put_spread(argv[2], argv[3], argv[4]);
    if (argc >= 4 && !strcmp(argv[1], "hostile"))
        return hostile(argv[2], argv[3]);
    if (argc >= 5 && !strcmp(argv[1], "serve-version"))
        return raw_serve(argv[2], (uint16_t)atoi(argv[3]), atof(argv[4]));
    static const char *const fakes[] = { [FAKE_DYING] = "serve-dying",
                                         [FAKE_SLOW] = "serve-slow",
                                         [FAKE_UNSEALED] = "serve-unsealed",
                                         [FAKE_LYING] = "serve-lying",
                                         [FAKE_GREEDY] = "serve-greedy",
                                         [FAKE_MUTE] = "serve-mute" };
    for (unsigned how = 0; argc >= 5 && how < sizeof fakes / sizeof *fakes; how++)
        if (!strcmp(argv[1], fakes[how]) && (how != FAKE_SLOW || argc >= 6))
            return serve_fake(argv[2], &(fake){ .id = argv[3], .local = argv[4], .how = how,
                                                .slow = how == FAKE_SLOW ? atof(argv[5]) : 0 });
    if (argc >= 6 && !strcmp(argv[1], "put")) {
        action = argc > 6 ? argv[6] : "none";
        kd_peer_call c = { .addr = argv[2], .id = argv[5], .key = &key, .timeout = timeout(),
                           .progress = after_first };
        return report(kd_peer_put(&c, argv[3], argv[4], &err), &err);
    }
    if (argc >= 7 && !strcmp(argv[1], "get")) {
        victim = (pid_t)atoi(argv[5]);
        action = argv[6];
        kd_peer_call c = { .addr = argv[2], .id = "peer-tool", .key = &key, .timeout = timeout(),
                           .checkers = kd_peer_checkers_default(), .progress = after_first };
        kd_preq ask = { .all = argc > 7 && !strcmp(argv[7], "--all") };
        snprintf(ask.name, sizeof ask.name, "%s", argv[4]);
        ask.n = ask.all || argc <= 7 ? 0 : (uint32_t)(argc - 7);
        ask.files = calloc(ask.n ? ask.n : 1, sizeof *ask.files);
        for (uint32_t i = 0; i < ask.n; i++)
            snprintf(ask.files[i].name, sizeof ask.files[i].name, "%s", argv[7 + i]);
        int r = kd_peer_get(&c, &ask, argv[3], &err);
        kd_preq_free(&ask);
        return report(r, &err);
    }
    fprintf(stderr, "usage: see the header of tests/ckptd/peer_tool.c\n");
    return 2;
}
