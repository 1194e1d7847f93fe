/* kd_peer_wire.c - the peer protocol's payloads: encoding, and decoding with every field
 * checked (docs/PROTOCOL.md, "Peer protocol").
 *
 * A peer is another node, reached over the network: what it sends is outside input.
 * Every decoder checks lengths before it trusts them (ck__rbuf), counts against the
 * bytes that could hold them before it allocates, names as the core checks them
 * (checkpoint and data file names plain, never paths; daemon ids), sizes against the
 * format's bounds, and that nothing follows the last field. A refusal names the
 * message and the field.
 */
#include <stdlib.h>
#include <string.h>

#include "kd.h"

#include "format/copy.h"
#include "format/layout.h"
#include "format/reader_int.h"
#include "ops/copy.h"

const char *kd_pw_type_name(unsigned type)
{
    switch (type) {
    case KD_P_HELLO: return "HELLO";
    case KD_P_AUTH: return "AUTH";
    case KD_P_PART: return "PART";
    case KD_P_MANIFEST: return "MANIFEST";
    case KD_P_WAITING: return "WAITING";
    case KD_P_INVENTORY: return "INVENTORY";
    case KD_P_PUT: return "PUT";
    case KD_P_GET: return "GET";
    case KD_P_DATA: return "DATA";
    case KD_P_ACK: return "ACK";
    case KD_P_ABORT: return "ABORT";
    case KD_P_HELLO_OK: return "HELLO_OK";
    case KD_P_INVENTORY_OK: return "INVENTORY_OK";
    case KD_P_PUT_READY: return "PUT_READY";
    case KD_P_GET_OK: return "GET_OK";
    case KD_P_COMMITTED: return "COMMITTED";
    case KD_P_ERROR: return "ERROR";
    case KD_P_PART_DONE: return "PART_DONE";
    default: return "unknown";
    }
}

static int bad(const kd_pmsg *m, const char *what, ck_err *err)
{
    return ck_err_set(err, -EBADMSG, "a %s message with %s", kd_pw_type_name(m->type), what);
}

/* A checkpoint name a copy can take (ck_name_check), or "" where empty is allowed. */
static bool name_ok(const char *s, bool empty_ok)
{
    return (empty_ok && !s[0]) || ck_name_check("checkpoint", s, NULL) == 0;
}

static bool source_ok(const char *s, bool empty_ok)
{
    return (empty_ok && !s[0]) || ck__copy_source_check(s, NULL) == 0;
}

void kd_pw_hello(ck__wbuf *w, const kd_phello *h, bool ok)
{
    ck__put_str(w, h->id);
    ck__put_u64(w, h->instance);
    ck__put_bytes(w, h->nonce, sizeof h->nonce);
    if (ok)
        ck__put_bytes(w, h->proof, sizeof h->proof);
}

int kd_pw_get_hello(const kd_pmsg *m, kd_phello *h, ck_err *err)
{
    ck__rbuf r = ck__rbuf_make(m->data, m->len);
    const void *p;
    memset(h, 0, sizeof *h);
    ck__get_str(&r, h->id, CK_COPY_ID_MAX);
    h->instance = ck__get_u64(&r);
    if ((p = ck__get_bytes(&r, sizeof h->nonce)))
        memcpy(h->nonce, p, sizeof h->nonce);
    if (m->type == KD_P_HELLO_OK && (p = ck__get_bytes(&r, sizeof h->proof)))
        memcpy(h->proof, p, sizeof h->proof);
    if (!ck__rbuf_done(&r))
        return bad(m, "a malformed payload", err);
    if (!source_ok(h->id, false))
        return bad(m, "a daemon id that is not 1 to 63 bytes of [A-Za-z0-9._-]", err);
    return 0;
}

void kd_pw_auth(ck__wbuf *w, const uint8_t proof[KD_PEER_PROOF_LEN])
{
    ck__put_bytes(w, proof, KD_PEER_PROOF_LEN);
}

int kd_pw_get_auth(const kd_pmsg *m, uint8_t proof[KD_PEER_PROOF_LEN], ck_err *err)
{
    ck__rbuf r = ck__rbuf_make(m->data, m->len);
    const void *p = ck__get_bytes(&r, KD_PEER_PROOF_LEN);
    if (!p || !ck__rbuf_done(&r))
        return bad(m, "a malformed payload (a proof is 32 bytes)", err);
    memcpy(proof, p, KD_PEER_PROOF_LEN);
    return 0;
}

void kd_preq_free(kd_preq *q)
{
    free(q->files);
    q->files = NULL;
    q->n = 0;
}

/* The header both a stream and an ask start with: name, source. */
static void put_head(ck__wbuf *w, const kd_preq *q)
{
    ck__put_str(w, q->name);
    ck__put_str(w, q->source);
}

static int get_head(const kd_pmsg *m, ck__rbuf *r, kd_preq *q, bool source_empty_ok,
                    ck_err *err)
{
    memset(q, 0, sizeof *q);
    ck__get_str(r, q->name, sizeof q->name);
    ck__get_str(r, q->source, sizeof q->source);
    if (r->bad)
        return bad(m, "a name or source too long, cut short or holding a NUL", err);
    if (!name_ok(q->name, false))
        return ck_err_set(err, -EBADMSG, "a %s message names checkpoint '%.64s', which is not "
                          "1 to %d bytes of [A-Za-z0-9._-] not starting with '.'",
                          kd_pw_type_name(m->type), q->name, CK_CKPT_NAME_LEN);
    if (!source_ok(q->source, source_empty_ok))
        return ck_err_set(err, -EBADMSG, "a %s message names source '%.64s', which is not a "
                          "daemon id", kd_pw_type_name(m->type), q->source);
    return 0;
}

/* u32 n, then n files of at least min bytes each: n is checked against what is left
 * before anything is allocated. */
static int get_count(const kd_pmsg *m, ck__rbuf *r, kd_preq *q, size_t min, ck_err *err)
{
    q->n = ck__get_u32(r);
    if (r->bad || q->n > CK_MAX_WORLD || q->n > (r->len - r->pos) / min)
        return bad(m, "a file count larger than its bytes can hold", err);
    q->files = calloc(q->n ? q->n : 1, sizeof *q->files);
    return q->files ? 0 : ck_err_set(err, -ENOMEM, "out of memory");
}

static int get_file(const kd_pmsg *m, ck__rbuf *r, ck_file *f, ck_err *err)
{
    ck__get_str(r, f->name, sizeof f->name);
    if (r->bad)
        return bad(m, "a file name too long, cut short or holding a NUL", err);
    if (ck_name_check("data file", f->name, NULL) < 0)
        return ck_err_set(err, -EBADMSG, "a %s message names data file '%.64s', which is not a "
                          "plain file name", kd_pw_type_name(m->type), f->name);
    return 0;
}

/* n data file names (an ask's, a PART's), after their count. */
static void put_names(ck__wbuf *w, const ck_file *files, uint32_t n)
{
    ck__put_u32(w, n);
    for (uint32_t i = 0; i < n; i++)
        ck__put_str(w, files[i].name);
}

static int get_names(const kd_pmsg *m, ck__rbuf *r, kd_preq *q, ck_err *err)
{
    int rc = get_count(m, r, q, 2 + 1, err);
    for (uint32_t i = 0; rc == 0 && i < q->n; i++)
        rc = get_file(m, r, &q->files[i], err);
    return rc;
}

/* The 32 bytes of a manifest's SHA-256 (a stream's, a PART's); r->bad if cut short. */
static void get_sha(ck__rbuf *r, kd_preq *q)
{
    const void *sha = ck__get_bytes(r, sizeof q->manifest_sha256);
    if (sha)
        memcpy(q->manifest_sha256, sha, sizeof q->manifest_sha256);
}

/* A manifest's size as m declares it: 1 byte to CK_COPY_MANIFEST_MAX; a PUT's 0, as
 * its manifest comes last (declared by MANIFEST). */
static int manifest_size_ok(const kd_pmsg *m, uint64_t size, bool last, ck_err *err)
{
    if (last && size)
        return ck_err_set(err, -EBADMSG, "a %s message declares a manifest of %llu bytes: a "
                          "PUT's manifest comes last, declared by MANIFEST (peer protocol 7)",
                          kd_pw_type_name(m->type), (unsigned long long)size);
    if (!last && (size == 0 || size > CK_COPY_MANIFEST_MAX))
        return ck_err_set(err, -EBADMSG, "a %s message declares a manifest of %llu bytes (1 to "
                          "%llu)", kd_pw_type_name(m->type), (unsigned long long)size,
                          (unsigned long long)CK_COPY_MANIFEST_MAX);
    return 0;
}

void kd_pw_manifest(ck__wbuf *w, uint64_t size, const uint8_t sha256[CK_SHA256_LEN])
{
    ck__put_u64(w, size);
    ck__put_bytes(w, sha256, CK_SHA256_LEN);
}

int kd_pw_get_manifest(const kd_pmsg *m, uint64_t *size, uint8_t sha256[CK_SHA256_LEN],
                       ck_err *err)
{
    ck__rbuf r = ck__rbuf_make(m->data, m->len);
    *size = ck__get_u64(&r);
    const void *sha = ck__get_bytes(&r, CK_SHA256_LEN);
    if (!sha || r.bad || !ck__rbuf_done(&r))
        return bad(m, "bytes missing or left over after its size and SHA-256", err);
    memcpy(sha256, sha, CK_SHA256_LEN);
    return manifest_size_ok(m, *size, false, err);
}

void kd_pw_stream(ck__wbuf *w, const kd_preq *q)
{
    put_head(w, q);
    ck__put_u64(w, q->manifest_size);
    ck__put_bytes(w, q->manifest_sha256, sizeof q->manifest_sha256);
    ck__put_u32(w, q->block_size);
    ck__put_u32(w, q->n);
    for (uint32_t i = 0; i < q->n; i++) {
        ck__put_str(w, q->files[i].name);
        ck__put_u64(w, q->files[i].size);
    }
}

int kd_pw_get_stream(const kd_pmsg *m, kd_preq *q, ck_err *err)
{
    ck__rbuf r = ck__rbuf_make(m->data, m->len);
    int rc = get_head(m, &r, q, false, err);
    if (rc < 0)
        return rc;
    q->manifest_size = ck__get_u64(&r);
    if ((rc = manifest_size_ok(m, q->manifest_size, m->type == KD_P_PUT, err)) < 0)
        return rc;
    get_sha(&r, q);
    q->block_size = ck__get_u32(&r);
    if (!r.bad && (q->block_size < CK_ALIGN || q->block_size > CK_COPY_BLOCK_MAX ||
                   (q->block_size & (q->block_size - 1))))
        return ck_err_set(err, -EBADMSG, "a %s message declares blocks of %u bytes (a power of "
                          "two, 4096 to %u)", kd_pw_type_name(m->type), q->block_size,
                          CK_COPY_BLOCK_MAX);
    if ((rc = get_count(m, &r, q, 2 + 1 + 8, err)) < 0)
        return rc;
    for (uint32_t i = 0; i < q->n; i++) {
        if ((rc = get_file(m, &r, &q->files[i], err)) < 0)
            return rc;
        q->files[i].size = ck__get_u64(&r);
        if (!r.bad && (q->files[i].size % CK_ALIGN || q->files[i].size > (UINT64_C(1) << 62)))
            return ck_err_set(err, -EBADMSG, "a %s message declares data file %s of %llu bytes "
                              "(a multiple of 4096, at most 2^62)", kd_pw_type_name(m->type),
                              q->files[i].name, (unsigned long long)q->files[i].size);
    }
    if (!ck__rbuf_done(&r))
        return bad(m, "bytes missing or left over after the files it declares", err);
    return 0;
}

void kd_pw_ask(ck__wbuf *w, const kd_preq *q)
{
    put_head(w, q);
    ck__put_u64(w, q->time_ns);
    ck__put_u8(w, q->all);
    put_names(w, q->files, q->all ? 0 : q->n);
    ck__put_u32(w, q->window);
}

/* A window a receiver states: one its sender may keep in flight. */
static int get_window(const kd_pmsg *m, ck__rbuf *r, uint32_t *window, ck_err *err)
{
    *window = ck__get_u32(r);
    if (r->bad)
        return bad(m, "its window missing", err);
    if (*window < KD_PEER_WINDOW_MIN || *window > KD_PEER_WINDOW_MAX)
        return ck_err_set(err, -EBADMSG, "a %s message states a window of %u bytes (%u to %u)",
                          kd_pw_type_name(m->type), *window, KD_PEER_WINDOW_MIN,
                          KD_PEER_WINDOW_MAX);
    return 0;
}

void kd_pw_window(ck__wbuf *w, uint32_t window)
{
    ck__put_u32(w, window);
}

int kd_pw_get_window(const kd_pmsg *m, uint32_t *window, ck_err *err)
{
    ck__rbuf r = ck__rbuf_make(m->data, m->len);
    int rc = get_window(m, &r, window, err);
    if (rc == 0 && !ck__rbuf_done(&r))
        return bad(m, "bytes left over after its window", err);
    return rc;
}

int kd_pw_get_ask(const kd_pmsg *m, kd_preq *q, ck_err *err)
{
    ck__rbuf r = ck__rbuf_make(m->data, m->len);
    int rc = get_head(m, &r, q, true, err);
    if (rc < 0)
        return rc;
    q->time_ns = ck__get_u64(&r);
    uint8_t all = ck__get_u8(&r);
    if (!r.bad && all > 1)
        return bad(m, "an 'all' flag that is neither 0 nor 1", err);
    q->all = all;
    if ((rc = get_names(m, &r, q, err)) < 0)
        return rc;
    if (q->all && q->n)
        return bad(m, "both 'all' and a list of files", err);
    if ((rc = get_window(m, &r, &q->window, err)) < 0)
        return rc;
    if (!ck__rbuf_done(&r))
        return bad(m, "bytes missing or left over after the files it names", err);
    return 0;
}

void kd_pw_part(ck__wbuf *w, const kd_preq *q)
{
    put_head(w, q);
    ck__put_u64(w, q->time_ns);
    ck__put_bytes(w, q->manifest_sha256, sizeof q->manifest_sha256);
    ck__put_str(w, q->token);
    put_names(w, q->files, q->n);
}

int kd_pw_get_part(const kd_pmsg *m, kd_preq *q, ck_err *err)
{
    ck__rbuf r = ck__rbuf_make(m->data, m->len);
    int rc = get_head(m, &r, q, true, err);
    if (rc < 0)
        return rc;
    q->time_ns = ck__get_u64(&r);
    get_sha(&r, q);
    ck__get_str(&r, q->token, sizeof q->token);
    if (r.bad)
        return bad(m, "a time, manifest digest or token cut short or too long", err);
    /* A part of one save, into a directory of the kind a copy's commit makes. */
    if (!q->time_ns)
        return bad(m, "no commit time (a part is of one save)", err);
    if (!ck__token_ok(q->token))
        return ck_err_set(err, -EBADMSG, "a PART message names token '%.32s', which is not a "
                          "pending directory's (12 hex digits)", q->token);
    if ((rc = get_names(m, &r, q, err)) < 0)
        return rc;
    if (!q->n)
        return bad(m, "no data file to write", err);
    if (!ck__rbuf_done(&r))
        return bad(m, "bytes missing or left over after the files it names", err);
    return 0;
}

void kd_pw_error(ck__wbuf *w, const char *name, int code, const char *msg)
{
    ck__put_str(w, name);
    ck__put_u32(w, (uint32_t)code);
    ck__put_str(w, msg);
}

void kd_pw_abort(ck__wbuf *w, int code, const char *msg)
{
    kd_pw_error(w, "", code, msg);
}

int kd_pw_get_error(const kd_pmsg *m, const char *peer, ck_err *err)
{
    char name[CK_NAME_MAX], msg[CK_ERR_MSG_MAX];
    ck__rbuf r = ck__rbuf_make(m->data, m->len);
    ck__get_str(&r, name, sizeof name);
    int code = (int)ck__get_u32(&r);
    ck__get_str(&r, msg, sizeof msg);
    if (!ck__rbuf_done(&r) || code >= 0 || code < -4095)
        return ck_err_set(err, -EPROTO, "%s sent a malformed %s", peer,
                          kd_pw_type_name(m->type));
    return ck_err_set(err, code, "%s: %s", peer, msg);
}

void kd_pw_name(ck__wbuf *w, const char *name)
{
    ck__put_str(w, name);
}

int kd_pw_get_name(const kd_pmsg *m, char name[CK_NAME_MAX], ck_err *err)
{
    ck__rbuf r = ck__rbuf_make(m->data, m->len);
    ck__get_str(&r, name, CK_NAME_MAX);
    if (!ck__rbuf_done(&r) || !name_ok(name, false))
        return bad(m, "a malformed checkpoint name", err);
    return 0;
}

static void put_copy(ck__wbuf *w, const kd_peer_copy *c)
{
    ck__put_str(w, c->name);
    ck__put_u64(w, c->step);
    ck__put_u64(w, c->time_ns);
    ck__put_str(w, c->source);
    ck__put_u8(w, c->kind);
    ck__put_u8(w, c->complete);
    ck__put_u32(w, c->n_files);
    ck__put_u32(w, c->complete ? 0 : c->n_held);
    for (uint32_t f = 0; !c->complete && f < c->n_held; f++)
        ck__put_str(w, c->held[f]);
}

void kd_pw_inventory(ck__wbuf *w, const kd_peer_copy *v, size_t n)
{
    ck__put_u32(w, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        put_copy(w, &v[i]);
}

void kd_peer_copies_free(kd_peer_copy *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i].held);
    free(v);
}

/* A copy as INVENTORY_OK holds it; its source may be empty only where the copy is the
 * durable root's (TIERS_OK). */
static int get_copy(const kd_pmsg *m, ck__rbuf *r, kd_peer_copy *c, bool durable, ck_err *err)
{
    ck__get_str(r, c->name, sizeof c->name);
    c->step = ck__get_u64(r);
    c->time_ns = ck__get_u64(r);
    ck__get_str(r, c->source, sizeof c->source);
    uint8_t kind = ck__get_u8(r), complete = ck__get_u8(r);
    c->n_files = ck__get_u32(r);
    uint32_t listed = ck__get_u32(r);
    if (r->bad || kind > KD_COPY_FETCHED || complete > 1 || !source_ok(c->source, durable) ||
        ck__name_check_read("checkpoint", c->name, NULL) < 0)
        return bad(m, "a malformed copy", err);
    c->kind = kind;
    c->complete = complete;
    c->n_held = complete ? c->n_files : listed;
    if ((complete && listed) || listed > c->n_files || listed > (r->len - r->pos) / 3)
        return bad(m, "a copy listing more files than it can hold", err);
    if (!listed)
        return 0;
    c->held = calloc(listed, sizeof *c->held);
    if (!c->held)
        return ck_err_set(err, -ENOMEM, "out of memory");
    for (uint32_t f = 0; f < listed; f++) {
        ck__get_str(r, c->held[f], sizeof c->held[f]);
        if (r->bad || ck_name_check("data file", c->held[f], NULL) < 0)
            return bad(m, "a copy's data file name that is not a plain file name", err);
    }
    return 0;
}

int kd_pw_get_inventory(const kd_pmsg *m, kd_peer_copy **out, size_t *n, ck_err *err)
{
    ck__rbuf r = ck__rbuf_make(m->data, m->len);
    uint32_t k = ck__get_u32(&r);
    *out = NULL;
    *n = 0;
    /* A copy takes at least 2 + 8 + 8 + 2 + 1 + 1 + 4 + 4 bytes. */
    if (r.bad || k > (r.len - r.pos) / 30)
        return bad(m, "a copy count larger than its bytes can hold", err);
    kd_peer_copy *v = calloc(k ? k : 1, sizeof *v);
    if (!v)
        return ck_err_set(err, -ENOMEM, "out of memory");
    int rc = 0;
    for (uint32_t i = 0; rc == 0 && i < k; i++)
        rc = get_copy(m, &r, &v[i], false, err);
    if (rc == 0 && !ck__rbuf_done(&r))
        rc = bad(m, "bytes left over after its copies", err);
    if (rc < 0) {
        kd_peer_copies_free(v, k);
        return rc;
    }
    *out = v;
    *n = k;
    return 0;
}

void kd_pw_tiers(ck__wbuf *w, const kd_tview *t)
{
    ck__put_u32(w, (uint32_t)t->npeers);
    for (size_t i = 0; i < t->npeers; i++) {
        ck__put_str(w, t->peers[i].id);
        ck__put_str(w, t->peers[i].addr);
        ck__put_u32(w, (uint32_t)t->peers[i].r);
        ck__put_str(w, t->peers[i].why);
    }
    ck__put_u32(w, (uint32_t)t->n);
    for (size_t i = 0; i < t->n; i++) {
        ck__put_u8(w, t->v[i].where);
        ck__put_str(w, t->v[i].holder);
        put_copy(w, &t->v[i].c);
    }
}

void kd_tview_free(kd_tview *t)
{
    for (size_t i = 0; t->v && i < t->n; i++)
        free(t->v[i].c.held);
    free(t->v);
    free(t->peers);
    *t = (kd_tview){ 0 };
}

int kd_pw_get_tiers(const void *p, size_t len, kd_tview *t, ck_err *err)
{
    kd_pmsg m = { .type = KD_P_INVENTORY_OK, .data = (uint8_t *)p, .len = len };
    ck__rbuf r = ck__rbuf_make(p, len);
    *t = (kd_tview){ 0 };
    uint32_t np = ck__get_u32(&r);
    /* A peer takes at least 2 + 2 + 4 + 2 bytes, a copy 1 + 2 and a copy's 30. */
    if (r.bad || np > (len - r.pos) / 10)
        return ck_err_set(err, -EBADMSG, "malformed TIERS reply: a peer count larger than its "
                          "bytes can hold");
    t->peers = calloc(np ? np : 1, sizeof *t->peers);
    if (!t->peers)
        return ck_err_set(err, -ENOMEM, "out of memory");
    t->npeers = np;
    for (uint32_t i = 0; i < np && !r.bad; i++) {
        kd_tpeer *q = &t->peers[i];
        ck__get_str(&r, q->id, sizeof q->id);
        ck__get_str(&r, q->addr, sizeof q->addr);
        q->r = (int)ck__get_u32(&r);
        ck__get_str(&r, q->why, sizeof q->why);
        if (!r.bad && (!source_ok(q->id, false) || q->r > 0 || q->r < -4095))
            r.bad = true;
    }
    uint32_t nc = ck__get_u32(&r);
    int rc = 0;
    if (r.bad || nc > (len - r.pos) / 33)
        rc = ck_err_set(err, -EBADMSG, "malformed TIERS reply: its peers, or a copy count "
                        "larger than its bytes can hold");
    if (rc == 0 && !(t->v = calloc(nc ? nc : 1, sizeof *t->v)))
        rc = ck_err_set(err, -ENOMEM, "out of memory");
    for (uint32_t i = 0; rc == 0 && i < nc; i++) {
        kd_tcopy *c = &t->v[i];
        t->n = i + 1;
        c->where = ck__get_u8(&r);
        ck__get_str(&r, c->holder, sizeof c->holder);
        if (r.bad || c->where > KD_AT_DURABLE || !source_ok(c->holder, c->where == KD_AT_DURABLE))
            rc = ck_err_set(err, -EBADMSG, "malformed TIERS reply: a copy's place or holder");
        else
            rc = get_copy(&m, &r, &c->c, c->where == KD_AT_DURABLE, err);
    }
    if (rc == 0 && !ck__rbuf_done(&r))
        rc = ck_err_set(err, -EBADMSG, "malformed TIERS reply: bytes left over after its copies");
    if (rc < 0)
        kd_tview_free(t);
    return rc;
}

void kd_pw_drains(ck__wbuf *w, const kd_drain_rows *d)
{
    ck__put_u32(w, d->every);
    ck__put_u64(w, d->rate);
    ck__put_u32(w, d->n);
    for (uint32_t i = 0; i < d->n; i++) {
        const kd_drain_row *x = &d->rows[i];
        ck__put_str(w, x->name);
        ck__put_u64(w, x->step);
        ck__put_u8(w, x->state);
        ck__put_u64(w, x->done);
        ck__put_u64(w, x->total);
        ck__put_str(w, x->why);
    }
}

int kd_pw_get_drains(const void *p, size_t len, kd_drain_rows *d, ck_err *err)
{
    ck__rbuf r = ck__rbuf_make(p, len);
    *d = (kd_drain_rows){ .every = ck__get_u32(&r), .rate = ck__get_u64(&r) };
    uint32_t n = ck__get_u32(&r);
    /* A row takes at least 2 + 8 + 1 + 8 + 8 + 2 bytes. */
    if (r.bad || n > (len - r.pos) / 29)
        return ck_err_set(err, -EBADMSG, "malformed DRAIN reply: a drain count larger than "
                          "its bytes can hold");
    if (!(d->rows = calloc(n ? n : 1, sizeof *d->rows)))
        return ck_err_set(err, -ENOMEM, "out of memory");
    d->n = n;
    for (uint32_t i = 0; i < n && !r.bad; i++) {
        kd_drain_row *x = &d->rows[i];
        ck__get_str(&r, x->name, sizeof x->name);
        x->step = ck__get_u64(&r);
        x->state = ck__get_u8(&r);
        x->done = ck__get_u64(&r);
        x->total = ck__get_u64(&r);
        ck__get_str(&r, x->why, sizeof x->why);
        if (!r.bad && (ck_name_check("checkpoint", x->name, NULL) < 0 ||
                       x->state > KD_DRAIN_STANDBY))
            r.bad = true;
    }
    if (r.bad || !ck__rbuf_done(&r)) {
        free(d->rows);
        *d = (kd_drain_rows){ 0 };
        return ck_err_set(err, -EBADMSG, "malformed DRAIN reply");
    }
    return 0;
}
