/* plan.c - the save plan: distinct shards and their writers (see model/plan.h). */
#include "model/plan.h"

#include <stdlib.h>
#include <string.h>

#include "model/grow.h"
#include "model/layout.h"

typedef struct plan_tensor {
    uint32_t first, count;
    bool boxes;                  /* a box list: pl is not used */
    ck_placement pl[CK_MAX_MESH_DIMS];
} plan_tensor;

struct ck__plan {
    ck_mesh mesh;
    uint64_t world;
    uint64_t *rank_bytes;        /* aligned end of each rank's data file */
    ck__plan_shard *shards;
    uint32_t nshards;
    size_t capshards;
    plan_tensor *tensors;
    uint32_t ntensors;
    size_t captensors;
};

int ck__plan_new(const ck_mesh *mesh, ck__plan **out)
{
    ck__plan *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    p->mesh = *mesh;
    p->world = ck_mesh_world(mesh);
    p->rank_bytes = calloc(p->world, sizeof *p->rank_bytes);
    if (!p->rank_bytes) {
        free(p);
        return -ENOMEM;
    }
    *out = p;
    return 0;
}

void ck__plan_free(ck__plan *p)
{
    if (!p)
        return;
    free(p->rank_bytes);
    free(p->shards);
    free(p->tensors);
    free(p);
}

static uint64_t align_up(uint64_t v)
{
    return (v + CK_ALIGN - 1) & ~(uint64_t)(CK_ALIGN - 1);
}

uint64_t ck_file_bytes(const uint64_t *shard_bytes, size_t n)
{
    uint64_t end = 0;
    for (size_t i = 0; i < n; i++)
        end = align_up(end + shard_bytes[i]);
    return end;
}

/* The index of a rank's shard among its tensor's shards: its coordinate over the
 * sharded mesh dims, row-major. Replicas (ranks that differ only on R dims) get
 * the same index. */
static uint64_t shard_index(const ck_mesh *m, const ck_placement *pl, const uint32_t *coord)
{
    uint64_t idx = 0;
    for (int d = 0; d < m->ndim; d++)
        if (pl[d].kind == CK_SHARD)
            idx = idx * m->size[d] + coord[d];
    return idx;
}

/* The rank whose coordinate is shard index i on the sharded dims and replica index
 * j on the replicated dims (both row-major over their dims). */
static uint64_t replica_rank(const ck_mesh *m, const ck_placement *pl, uint64_t i, uint64_t j,
                             uint32_t *coord)
{
    for (int d = m->ndim - 1; d >= 0; d--) {
        uint64_t *v = pl[d].kind == CK_SHARD ? &i : &j;
        coord[d] = (uint32_t)(*v % m->size[d]);
        *v /= m->size[d];
    }
    return ck_mesh_rank(m, coord);
}

/* Room for a tensor of n shards, at the end of the plan. */
static int new_tensor(ck__plan *p, const char *name, uint64_t n, plan_tensor **out, ck_err *err)
{
    if ((uint64_t)p->nshards + n > UINT32_MAX)
        return ck_err_set(err, -E2BIG, "tensor %s: more than 2^32 shards in one checkpoint", name);
    if (ck__grow(&p->shards, &p->capshards, p->nshards + n, sizeof *p->shards) < 0 ||
        ck__grow(&p->tensors, &p->captensors, p->ntensors + 1, sizeof *p->tensors) < 0)
        return ck_err_set(err, -ENOMEM, "tensor %s: out of memory planning", name);
    plan_tensor *t = &p->tensors[p->ntensors];
    memset(t, 0, sizeof *t);
    t->first = p->nshards;
    t->count = (uint32_t)n;
    *out = t;
    return 0;
}

/* Puts shard s at the end of its writer's file. */
static void place(ck__plan *p, ck__plan_shard *s, size_t itemsize)
{
    s->bytes = ck_box_numel(&s->box) * itemsize;
    s->file_off = p->rank_bytes[s->writer];
    p->rank_bytes[s->writer] = align_up(s->file_off + s->bytes);
}

static int tensor_done(ck__plan *p, const plan_tensor *t, uint32_t *first, uint32_t *count)
{
    *first = t->first;
    *count = t->count;
    p->nshards += t->count;
    p->ntensors++;
    return 0;
}

int ck__plan_add(ck__plan *p, const char *name, int ndim, const uint64_t *shape, size_t itemsize,
                const ck_placement *pl, uint32_t *first, uint32_t *count, ck_err *err)
{
    int r = ck__layout_check(name, ndim, shape, itemsize, &p->mesh, pl, err);
    if (r < 0)
        return r;
    uint64_t n = 1;
    for (int d = 0; d < p->mesh.ndim; d++)
        if (pl[d].kind == CK_SHARD)
            n *= p->mesh.size[d];
    plan_tensor *t;
    if ((r = new_tensor(p, name, n, &t, err)) < 0)
        return r;
    memcpy(t->pl, pl, (size_t)p->mesh.ndim * sizeof *pl);

    /* Each shard goes to the least-loaded of its replicas. Ties rotate with the shard
     * and tensor index, so that even a single tensor spreads over the replicas. */
    uint64_t nrep = p->world / n;
    uint32_t coord[CK_MAX_MESH_DIMS];
    for (uint64_t i = 0; i < n; i++) {
        ck__plan_shard *s = &p->shards[t->first + i];
        s->tensor = p->ntensors;
        s->writer = UINT64_MAX;
        for (uint64_t k = 0; k < nrep; k++) {
            uint64_t rank = replica_rank(&p->mesh, pl, i, (i + p->ntensors + k) % nrep, coord);
            if (s->writer == UINT64_MAX || p->rank_bytes[rank] < p->rank_bytes[s->writer])
                s->writer = rank;
        }
        ck_mesh_coord(&p->mesh, s->writer, coord);
        ck_shard_box(ndim, shape, &p->mesh, pl, coord, &s->box);
        place(p, s, itemsize);
    }
    return tensor_done(p, t, first, count);
}

int ck__plan_add_boxes(ck__plan *p, const char *name, int ndim, const uint64_t *shape,
                       size_t itemsize, uint32_t nboxes, const ck_box *boxes,
                       const uint64_t *writers, uint32_t *first, uint32_t *count, ck_err *err)
{
    ck_placement all_r[CK_MAX_MESH_DIMS] = { { 0 } };
    int r = ck__layout_check(name, ndim, shape, itemsize, &p->mesh, all_r, err);
    if (r == 0)
        r = ck_boxes_check(name, ndim, shape, nboxes, boxes, err);
    for (uint32_t i = 0; r == 0 && i < nboxes; i++)
        if (writers[i] >= p->world)
            r = ck_err_set(err, -EINVAL, "tensor %s: box %u is written by rank %llu, outside "
                           "the mesh of %llu ranks", name, i, (unsigned long long)writers[i],
                           (unsigned long long)p->world);
    plan_tensor *t;
    if (r < 0 || (r = new_tensor(p, name, nboxes, &t, err)) < 0)
        return r;
    t->boxes = true;
    for (uint32_t i = 0; i < nboxes; i++) {
        ck__plan_shard *s = &p->shards[t->first + i];
        s->tensor = p->ntensors;
        s->writer = writers[i];
        s->box = boxes[i];
        place(p, s, itemsize);
    }
    return tensor_done(p, t, first, count);
}

bool ck__plan_is_boxes(const ck__plan *p, uint32_t t)
{
    return p->tensors[t].boxes;
}

void ck__plan_range(const ck__plan *p, uint32_t t, uint32_t *first, uint32_t *count)
{
    *first = p->tensors[t].first;
    *count = p->tensors[t].count;
}

uint32_t ck__plan_nshards(const ck__plan *p)
{
    return p->nshards;
}

uint32_t ck__plan_ntensors(const ck__plan *p)
{
    return p->ntensors;
}

const ck__plan_shard *ck__plan_shard_at(const ck__plan *p, uint32_t i)
{
    return i < p->nshards ? &p->shards[i] : NULL;
}

uint32_t ck__plan_shard_of(const ck__plan *p, uint32_t t, uint64_t rank)
{
    uint32_t coord[CK_MAX_MESH_DIMS];
    ck_mesh_coord(&p->mesh, rank, coord);
    return p->tensors[t].first + (uint32_t)shard_index(&p->mesh, p->tensors[t].pl, coord);
}

uint64_t ck__plan_file_size(const ck__plan *p, uint64_t rank)
{
    return rank < p->world ? p->rank_bytes[rank] : 0;
}

const ck_mesh *ck__plan_mesh(const ck__plan *p)
{
    return &p->mesh;
}
