/* checkpoint/state_dict.c - sharded state dicts (local shards, torch.chunk boxes) and
 * full state dicts (whole tensors on rank 0). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsdp/hooks.h"
#include "optim/optim.h"
#include "sh/state_dict.h"
#include "world/mesh.h"
#include "world/world.h"

typedef struct sd_build {
    sh_state_dict *sd;
    size_t cap;
} sd_build;

static sh_shard_entry *push(sd_build *b, ck_err *err)
{
    if (b->sd->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 16;
        sh_shard_entry *e = realloc(b->sd->entry, b->cap * sizeof *e);
        if (!e) {
            ck_err_set(err, -ENOMEM, "state dict: out of memory");
            return NULL;
        }
        b->sd->entry = e;
    }
    sh_shard_entry *e = &b->sd->entry[b->sd->n++];
    memset(e, 0, sizeof *e);
    return e;
}

/* Describes p's local shard; data (and suffix for optimizer state) from the caller.
 * An unsharded parameter is one replicated shard on a mesh of the whole world. */
static void describe(sh_shard_entry *e, const sh_param *p, const char *suffix, void *data)
{
    snprintf(e->name, sizeof e->name, "%s%s", p->name, suffix);
    e->dtype = CK_F32;
    e->ndim = p->ndim;
    for (int d = 0; d < p->ndim; d++)
        e->shape[d] = (uint64_t)p->shape[d];
    if (p->sharded_by) {
        const sh_mesh *mesh = sh_fsdp_group(p->sharded_by)->mesh;
        e->mesh = mesh->desc;
        memcpy(e->coord, mesh->coord, sizeof e->coord);
        ck_placements_default(e->mesh.ndim, e->placement);
    } else {
        e->mesh.ndim = 1;
        e->mesh.size[0] = (uint32_t)p->owner->world->size;
        e->coord[0] = (uint32_t)p->owner->world->rank;
        e->placement[0].kind = CK_REPLICATE;
    }
    /* The checkpoint core's own box rule: equal to this shard by construction (both
     * are torch.chunk on dim 0), and stated once there. */
    ck_shard_box(p->ndim, e->shape, &e->mesh, e->placement, e->coord, &e->box);
    e->data = p->shard_numel ? data : NULL;
    e->device = p->host_state ? SH_CPU : p->owner->world->device;
}

static int add_params(sh_module *m, void *arg, ck_err *err)
{
    sd_build *b = arg;
    for (int i = 0; i < m->nparam; i++) {
        sh_param *p = m->param[i];
        if (!p->materialized)
            return ck_err_set(err, -EINVAL, "state dict: parameter '%s' is on META",
                              p->name);
        sh_shard_entry *e = push(b, err);
        if (!e)
            return -ENOMEM;
        describe(e, p, "", p->shard);
    }
    return 0;
}

int sh_model_state_dict(sh_module *root, sh_state_dict *out, ck_err *err)
{
    memset(out, 0, sizeof *out);
    sd_build b = {out, 0};
    int rc = sh_module_walk(root, add_params, &b, err);
    if (rc)
        sh_state_dict_free(out);
    return rc;
}

int sh_optim_state_dict(sh_adamw *o, sh_state_dict *out, ck_err *err)
{
    memset(out, 0, sizeof *out);
    sd_build b = {out, 0};
    for (int i = 0; i < sh_adamw_num_params(o); i++) {
        if (!push(&b, err) || !push(&b, err)) {
            sh_state_dict_free(out);
            return -ENOMEM;
        }
        sh_shard_entry *m = &out->entry[out->n - 2], *v = &out->entry[out->n - 1];
        describe(m, sh_adamw_param(o, i), ".exp_avg", sh_adamw_exp_avg(o, i));
        describe(v, sh_adamw_param(o, i), ".exp_avg_sq", sh_adamw_exp_avg_sq(o, i));
    }
    return 0;
}

static const sh_shard_entry *find(const sh_state_dict *sd, const char *name)
{
    for (size_t i = 0; sd && i < sd->n; i++)
        if (strcmp(sd->entry[i].name, name) == 0)
            return &sd->entry[i];
    return NULL;
}

/* src (host memory) into p's shard on the world's device. */
static int copy_to_shard(sh_param *p, const float *src, ck_err *err)
{
    const sh_dev_ops *d = sh_dev(p->owner->world);
    int rc = d->copy(p->shard, src, p->shard_numel * sizeof(float));
    if (!rc)
        rc = d->sync();
    return rc ? ck_err_set(err, rc, "loading '%s': copying to %s", p->name, d->name) : 0;
}

static int load_params(sh_module *m, void *arg, ck_err *err)
{
    const sh_state_dict *sd = arg;
    for (int i = 0; i < m->nparam; i++) {
        sh_param *p = m->param[i];
        const sh_shard_entry *e = find(sd, p->name);
        if (!e)
            return ck_err_set(err, -ENOENT, "load state dict: no entry for parameter '%s'",
                              p->name);
        sh_shard_entry mine;
        describe(&mine, p, "", p->shard);
        if (e->dtype != CK_F32 || !ck_box_equal(&e->box, &mine.box))
            return ck_err_set(err, -EINVAL, "load state dict: entry '%s' (rank %d) is not "
                              "this rank's f32 shard of it; reshard through the checkpoint "
                              "core", p->name, m->world->rank);
        int rc = copy_to_shard(p, e->data, err);
        if (rc)
            return rc;
    }
    return 0;
}

int sh_model_load_state_dict(sh_module *root, const sh_state_dict *sd, ck_err *err)
{
    return sh_module_walk(root, load_params, (void *)sd, err);
}

/* ---- full state dicts ---- */

/* Every rank builds the same list of parameters, so the collectives line up. */
typedef struct param_vec {
    sh_param **p;
    int n;
} param_vec;

static int list_params(sh_module *m, void *arg, ck_err *err)
{
    param_vec *v = arg;
    sh_param **np = realloc(v->p, (size_t)(v->n + m->nparam + 1) * sizeof *np);
    if (!np)
        return ck_err_set(err, -ENOMEM, "full state dict: out of memory");
    v->p = np;
    for (int i = 0; i < m->nparam; i++) {
        if (!m->param[i]->materialized)
            return ck_err_set(err, -EINVAL, "full state dict: parameter '%s' is on META",
                              m->param[i]->name);
        v->p[v->n++] = m->param[i];
    }
    return 0;
}

/* Gathers p's whole tensor into full (on world rank 0). Only the replicate-row-0 ranks
 * of an HSDP mesh take part: their shard dim covers the tensor once, and world rank 0
 * is shard rank 0 of that row. */
static int gather_full(sh_param *p, float *full, ck_err *err)
{
    sh_group *g = p->sharded_by ? sh_fsdp_group(p->sharded_by) : NULL;
    sh_world *w = p->owner->world;
    const sh_dev_ops *d = sh_dev(w);
    if (!g) {
        int rc = 0;
        if (w->rank == 0 && p->numel)
            rc = d->copy(full, p->shard, p->numel * sizeof(float));
        if (!rc)
            rc = d->sync();
        return rc ? ck_err_set(err, rc, "gathering '%s' from %s", p->name, d->name) : 0;
    }
    if (g->R > 1 && g->mesh->coord[0] != 0)
        return 0;
    k_seg seg = {p->rows, p->row_elems * sizeof(float), 0};
    size_t slot = k_flat_layout(&seg, 1, (size_t)g->W);
    if (!slot)
        return 0;
    /* The gather runs where the shards live (NCCL on a GPU); the result is copied out
     * into host memory. */
    void *send = NULL, *recv = NULL;
    int rc = d->alloc(&send, slot, false);
    if (!rc && g->r == 0)
        rc = d->alloc(&recv, slot * (size_t)g->W, false);
    if (rc)
        rc = ck_err_set(err, rc, "gathering '%s': out of %s memory", p->name, d->name);
    if (!rc) {
        const void *src[1] = {p->shard};
        rc = k_ag_copy_in_on(d->mem, send, src, false, &seg, 1, (size_t)g->W, (size_t)g->r);
        if (!rc)
            rc = sh_gather(g->shard_comm, send, recv, slot / sizeof(float), CK_F32, 0, NULL,
                           err);
    }
    if (!rc && g->r == 0) {
        void *dst[1] = {full};
        rc = k_ag_copy_out_on(d->mem, dst, recv, slot, &seg, 1, (size_t)g->W);
    }
    if (!rc)
        rc = d->sync();
    d->free(send);
    d->free(recv);
    return rc ? ck_err_set(err, rc, "gathering '%s'", p->name) : 0;
}

int sh_model_full_state_dict(sh_module *root, sh_state_dict *out, ck_err *err)
{
    memset(out, 0, sizeof *out);
    out->owns_data = true;
    param_vec v = {NULL, 0};
    int rc = sh_module_walk(root, list_params, &v, err);
    bool rank0 = root->world->rank == 0;
    sd_build b = {out, 0};
    for (int i = 0; !rc && i < v.n; i++) {
        sh_param *p = v.p[i];
        float *full = NULL;
        if (rank0 && p->numel && !(full = malloc(p->numel * sizeof(float))))
            rc = ck_err_set(err, -ENOMEM, "full state dict of '%s': out of memory", p->name);
        if (!rc)
            rc = gather_full(p, full, err);
        sh_shard_entry *e = !rc && rank0 ? push(&b, err) : NULL;
        if (rank0 && !rc && !e)
            rc = -ENOMEM;
        if (e) {
            snprintf(e->name, sizeof e->name, "%s", p->name);
            e->dtype = CK_F32;
            e->ndim = p->ndim;
            for (int d = 0; d < p->ndim; d++)
                e->shape[d] = (uint64_t)p->shape[d];
            e->mesh.ndim = 1;
            e->mesh.size[0] = 1;
            e->placement[0].kind = CK_REPLICATE;
            ck_box_full(p->ndim, e->shape, &e->box);
            e->data = full;
        } else {
            free(full);
        }
    }
    free(v.p);
    if (rc)
        sh_state_dict_free(out);
    return rc;
}

int sh_model_load_full_state_dict(sh_module *root, const sh_state_dict *sd, ck_err *err)
{
    sh_world *w = root->world;
    param_vec v = {NULL, 0};
    int rc = sh_module_walk(root, list_params, &v, err);
    /* Rank 0 checks the whole dict before anything moves, and every rank learns the
     * verdict, so that a bad dict is an error everywhere rather than a hang. */
    int verdict = rc;
    if (!rc && w->rank == 0) {
        for (int i = 0; !verdict && i < v.n; i++) {
            const sh_shard_entry *e = find(sd, v.p[i]->name);
            bool ok = e && e->dtype == CK_F32 && e->ndim == v.p[i]->ndim;
            for (int d = 0; ok && d < e->ndim; d++)
                ok = e->shape[d] == (uint64_t)v.p[i]->shape[d];
            if (!ok)
                verdict = ck_err_set(err, -EINVAL, "load full state dict: no f32 entry of "
                                     "shape matching parameter '%s'", v.p[i]->name);
        }
    }
    int shared = verdict;
    if (!rc)
        rc = sh_broadcast(w->comm, &shared, 1, CK_I32, 0, NULL, err);
    if (!rc && shared)
        rc = verdict ? verdict
                     : ck_err_set(err, -EINVAL, "load full state dict: rank 0 rejected the "
                                  "dict (rank %d)", w->rank);
    for (int i = 0; !rc && i < v.n; i++) {
        sh_param *p = v.p[i];
        if (!p->numel)
            continue;
        float *full = malloc(p->numel * sizeof(float));
        if (!full) {
            rc = ck_err_set(err, -ENOMEM, "loading '%s': out of memory", p->name);
            break;
        }
        if (w->rank == 0)
            memcpy(full, find(sd, p->name)->data, p->numel * sizeof(float));
        rc = sh_broadcast(w->comm, full, p->numel, CK_F32, 0, NULL, err);
        if (!rc && p->shard_numel)
            rc = copy_to_shard(p, full + p->shard_row * p->row_elems, err);
        free(full);
    }
    free(v.p);
    return rc;
}

void sh_state_dict_free(sh_state_dict *sd)
{
    if (!sd)
        return;
    for (size_t i = 0; sd->owns_data && i < sd->n; i++)
        free(sd->entry[i].data);
    free(sd->entry);
    memset(sd, 0, sizeof *sd);
}
