/* proto.c - encoding and decoding ckptd messages (see proto.h). */
#include "async/proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/owner.h"

_Static_assert(CK_JOB_HEX_MAX == 2 * CK_JOB_ID_LEN + 1, "a job id in hex, with its NUL");

void ck__decl_tensor_free(ck__decl_tensor *t)
{
    free(t->boxes);
    free(t->writers);
    t->boxes = NULL;
    t->writers = NULL;
    t->nboxes = 0;
}

int ck__decl_tensor_copy(ck__decl_tensor *dst, const ck__decl_tensor *src)
{
    *dst = *src;
    dst->boxes = NULL;
    dst->writers = NULL;
    if (!src->nboxes)
        return 0;
    dst->boxes = malloc(src->nboxes * sizeof *dst->boxes);
    dst->writers = malloc(src->nboxes * sizeof *dst->writers);
    if (!dst->boxes || !dst->writers) {
        ck__decl_tensor_free(dst);
        return -ENOMEM;
    }
    memcpy(dst->boxes, src->boxes, src->nboxes * sizeof *dst->boxes);
    memcpy(dst->writers, src->writers, src->nboxes * sizeof *dst->writers);
    return 0;
}

const char *ck__decl_tensor_diff(const ck__decl_tensor *a, const ck__decl_tensor *b,
                                 int mesh_ndim)
{
    if (strcmp(a->name, b->name))
        return "name";
    if (a->dtype != b->dtype)
        return "dtype";
    if (a->ndim != b->ndim)
        return "rank";
    for (int k = 0; k < a->ndim && k < CK_MAX_NDIM; k++)
        if (a->shape[k] != b->shape[k])
            return "shape";
    for (int k = 0; k < mesh_ndim; k++)
        if (a->pl[k].kind != b->pl[k].kind || a->pl[k].dim != b->pl[k].dim)
            return "placements";
    if (a->nboxes != b->nboxes)
        return "boxes";
    for (uint32_t i = 0; i < a->nboxes; i++) {
        if (a->writers[i] != b->writers[i])
            return "box writers";
        if (!ck_box_equal(&a->boxes[i], &b->boxes[i]))
            return "boxes";
    }
    return NULL;
}

void ck__decl_free(ck__decl *d)
{
    for (uint32_t i = 0; d->tensors && i < d->ntensors; i++)
        ck__decl_tensor_free(&d->tensors[i]);
    free(d->tensors);
    free(d->blobs);
    d->tensors = NULL;
    d->blobs = NULL;
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

bool ck__decl_blob_bytes(const ck__decl *d, uint64_t *out)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < d->nblobs; i++) {
        if (d->blobs[i].len > UINT64_MAX - sum)
            return false;
        sum += d->blobs[i].len;
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

void ck__proto_put_decl(ck__wbuf *w, const ck__decl *d)
{
    ck__put_str(w, d->name);
    ck__put_u64(w, d->step);
    put_mesh(w, &d->mesh);
    ck__put_u64(w, d->rank);
    ck__put_u64(w, d->world);
    ck__put_u8(w, d->no_hash);
    ck__put_u64(w, d->staging_size);
    ck__put_u32(w, d->ntensors);
    for (uint32_t i = 0; i < d->ntensors; i++) {
        const ck__decl_tensor *t = &d->tensors[i];
        ck__put_str(w, t->name);
        ck__put_u8(w, t->dtype);
        ck__put_u8(w, t->ndim);
        for (int k = 0; k < t->ndim; k++)
            ck__put_u64(w, t->shape[k]);
        for (int k = 0; k < d->mesh.ndim; k++) {
            ck__put_u8(w, t->pl[k].kind);
            ck__put_u8(w, t->pl[k].dim);
        }
        if (t->pl[0].kind != CK_BOXES)
            continue;
        ck__put_u32(w, t->nboxes);
        for (uint32_t b = 0; b < t->nboxes; b++) {
            for (int k = 0; k < t->ndim; k++) {
                ck__put_u64(w, t->boxes[b].off[k]);
                ck__put_u64(w, t->boxes[b].len[k]);
            }
            ck__put_u64(w, t->writers[b]);
        }
    }
    ck__put_u32(w, d->nblobs);
    for (uint32_t i = 0; i < d->nblobs; i++) {
        ck__put_str(w, d->blobs[i].name);
        ck__put_u64(w, d->blobs[i].len);
    }
    ck__put_u32(w, d->nodes);
    ck__put_bytes(w, d->job.bytes, CK_JOB_ID_LEN);
}

/* A box list: its count is checked against the limits and against the bytes left
 * (a box takes 8 * (2 * ndim + 1) of them) before anything is allocated. *total
 * counts the boxes of the whole message. */
static int get_boxes(ck__rbuf *r, ck__decl_tensor *t, uint64_t *total)
{
    uint32_t n = ck__get_u32(r);
    size_t each = 8u * (2u * t->ndim + 1u);
    if (r->bad || n > CK_MAX_BOXES || *total + n > CK_PROTO_MAX_BOXES ||
        n > (r->len - r->pos) / each)
        return -EBADMSG;
    *total += n;
    t->nboxes = n;
    t->boxes = calloc(n ? n : 1, sizeof *t->boxes);
    t->writers = calloc(n ? n : 1, sizeof *t->writers);
    if (!t->boxes || !t->writers)
        return -EBADMSG;
    for (uint32_t b = 0; b < n; b++) {
        t->boxes[b].ndim = t->ndim;
        for (int k = 0; k < t->ndim; k++) {
            t->boxes[b].off[k] = ck__get_u64(r);
            t->boxes[b].len[k] = ck__get_u64(r);
        }
        t->writers[b] = ck__get_u64(r);
    }
    return r->bad ? -EBADMSG : 0;
}

int ck__proto_get_decl(const void *p, size_t len, ck__decl *d, ck_err *err)
{
    ck__rbuf r = ck__rbuf_make(p, len);
    memset(d, 0, sizeof *d);
    uint64_t boxes = 0;
    ck__get_str(&r, d->name, sizeof d->name);
    d->step = ck__get_u64(&r);
    get_mesh(&r, &d->mesh);
    d->rank = ck__get_u64(&r);
    d->world = ck__get_u64(&r);
    d->no_hash = ck__get_u8(&r) != 0;
    d->staging_size = ck__get_u64(&r);
    d->ntensors = ck__get_u32(&r);
    /* A tensor takes at least 6 bytes on the wire: the count cannot promise more
     * records than the message holds, so a hostile count allocates nothing big. */
    if (r.bad || d->ntensors > CK_PROTO_MAX_TENSORS || d->ntensors > (len - r.pos) / 6)
        goto bad;
    d->tensors = calloc(d->ntensors ? d->ntensors : 1, sizeof *d->tensors);
    if (!d->tensors)
        return ck_err_set(err, -ENOMEM, "out of memory decoding %u tensors", d->ntensors);
    for (uint32_t i = 0; i < d->ntensors && !r.bad; i++) {
        ck__decl_tensor *t = &d->tensors[i];
        ck__get_str(&r, t->name, sizeof t->name);
        t->dtype = ck__get_u8(&r);
        t->ndim = ck__get_u8(&r);
        if (t->ndim > CK_MAX_NDIM)
            goto bad;
        for (int k = 0; k < t->ndim; k++)
            t->shape[k] = ck__get_u64(&r);
        for (int k = 0; k < d->mesh.ndim; k++) {
            t->pl[k].kind = ck__get_u8(&r);
            t->pl[k].dim = ck__get_u8(&r);
        }
        if (!r.bad && t->pl[0].kind == CK_BOXES && get_boxes(&r, t, &boxes) < 0)
            goto bad;
    }
    d->nblobs = ck__get_u32(&r);
    if (r.bad || d->nblobs > CK_PROTO_MAX_BLOBS)
        goto bad;
    d->blobs = calloc(d->nblobs ? d->nblobs : 1, sizeof *d->blobs);
    if (!d->blobs) {
        ck__decl_free(d);
        return ck_err_set(err, -ENOMEM, "out of memory decoding %u blobs", d->nblobs);
    }
    for (uint32_t i = 0; i < d->nblobs; i++) {
        ck__get_str(&r, d->blobs[i].name, sizeof d->blobs[i].name);
        d->blobs[i].len = ck__get_u64(&r);
    }
    d->nodes = ck__get_u32(&r);
    const void *job = ck__get_bytes(&r, CK_JOB_ID_LEN);
    if (job)
        memcpy(d->job.bytes, job, CK_JOB_ID_LEN);
    if (ck__rbuf_done(&r))
        return 0;
bad:
    ck__decl_free(d);
    return ck_err_set(err, -EBADMSG, "malformed BEGIN message (truncated, trailing bytes, "
                      "or more than %u tensors / %u blobs / %u boxes)", CK_PROTO_MAX_TENSORS,
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
