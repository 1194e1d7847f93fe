/* proto.c - encoding and decoding ckptd messages (see proto.h). */
#include "async/proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/owner.h"
#include "format/decl.h"

_Static_assert(CK_JOB_HEX_MAX == 2 * CK_JOB_ID_LEN + 1, "a job id in hex, with its NUL");

uint64_t ck__begin_world(const ck__begin *b)
{
    return ck_mesh_world(ck_decl_mesh(b->decl));
}

void ck__begin_free(ck__begin *b)
{
    ck_decl_free(b->decl);
    free(b->blobs);
    b->decl = NULL;
    b->blobs = NULL;
}

bool ck__job_set(const ck_job_id *job)
{
    for (int i = 0; i < CK_JOB_ID_LEN; i++)
        if (job->bytes[i])
            return true;
    return false;
}

bool ck__job_same(const ck_job_id *a, const ck_job_id *b)
{
    return memcmp(a->bytes, b->bytes, CK_JOB_ID_LEN) == 0;
}

void ck__job_hex(const ck_job_id *job, char *out)
{
    for (int i = 0; i < CK_JOB_ID_LEN; i++)
        snprintf(out + 2 * i, 3, "%02x", job->bytes[i]);
}

bool ck__begin_blob_bytes(const ck__begin *b, uint64_t *out)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < b->nblobs; i++) {
        if (b->blobs[i].len > UINT64_MAX - sum)
            return false;
        sum += b->blobs[i].len;
    }
    *out = sum;
    return true;
}

void ck__proto_start(ck__wbuf *w, uint16_t type)
{
    w->len = 0;
    ck__put_u32(w, CK_PROTO_MAGIC);
    ck__put_u16(w, CK_PROTO_VERSION);
    ck__put_u16(w, type);
    ck__put_u32(w, 0);
    ck__put_u32(w, 0);
}

int ck__proto_end(ck__wbuf *w)
{
    if (w->oom)
        return -ENOMEM;
    if (w->len - CK_PROTO_HDR > CK_PROTO_MAX_MSG)   /* the peer would refuse it unread */
        return -EMSGSIZE;
    uint32_t n = (uint32_t)(w->len - CK_PROTO_HDR);
    for (int i = 0; i < 4; i++)
        w->p[8 + i] = (uint8_t)(n >> (8 * i));
    return 0;
}

int ck__proto_header(const uint8_t hdr[CK_PROTO_HDR], uint16_t *type, uint32_t *len,
                    ck_err *err)
{
    ck__rbuf r = ck__rbuf_make(hdr, CK_PROTO_HDR);
    uint32_t magic = ck__get_u32(&r);
    uint16_t version = ck__get_u16(&r);
    *type = ck__get_u16(&r);
    *len = ck__get_u32(&r);
    uint32_t zero = ck__get_u32(&r);
    if (magic != CK_PROTO_MAGIC || zero != 0)
        return ck_err_set(err, -EPROTO, "not a ckptd message (bad magic or header)");
    if (version != CK_PROTO_VERSION)
        return ck_err_set(err, -EPROTONOSUPPORT, "the peer speaks ckptd protocol version %u, "
                          "this build %u: run a client and a ckptd of one release", version,
                          CK_PROTO_VERSION);
    if (*len > CK_PROTO_MAX_MSG)
        return ck_err_set(err, -EMSGSIZE, "message of %u bytes (at most %u)", *len,
                          CK_PROTO_MAX_MSG);
    return 0;
}

static void put_mesh(ck__wbuf *w, const ck_mesh *m)
{
    ck__put_u8(w, (uint8_t)m->ndim);
    for (int i = 0; i < m->ndim; i++) {
        ck__put_u32(w, m->size[i]);
        ck__put_str(w, m->name[i]);
    }
}

static void get_mesh(ck__rbuf *r, ck_mesh *m)
{
    memset(m, 0, sizeof *m);
    m->ndim = ck__get_u8(r);
    if (m->ndim < 1 || m->ndim > CK_MAX_MESH_DIMS) {
        r->bad = true;
        return;
    }
    for (int i = 0; i < m->ndim; i++) {
        m->size[i] = ck__get_u32(r);
        ck__get_str(r, m->name[i], sizeof m->name[i]);
    }
}

/* The declaration: the mesh, then each tensor (name, dtype, dims, shape, a placement
 * per mesh dim; a box list's boxes and writers). */
static void put_decl(ck__wbuf *w, const ck_decl *d)
{
    const ck_mesh *mesh = ck_decl_mesh(d);
    const ck_tensor *ts = ck__decl_tensors(d);
    put_mesh(w, mesh);
    ck__put_u32(w, ck__decl_ntensors(d));
    for (uint32_t i = 0; i < ck__decl_ntensors(d); i++) {
        const ck_tensor *t = &ts[i];
        ck__put_str(w, t->name);
        ck__put_u8(w, (uint8_t)t->dtype);
        ck__put_u8(w, (uint8_t)t->ndim);
        for (int k = 0; k < t->ndim; k++)
            ck__put_u64(w, t->shape[k]);
        for (int k = 0; k < mesh->ndim; k++) {
            ck__put_u8(w, (uint8_t)t->pl[k].kind);
            ck__put_u8(w, (uint8_t)t->pl[k].dim);
        }
        if (!ck_tensor_is_boxes(t))
            continue;
        uint32_t n;
        const ck_box *boxes;
        const uint64_t *writers;
        ck__decl_boxes(d, i, &n, &boxes, &writers);
        ck__put_u32(w, n);
        for (uint32_t b = 0; b < n; b++) {
            for (int k = 0; k < t->ndim; k++) {
                ck__put_u64(w, boxes[b].off[k]);
                ck__put_u64(w, boxes[b].len[k]);
            }
            ck__put_u64(w, writers[b]);
        }
    }
}

void ck__proto_put_begin(ck__wbuf *w, const ck__begin *b)
{
    ck__put_str(w, b->name);
    ck__put_u64(w, b->step);
    ck__put_u64(w, b->rank);
    ck__put_u8(w, b->no_hash);
    ck__put_u64(w, b->staging_size);
    put_decl(w, b->decl);
    ck__put_u32(w, b->nblobs);
    for (uint32_t i = 0; i < b->nblobs; i++) {
        ck__put_str(w, b->blobs[i].name);
        ck__put_u64(w, b->blobs[i].len);
    }
    ck__put_u32(w, b->nodes);
    ck__put_bytes(w, b->job.bytes, CK_JOB_ID_LEN);
    ck__put_u8(w, b->level);
}

/* A box list: its count is checked against the limits and against the bytes left
 * (a box takes 8 * (2 * ndim + 1) of them) before anything is allocated. *total
 * counts the boxes of the whole message. */
static int get_boxes(ck__rbuf *r, const ck_tensor *t, ck_decl *d, uint64_t *total,
                     ck_err *err)
{
    uint32_t n = ck__get_u32(r);
    size_t each = 8u * (2u * (size_t)t->ndim + 1u);
    if (r->bad || n > CK_MAX_BOXES || *total + n > CK_PROTO_MAX_BOXES ||
        n > (r->len - r->pos) / each)
        return -EBADMSG;
    *total += n;
    ck_box *boxes = calloc(n ? n : 1, sizeof *boxes);
    uint64_t *writers = calloc(n ? n : 1, sizeof *writers);
    int rc = boxes && writers ? 0 : ck_err_set(err, -ENOMEM, "out of memory decoding %u "
                                                "boxes", n);
    for (uint32_t b = 0; rc == 0 && b < n; b++) {
        boxes[b].ndim = t->ndim;
        for (int k = 0; k < t->ndim; k++) {
            boxes[b].off[k] = ck__get_u64(r);
            boxes[b].len[k] = ck__get_u64(r);
        }
        writers[b] = ck__get_u64(r);
    }
    if (rc == 0 && r->bad)
        rc = -EBADMSG;
    if (rc == 0)
        rc = ck_decl_tensor_boxes(d, t->name, t->dtype, t->ndim, t->shape, n, boxes, writers,
                                  err);
    free(boxes);
    free(writers);
    return rc;
}

static int get_decl(ck__rbuf *r, size_t len, ck_decl **out, ck_err *err)
{
    ck_mesh mesh;
    get_mesh(r, &mesh);
    uint32_t n = ck__get_u32(r);
    /* A tensor takes at least 6 bytes on the wire: the count cannot promise more
     * records than the message holds, so a hostile count allocates nothing big. */
    if (r->bad || n > CK_PROTO_MAX_TENSORS || n > (len - r->pos) / 6)
        return -EBADMSG;
    int rc = ck_decl_new(out, &mesh, err);
    uint64_t boxes = 0;
    for (uint32_t i = 0; rc == 0 && i < n; i++) {
        ck_tensor t = { 0 };
        ck__get_str(r, t.name, sizeof t.name);
        t.dtype = (ck_dtype)ck__get_u8(r);
        t.ndim = ck__get_u8(r);
        if (r->bad || t.ndim > CK_MAX_NDIM)
            return -EBADMSG;
        for (int k = 0; k < t.ndim; k++)
            t.shape[k] = ck__get_u64(r);
        for (int k = 0; k < mesh.ndim; k++) {
            t.pl[k].kind = ck__get_u8(r);
            t.pl[k].dim = ck__get_u8(r);
        }
        if (r->bad)
            return -EBADMSG;
        /* A box list says so on every mesh dim, and nothing else. */
        for (int k = 1; t.pl[0].kind == CK_BOXES && k < mesh.ndim; k++)
            if (t.pl[k].kind != CK_BOXES || t.pl[k].dim)
                return ck_err_set(err, -EINVAL, "tensor %s: bad placement on mesh dim %d",
                                  t.name, k);
        rc = t.pl[0].kind == CK_BOXES
           ? get_boxes(r, &t, *out, &boxes, err)
           : ck_decl_tensor(*out, t.name, t.dtype, t.ndim, t.shape, t.pl, err);
    }
    return rc;
}

int ck__proto_get_begin(const void *p, size_t len, ck__begin *b, ck_err *err)
{
    ck__rbuf r = ck__rbuf_make(p, len);
    memset(b, 0, sizeof *b);
    ck__get_str(&r, b->name, sizeof b->name);
    b->step = ck__get_u64(&r);
    b->rank = ck__get_u64(&r);
    b->no_hash = ck__get_u8(&r) != 0;
    b->staging_size = ck__get_u64(&r);
    int rc = r.bad ? -EBADMSG : get_decl(&r, len, &b->decl, err);
    if (rc == -EBADMSG)
        goto bad;
    if (rc < 0) {
        ck__begin_free(b);
        return ck_err_set(err, rc, "checkpoint %s, rank %llu", b->name,
                          (unsigned long long)b->rank);
    }
    b->nblobs = ck__get_u32(&r);
    if (r.bad || b->nblobs > CK_PROTO_MAX_BLOBS)
        goto bad;
    b->blobs = calloc(b->nblobs ? b->nblobs : 1, sizeof *b->blobs);
    if (!b->blobs) {
        ck__begin_free(b);
        return ck_err_set(err, -ENOMEM, "out of memory decoding %u blobs", b->nblobs);
    }
    for (uint32_t i = 0; i < b->nblobs; i++) {
        ck__get_str(&r, b->blobs[i].name, sizeof b->blobs[i].name);
        b->blobs[i].len = ck__get_u64(&r);
    }
    b->nodes = ck__get_u32(&r);
    const void *job = ck__get_bytes(&r, CK_JOB_ID_LEN);
    if (job)
        memcpy(b->job.bytes, job, CK_JOB_ID_LEN);
    b->level = ck__get_u8(&r);
    if (b->level > CK_LEVEL_DURABLE)
        goto bad;
    if (ck__rbuf_done(&r))
        return 0;
bad:
    ck__begin_free(b);
    return ck_err_set(err, -EBADMSG, "malformed BEGIN message (truncated, trailing bytes, "
                      "or more than %u tensors / %u blobs / %u boxes, or an unknown commit level)", CK_PROTO_MAX_TENSORS,
                      CK_PROTO_MAX_BLOBS, CK_PROTO_MAX_BOXES);
}

void ck__proto_put_status(ck__wbuf *w, const ck__proto_status *s)
{
    ck__put_u64(w, s->staging_limit);
    ck__put_u64(w, s->staging_used);
    ck__put_u32(w, s->clients);
    ck__put_u32(w, s->waiting);
    ck__put_u32(w, s->n);
    for (uint32_t i = 0; i < s->n; i++) {
        const ck__proto_ckpt *c = &s->ckpts[i];
        ck__put_str(w, c->name);
        ck__put_u64(w, c->world);
        ck__put_u64(w, c->joined);
        ck__put_u64(w, c->staged);
        ck__put_u64(w, c->durable);
        ck__put_u64(w, c->bytes_staged);
        ck__put_u64(w, c->bytes_written);
        ck__put_u64(w, c->bytes_per_s);
        ck__put_u32(w, c->clients);
        ck__put_u8(w, c->commit_requested);
        ck__put_u8(w, c->state);
    }
}

int ck__proto_get_status(const void *p, size_t len, ck__proto_status *s, ck_err *err)
{
    ck__rbuf r = ck__rbuf_make(p, len);
    memset(s, 0, sizeof *s);
    s->staging_limit = ck__get_u64(&r);
    s->staging_used = ck__get_u64(&r);
    s->clients = ck__get_u32(&r);
    s->waiting = ck__get_u32(&r);
    s->n = ck__get_u32(&r);
    if (r.bad || s->n > (len - r.pos) / 60)
        return ck_err_set(err, -EBADMSG, "malformed STATUS reply");
    s->ckpts = calloc(s->n ? s->n : 1, sizeof *s->ckpts);
    if (!s->ckpts)
        return -ENOMEM;
    for (uint32_t i = 0; i < s->n; i++) {
        ck__proto_ckpt *c = &s->ckpts[i];
        ck__get_str(&r, c->name, sizeof c->name);
        c->world = ck__get_u64(&r);
        c->joined = ck__get_u64(&r);
        c->staged = ck__get_u64(&r);
        c->durable = ck__get_u64(&r);
        c->bytes_staged = ck__get_u64(&r);
        c->bytes_written = ck__get_u64(&r);
        c->bytes_per_s = ck__get_u64(&r);
        c->clients = ck__get_u32(&r);
        c->commit_requested = ck__get_u8(&r);
        c->state = ck__get_u8(&r);
    }
    if (ck__rbuf_done(&r))
        return 0;
    free(s->ckpts);
    s->ckpts = NULL;
    return ck_err_set(err, -EBADMSG, "malformed STATUS reply");
}

/* The commit levels' names (ck/client.h): here, below both the client and the save
 * engine, which name them in messages. */
static const char *const level_names[] = {
    [CK_LEVEL_DEFAULT] = "default", [CK_LEVEL_LOCAL] = "local",
    [CK_LEVEL_REPLICATED] = "replicated", [CK_LEVEL_DURABLE] = "durable",
};

const char *ck_level_name(ck_level level)
{
    return (unsigned)level <= CK_LEVEL_DURABLE ? level_names[level] : "?";
}

int ck_level_parse(const char *name, ck_level *out, ck_err *err)
{
    for (unsigned i = 0; i <= CK_LEVEL_DURABLE; i++)
        if (name && !strcmp(name, level_names[i])) {
            *out = (ck_level)i;
            return 0;
        }
    return ck_err_set(err, -EINVAL, "commit level '%s': one of local, replicated, durable, "
                      "default", name ? name : "");
}
