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
#include "format/reader_int.h"
#include "ops/copy.h"

const char *kd_pw_type_name(unsigned type)
{
    switch (type) {
    case KD_P_HELLO: return "HELLO";
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

void kd_pw_hello(ck__wbuf *w, const char *id, uint64_t instance)
{
    ck__put_str(w, id);
    ck__put_u64(w, instance);
}

int kd_pw_get_hello(const kd_pmsg *m, char id[CK_COPY_ID_MAX], uint64_t *instance,
                    ck_err *err)
{
    ck__rbuf r = ck__rbuf_make(m->data, m->len);
    ck__get_str(&r, id, CK_COPY_ID_MAX);
    *instance = ck__get_u64(&r);
    if (!ck__rbuf_done(&r))
        return bad(m, "a malformed payload", err);
    if (!source_ok(id, false))
        return bad(m, "a daemon id that is not 1 to 63 bytes of [A-Za-z0-9._-]", err);
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

void kd_pw_stream(ck__wbuf *w, const kd_preq *q)
{
    put_head(w, q);
    ck__put_u64(w, q->manifest_size);
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
    if (!r.bad && (q->manifest_size == 0 || q->manifest_size > CK_COPY_MANIFEST_MAX))
        return ck_err_set(err, -EBADMSG, "a %s message declares a manifest of %llu bytes (1 to "
                          "%llu)", kd_pw_type_name(m->type),
                          (unsigned long long)q->manifest_size,
                          (unsigned long long)CK_COPY_MANIFEST_MAX);
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
    ck__put_u8(w, q->all);
    ck__put_u32(w, q->all ? 0 : q->n);
    for (uint32_t i = 0; !q->all && i < q->n; i++)
        ck__put_str(w, q->files[i].name);
}

int kd_pw_get_ask(const kd_pmsg *m, kd_preq *q, ck_err *err)
{
    ck__rbuf r = ck__rbuf_make(m->data, m->len);
    int rc = get_head(m, &r, q, true, err);
    if (rc < 0)
        return rc;
    uint8_t all = ck__get_u8(&r);
    if (!r.bad && all > 1)
        return bad(m, "an 'all' flag that is neither 0 nor 1", err);
    q->all = all;
    if ((rc = get_count(m, &r, q, 2 + 1, err)) < 0)
        return rc;
    if (q->all && q->n)
        return bad(m, "both 'all' and a list of files", err);
    for (uint32_t i = 0; i < q->n; i++)
        if ((rc = get_file(m, &r, &q->files[i], err)) < 0)
            return rc;
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

void kd_pw_inventory(ck__wbuf *w, const kd_peer_copy *v, size_t n)
{
    ck__put_u32(w, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        ck__put_str(w, v[i].name);
        ck__put_u64(w, v[i].step);
        ck__put_str(w, v[i].source);
        ck__put_u8(w, v[i].replica);
        ck__put_u8(w, v[i].complete);
        ck__put_u32(w, v[i].n_files);
        ck__put_u32(w, v[i].complete ? 0 : v[i].n_held);
        for (uint32_t f = 0; !v[i].complete && f < v[i].n_held; f++)
            ck__put_str(w, v[i].held[f]);
    }
}

void kd_peer_copies_free(kd_peer_copy *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i].held);
    free(v);
}

static int get_copy(const kd_pmsg *m, ck__rbuf *r, kd_peer_copy *c, ck_err *err)
{
    ck__get_str(r, c->name, sizeof c->name);
    c->step = ck__get_u64(r);
    ck__get_str(r, c->source, sizeof c->source);
    uint8_t replica = ck__get_u8(r), complete = ck__get_u8(r);
    c->n_files = ck__get_u32(r);
    uint32_t listed = ck__get_u32(r);
    if (r->bad || replica > 1 || complete > 1 || !source_ok(c->source, false) ||
        ck__name_check_read("checkpoint", c->name, NULL) < 0)
        return bad(m, "a malformed copy", err);
    c->replica = replica;
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
    /* A copy takes at least 2 + 8 + 2 + 1 + 1 + 4 + 4 bytes. */
    if (r.bad || k > (r.len - r.pos) / 22)
        return bad(m, "a copy count larger than its bytes can hold", err);
    kd_peer_copy *v = calloc(k ? k : 1, sizeof *v);
    if (!v)
        return ck_err_set(err, -ENOMEM, "out of memory");
    int rc = 0;
    for (uint32_t i = 0; rc == 0 && i < k; i++)
        rc = get_copy(m, &r, &v[i], err);
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
