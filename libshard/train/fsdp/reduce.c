/* fsdp/reduce.c - a group's unsharded gradients to its sharded ones: the
 * reduce-scatter started at each post-backward, the replica all-reduce (HSDP), the
 * averaging and the accumulation into the sharded f32 gradients.
 *
 * One reduce-scatter is in flight at a time, as in FSDP2: a group's post-backward
 * first retires the previous group's (waits for it, frees its input, lands or
 * all-reduces its result), then starts its own. The reduce-scatter of block l so
 * runs under the backward of block l-1, and the unsharded gradient slots of at most
 * two groups exist at once. Waiting for all of them at the end of backward instead
 * would hold every group's slots, the whole model's gradients unsharded, until then. */
#include <stdlib.h>

#include "fsdp/gather.h"
#include "fsdp/reduce.h"
#include "world/world.h"

static int start_reduce(sh_group *g, ck_err *err)
{
    sh_world *w = group_world(g);
    size_t W = (size_t)g->W;
    const void **src = calloc((size_t)g->nparam, sizeof *src);
    void *flat = sh_alloc(w, SH_MEM_COMM, W * g->slot_f32, false);
    if (!src || !flat) {
        free(src);
        sh_free(w, SH_MEM_COMM, flat, W * g->slot_f32);
        return ck_err_set(err, -ENOMEM, "reducing gradients of module '%s': out of memory",
                          g->module->name);
    }
    for (int i = 0; i < g->nparam; i++) {
        sh_param *p = g->param[i];
        /* A parameter the backward did not touch contributes zeros. */
        if (!p->grad_full && p->numel)
            p->grad_full = sh_alloc(w, SH_MEM_GRAD, p->numel * sizeof(float), true);
        if (!p->grad_full && p->numel) {
            free(src);
            sh_free(w, SH_MEM_COMM, flat, W * g->slot_f32);
            return ck_err_set(err, -ENOMEM, "gradient of '%s': out of memory", p->name);
        }
        src[i] = p->grad_full;
    }
    const sh_dev_ops *d = sh_dev(w);
    int rc = k_rs_chunk_cat_on(d->mem, flat, g->slot_f32, src, g->seg_f32, (size_t)g->nparam,
                               W);
    free(src);
    if (rc) {
        sh_free(w, SH_MEM_COMM, flat, W * g->slot_f32);
        return ck_err_set(err, rc, "reducing gradients of module '%s': chunk-cat on %s",
                          g->module->name, d->name);
    }
    for (int i = 0; i < g->nparam; i++) {
        sh_param *p = g->param[i];
        sh_free(w, SH_MEM_GRAD, p->grad_full, p->numel * sizeof(float));
        p->grad_full = NULL;
    }
    if (g->rdt == CK_F32) {
        g->rs_in = flat;
    } else {
        g->rs_in = sh_alloc(w, SH_MEM_COMM, W * g->slot_r, false);
        if (g->rs_in)
            rc = sh_dev_cast(d, g->rs_in, g->rdt, flat, CK_F32, W * g->slot_elems, err);
        sh_free(w, SH_MEM_COMM, flat, W * g->slot_f32);
        if (rc)
            return rc;
    }
    g->rs_out = sh_alloc(w, SH_MEM_COMM, g->slot_r, false);
    if (!g->rs_in || !g->rs_out)
        return ck_err_set(err, -ENOMEM, "reducing gradients of module '%s': out of memory",
                          g->module->name);
    rc = sh_reduce_scatter(g->shard_comm, g->rs_in, g->rs_out, g->slot_elems, g->rdt,
                           SH_SUM, &g->rs_work, err);
    if (rc)
        return ck_err_set(err, rc, "reduce-scatter of module '%s'", g->module->name);
    /* Only a started reduction is ever landed: after a failure here rs_out holds
     * nothing, and a later end of backward must not add it into the gradients. */
    g->rs_pending = true;
    return 0;
}

/* Completes g's reduction, its reduce-scatter (and all-reduce over replicas) waited
 * for: averages over every data-parallel rank and adds into the sharded gradients. */
static int land_reduced(sh_group *g, ck_err *err)
{
    sh_world *w = group_world(g);
    const sh_dev_ops *d = sh_dev(w);
    const float *red = g->rs_out;
    float *tmp = NULL;
    int rc = 0;
    if (g->rdt != CK_F32) {
        tmp = sh_alloc(w, SH_MEM_COMM, g->slot_f32, false);
        if (!tmp && g->slot_f32)
            return ck_err_set(err, -ENOMEM, "gradients of module '%s': out of memory",
                              g->module->name);
        rc = sh_dev_cast(d, tmp, CK_F32, g->rs_out, g->rdt, g->slot_elems, err);
        red = tmp;
    }
    float scale = 1.0f / (float)(g->W * g->R);
    for (int i = 0; !rc && i < g->nparam; i++) {
        sh_param *p = g->param[i];
        if (!p->shard_numel)
            continue;
        if (!p->grad_shard) {
            p->grad_shard = sh_alloc_state(w, p->host_state, SH_MEM_GRAD,
                                           p->shard_numel * sizeof(float), true);
            if (!p->grad_shard) {
                rc = ck_err_set(err, -ENOMEM, "gradient of '%s': out of memory", p->name);
                break;
            }
        }
        rc = d->scale_add(p->grad_shard, red + g->seg_f32[i].flat_off / sizeof(float), scale,
                          p->shard_numel);
        if (rc)
            ck_err_set(err, rc, "gradient of '%s': accumulating on %s", p->name, d->name);
    }
    sh_free(w, SH_MEM_COMM, tmp, g->slot_f32);
    sh_free(w, SH_MEM_COMM, g->rs_out, g->slot_r);
    g->rs_out = NULL;
    g->rs_pending = false;
    return rc;
}

/* Waits for g's reduce-scatter and frees its input; then starts the all-reduce over
 * replicas (HSDP), landed at the end of backward, or lands the result now. */
static int retire(sh_group *g, ck_err *err)
{
    int rc = sh_work_wait(g->rs_work, err);
    g->rs_work = NULL;
    sh_free(group_world(g), SH_MEM_COMM, g->rs_in, (size_t)g->W * g->slot_r);
    g->rs_in = NULL;
    if (rc)
        return ck_err_set(err, rc, "reduce-scatter of module '%s'", g->module->name);
    if (!g->rep_comm || g->R <= 1)
        return land_reduced(g, err);
    rc = sh_all_reduce(g->rep_comm, g->rs_out, g->rs_out, g->slot_elems, g->rdt, SH_SUM,
                       &g->ar_work, err);
    return rc ? ck_err_set(err, rc, "all-reduce of module '%s' over replicas",
                           g->module->name) : 0;
}

int sh_group_reduce(sh_fsdp_root *r, sh_group *g, ck_err *err)
{
    sh_group *prev = r->rs_inflight;
    r->rs_inflight = NULL;
    int rc = prev ? retire(prev, err) : 0;
    if (!rc)
        rc = start_reduce(g, err);
    if (!rc)
        r->rs_inflight = g;
    return rc;
}

int sh_fsdp_finish_backward(sh_group *rg, ck_err *err)
{
    sh_fsdp_root *r = rg->root;
    sh_group *last = r->rs_inflight;
    r->rs_inflight = NULL;
    int rc = last ? retire(last, err) : 0;
    /* The replica all-reduces, all in flight together by now. */
    for (int i = 0; !rc && i < r->ngroups; i++) {
        sh_group *g = r->groups[i];
        if (!g->rs_pending)
            continue;
        rc = sh_work_wait(g->ar_work, err);
        g->ar_work = NULL;
        if (!rc)
            rc = land_reduced(g, err);
    }
    /* Groups that ran forward but not backward are resharded, as FSDP2's final
     * callback does. */
    for (int i = 0; !rc && i < r->ngroups; i++) {
        r->groups[i]->in_backward = false;
        if (r->groups[i]->state != GS_SHARDED)
            rc = sh_group_reshard(r->groups[i], err);
    }
    return rc;
}
