/* kd_wire.h - a BEGIN as the wire carries it, with any field any value: what the
 * hostile and bounds tests send ckptd without the client library (which builds only
 * declarations it accepts). The layout is docs/PROTOCOL.md's BEGIN (version 5), as
 * async/proto.c writes it. Header-only, as kd_testlib.h. */
#ifndef KD_WIRE_H
#define KD_WIRE_H

#include "async/proto.h"

typedef struct kc_wire_tensor {
    char name[CK_NAME_MAX];
    uint8_t dtype, ndim;
    uint64_t shape[CK_MAX_NDIM];
    ck_placement pl[CK_MAX_MESH_DIMS];   /* CK_BOXES on dim 0: a box list */
    uint32_t nboxes;
    const ck_box *boxes;
    const uint64_t *writers;
} kc_wire_tensor;

typedef struct kc_wire {
    char name[CK_NAME_MAX];
    uint64_t step;
    ck_mesh mesh;
    uint64_t rank;
    bool no_hash;
    uint32_t ntensors, nblobs;
    const kc_wire_tensor *tensors;
    const ck__begin_blob *blobs;
    uint64_t staging_size;
    uint32_t nodes;
    ck_job_id job;
    uint8_t level;             /* the commit level asked (protocol 7) */
} kc_wire;

static inline void kc_put_wire(ck__wbuf *w, const kc_wire *d)
{
    ck__put_str(w, d->name);
    ck__put_u64(w, d->step);
    ck__put_u64(w, d->rank);
    ck__put_u8(w, d->no_hash);
    ck__put_u64(w, d->staging_size);
    ck__put_u8(w, (uint8_t)d->mesh.ndim);
    for (int i = 0; i < d->mesh.ndim; i++) {
        ck__put_u32(w, d->mesh.size[i]);
        ck__put_str(w, d->mesh.name[i]);
    }
    ck__put_u32(w, d->ntensors);
    for (uint32_t i = 0; i < d->ntensors; i++) {
        const kc_wire_tensor *t = &d->tensors[i];
        ck__put_str(w, t->name);
        ck__put_u8(w, t->dtype);
        ck__put_u8(w, t->ndim);
        for (int k = 0; k < t->ndim; k++)
            ck__put_u64(w, t->shape[k]);
        for (int k = 0; k < d->mesh.ndim; k++) {
            ck__put_u8(w, (uint8_t)t->pl[k].kind);
            ck__put_u8(w, (uint8_t)t->pl[k].dim);
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
    ck__put_u8(w, d->level);
}

#endif
