/* decl.c - a checkpoint's declaration and its plan (see ck/decl.h and format/decl.h).
 *
 * Declaring checks what needs nothing but the tensor itself (its name, dtype, dims,
 * placements, its boxes' writers); the seal checks the rest (a layout that fits, a box
 * list that tiles) while it plans, so that a declaration decoded on ckptd's event
 * loop costs that loop nothing beyond reading it: its planner thread seals it.
 */
#include "format/decl.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/grow.h"
#include "model/index.h"

typedef struct decl_boxes {
    uint32_t n;
    ck_box *boxes;
    uint64_t *writers;
} decl_boxes;

struct ck_decl {
    atomic_uint refs;
    pthread_mutex_t mu;            /* the seal: ranks that are threads share a declaration */
    ck_mesh mesh;
    uint64_t world;
    ck_tensor *tensors;
    decl_boxes *boxes;             /* per tensor */
    uint32_t ntensors;
    size_t cap, capboxes;
    ck__index index;
    uint64_t shards, nboxes;
    bool sealed;
    int seal_rc;                   /* the seal's outcome, told to every later seal */
    char seal_msg[CK_ERR_MSG_MAX];
    ck__plan *plan;
    uint32_t *first;
};

static const char *tensor_name(const void *owner, uint32_t i)
{
    return ((const ck_decl *)owner)->tensors[i].name;
}

int ck_decl_new(ck_decl **out, const ck_mesh *mesh, ck_err *err)
{
    uint64_t world = ck_mesh_world(mesh);
    if (mesh->ndim < 1 || mesh->ndim > CK_MAX_MESH_DIMS || world == 0 || world > CK_MAX_WORLD)
        return ck_err_set(err, -EINVAL, "a mesh of %d dims and %llu ranks (at most %d dims and "
                          "%u ranks)", mesh->ndim, (unsigned long long)world, CK_MAX_MESH_DIMS,
                          CK_MAX_WORLD);
    ck_decl *d = calloc(1, sizeof *d);
    if (!d)
        return ck_err_set(err, -ENOMEM, "out of memory");
    atomic_init(&d->refs, 1);
    pthread_mutex_init(&d->mu, NULL);
    d->mesh = *mesh;
    d->world = world;
    *out = d;
    return 0;
}

ck_decl *ck_decl_ref(ck_decl *d)
{
    atomic_fetch_add(&d->refs, 1);
    return d;
}

void ck_decl_free(ck_decl *d)
{
    if (!d || atomic_fetch_sub(&d->refs, 1) != 1)
        return;
    for (uint32_t i = 0; i < d->ntensors; i++) {
        free(d->boxes[i].boxes);
        free(d->boxes[i].writers);
    }
    free(d->boxes);
    free(d->tensors);
    free(d->first);
    ck__index_free(&d->index);
    ck__plan_free(d->plan);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

/* What both kinds of tensor check and record; the new tensor, its boxes zeroed, in
 * *out (counted once the caller is done with it). */
static int add(ck_decl *d, const char *name, ck_dtype dtype, int ndim, const uint64_t *shape,
               ck_tensor **out, ck_err *err)
{
    int r = ck_key_check("tensor", name, err);
    if (r < 0)
        return r;
    if (d->sealed)
        return ck_err_set(err, -EINVAL, "tensor %s: declared after the declaration was sealed "
                          "(a save began with it)", name);
    if (ck__index_find(&d->index, tensor_name, d, name))
        return ck_err_set(err, -EEXIST, "tensor %s is declared twice", name);
    if (!ck_dtype_size(dtype))
        return ck_err_set(err, -EINVAL, "tensor %s: unknown dtype code %d", name, (int)dtype);
    if (ndim < 0 || ndim > CK_MAX_NDIM)
        return ck_err_set(err, -EINVAL, "tensor %s: %d dims (at most %d)", name, ndim,
                          CK_MAX_NDIM);
    if (d->ntensors == UINT32_MAX ||
        ck__grow(&d->tensors, &d->cap, d->ntensors + 1, sizeof *d->tensors) < 0 ||
        ck__grow(&d->boxes, &d->capboxes, d->ntensors + 1, sizeof *d->boxes) < 0)
        return ck_err_set(err, -ENOMEM, "tensor %s: out of memory", name);
    ck_tensor *t = &d->tensors[d->ntensors];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->id = d->ntensors;
    t->dtype = dtype;
    t->ndim = ndim;
    if (ndim)           /* a 0-D tensor's shape may be NULL */
        memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    d->boxes[d->ntensors] = (decl_boxes){ 0 };
    *out = t;
    return 0;
}

static int added(ck_decl *d, ck_tensor *t, uint64_t shards, ck_err *err)
{
    if (ck__index_add(&d->index, tensor_name, d, d->ntensors, d->ntensors) < 0)
        return ck_err_set(err, -ENOMEM, "tensor %s: out of memory", t->name);
    d->ntensors++;
    d->shards += shards;
    return 0;
}

int ck_decl_tensor(ck_decl *d, const char *name, ck_dtype dtype, int ndim,
                   const uint64_t *shape, const ck_placement *pl, ck_err *err)
{
    ck_tensor *t;
    int r = add(d, name, dtype, ndim, shape, &t, err);
    if (r < 0)
        return r;
    uint64_t shards = 1;
    for (int k = 0; k < d->mesh.ndim; k++) {
        if (pl[k].kind > CK_SHARD || (pl[k].kind == CK_SHARD && pl[k].dim >= ndim))
            return ck_err_set(err, -EINVAL, "tensor %s: placement %d of mesh dim %d does not "
                              "fit its %d dims", name, (int)pl[k].kind, k, ndim);
        if (pl[k].kind == CK_SHARD)
            shards *= d->mesh.size[k];
        t->pl[k] = pl[k];
    }
    return added(d, t, shards, err);
}

int ck_decl_tensor_boxes(ck_decl *d, const char *name, ck_dtype dtype, int ndim,
                         const uint64_t *shape, uint32_t nboxes, const ck_box *boxes,
                         const uint64_t *writers, ck_err *err)
{
    ck_tensor *t;
    int r = add(d, name, dtype, ndim, shape, &t, err);
    if (r < 0)
        return r;
    if (nboxes > CK_MAX_BOXES)
        return ck_err_set(err, -E2BIG, "tensor %s: %u boxes (at most %u)", name, nboxes,
                          CK_MAX_BOXES);
    for (uint32_t i = 0; i < nboxes; i++) {
        if (writers[i] >= d->world)
            return ck_err_set(err, -EINVAL, "tensor %s: box %u is written by rank %llu, "
                              "outside the world of %llu", name, i,
                              (unsigned long long)writers[i], (unsigned long long)d->world);
        if (boxes[i].ndim != ndim)
            return ck_err_set(err, -EINVAL, "tensor %s: box %u has %d dims, the tensor %d",
                              name, i, boxes[i].ndim, ndim);
    }
    decl_boxes *b = &d->boxes[d->ntensors];
    b->boxes = malloc((nboxes ? nboxes : 1) * sizeof *b->boxes);
    b->writers = malloc((nboxes ? nboxes : 1) * sizeof *b->writers);
    if (!b->boxes || !b->writers) {
        free(b->boxes);
        free(b->writers);
        *b = (decl_boxes){ 0 };
        return ck_err_set(err, -ENOMEM, "tensor %s: out of memory for %u boxes", name, nboxes);
    }
    memcpy(b->boxes, boxes, nboxes * sizeof *boxes);
    memcpy(b->writers, writers, nboxes * sizeof *writers);
    b->n = nboxes;
    for (int k = 0; k < CK_MAX_MESH_DIMS; k++)
        t->pl[k] = (ck_placement){ .kind = CK_BOXES };
    if ((r = added(d, t, nboxes, err)) < 0)
        return r;
    d->nboxes += nboxes;
    return 0;
}

/* The plan of every tensor, in declaration order. */
static int plan(ck_decl *d, ck_err *err)
{
    int r = ck__plan_new(&d->mesh, &d->plan);
    if (r == 0 && !(d->first = malloc((d->ntensors ? d->ntensors : 1) * sizeof *d->first)))
        r = -ENOMEM;
    if (r < 0)
        return ck_err_set(err, r, "out of memory planning %u tensors", d->ntensors);
    for (uint32_t i = 0; i < d->ntensors && r == 0; i++) {
        ck_tensor *t = &d->tensors[i];
        const decl_boxes *b = &d->boxes[i];
        size_t is = ck_dtype_size(t->dtype);
        uint32_t count;
        r = ck_tensor_is_boxes(t)
          ? ck__plan_add_boxes(d->plan, t->name, t->ndim, t->shape, is, b->n, b->boxes,
                               b->writers, &d->first[i], &count, err)
          : ck__plan_add(d->plan, t->name, t->ndim, t->shape, is, t->pl, &d->first[i], &count,
                         err);
        t->n_shards = count;
    }
    return r;
}

int ck_decl_seal(ck_decl *d, ck_err *err)
{
    pthread_mutex_lock(&d->mu);
    if (!d->sealed) {
        ck_err why = { 0 };
        d->seal_rc = plan(d, &why);
        snprintf(d->seal_msg, sizeof d->seal_msg, "%s", ck_err_msg(&why));
        d->sealed = true;
    }
    int r = d->seal_rc;
    pthread_mutex_unlock(&d->mu);
    return r < 0 ? ck_err_set(err, r, "%s", d->seal_msg) : 0;
}

const ck_mesh *ck_decl_mesh(const ck_decl *d)
{
    return &d->mesh;
}

uint64_t ck_decl_file_bytes(const ck_decl *d, uint64_t rank)
{
    return d->plan && rank < d->world ? ck__plan_file_size(d->plan, rank) : 0;
}

uint32_t ck_decl_writes(const ck_decl *d, uint64_t rank)
{
    uint32_t n = 0, all = d->plan ? ck__plan_nshards(d->plan) : 0;
    for (uint32_t i = 0; i < all; i++)
        n += ck__plan_shard_at(d->plan, i)->writer == rank;
    return n;
}

uint32_t ck__decl_ntensors(const ck_decl *d)
{
    return d->ntensors;
}

const ck_tensor *ck__decl_tensors(const ck_decl *d)
{
    return d->tensors;
}

void ck__decl_boxes(const ck_decl *d, uint32_t i, uint32_t *n, const ck_box **boxes,
                    const uint64_t **writers)
{
    *n = d->boxes[i].n;
    *boxes = d->boxes[i].boxes;
    *writers = d->boxes[i].writers;
}

int64_t ck__decl_find(const ck_decl *d, const char *name)
{
    return (int64_t)ck__index_find(&d->index, tensor_name, d, name) - 1;
}

uint64_t ck__decl_shards(const ck_decl *d)
{
    return d->shards;
}

uint64_t ck__decl_nboxes(const ck_decl *d)
{
    return d->nboxes;
}

const ck__plan *ck__decl_plan(const ck_decl *d)
{
    return d->plan;
}

uint32_t ck__decl_first(const ck_decl *d, uint32_t i)
{
    return d->first[i];
}

static const char *tensor_diff(const ck_decl *a, const ck_decl *b, uint32_t i)
{
    const ck_tensor *x = &a->tensors[i], *y = &b->tensors[i];
    if (strcmp(x->name, y->name))
        return "name";
    if (x->dtype != y->dtype)
        return "dtype";
    if (x->ndim != y->ndim)
        return "rank";
    for (int k = 0; k < x->ndim; k++)
        if (x->shape[k] != y->shape[k])
            return "shape";
    for (int k = 0; k < a->mesh.ndim; k++)
        if (x->pl[k].kind != y->pl[k].kind || x->pl[k].dim != y->pl[k].dim)
            return "placements";
    const decl_boxes *p = &a->boxes[i], *q = &b->boxes[i];
    if (p->n != q->n)
        return "boxes";
    for (uint32_t k = 0; k < p->n; k++) {
        if (p->writers[k] != q->writers[k])
            return "box writers";
        if (!ck_box_equal(&p->boxes[k], &q->boxes[k]))
            return "boxes";
    }
    return NULL;
}

bool ck_decl_equal(const ck_decl *a, const ck_decl *b)
{
    uint32_t t;
    return ck__decl_diff(a, b, &t) == NULL;
}

const char *ck__decl_diff(const ck_decl *a, const ck_decl *b, uint32_t *tensor)
{
    if (a == b)
        return NULL;
    if (!ck_mesh_equal(&a->mesh, &b->mesh))
        return "mesh";
    if (a->ntensors != b->ntensors)
        return "tensor count";
    for (uint32_t i = 0; i < a->ntensors; i++) {
        const char *what = tensor_diff(a, b, i);
        if (what) {
            *tensor = i;
            return what;
        }
    }
    return NULL;
}
