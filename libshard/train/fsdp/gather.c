/* fsdp/gather.c - a group's parameters between their shards and their full values:
 * the all-gather into one flat buffer (padded slots, so every rank sends equal
 * counts), copying out into the unsharded parameters, and resharding back, fully or
 * to the smaller post-forward world. When this happens is hooks.c's choice. */
#include <stdlib.h>

#include "fsdp/gather.h"
#include "world/world.h"

int sh_group_unshard(sh_group *g, ck_err *err)
{
    if (g->state == GS_UNSHARDED || g->state == GS_UNSHARDING)
        return 0;
    if (g->nparam == 0) {
        g->state = GS_UNSHARDED;
        return 0;
    }
    sh_world *w = group_world(g);
    size_t psz = ck_dtype_size(g->pdt);
    sh_comm *c;
    size_t slot, world;
    if (g->state == GS_POSTFWD) {
        /* The post-forward shard is already in param dtype and is the send buffer. */
        c = g->pf_comm;
        slot = g->slot_pf;
        world = (size_t)g->pf_world;
        g->ag_in = NULL;
    } else {
        c = g->shard_comm;
        slot = g->slot_p;
        world = (size_t)g->W;
        g->ag_in_bytes = slot;
        g->ag_in = sh_alloc(w, SH_MEM_COMM, slot, false);
        void *f32 = g->pdt == CK_F32 ? g->ag_in : sh_alloc(w, SH_MEM_COMM, g->slot_f32, false);
        if (!g->ag_in || !f32) {
            if (f32 != g->ag_in)
                sh_free(w, SH_MEM_COMM, f32, g->slot_f32);
            return ck_err_set(err, -ENOMEM, "unsharding module '%s': out of memory",
                              g->module->name);
        }
        const void **src = calloc((size_t)g->nparam, sizeof *src);
        if (!src) {
            if (f32 != g->ag_in)
                sh_free(w, SH_MEM_COMM, f32, g->slot_f32);
            return ck_err_set(err, -ENOMEM, "unsharding: out of memory");
        }
        for (int i = 0; i < g->nparam; i++)
            src[i] = g->param[i]->shard;
        const sh_dev_ops *d = sh_dev(w);
        int rc = k_ag_copy_in_on(d->mem, f32, src, false, g->seg_f32, (size_t)g->nparam,
                                 (size_t)g->W, (size_t)g->r);
        free(src);
        if (rc)
            ck_err_set(err, rc, "unsharding module '%s': copying in on %s", g->module->name,
                       d->name);
        if (f32 != g->ag_in) {
            if (!rc)
                rc = sh_dev_cast(d, g->ag_in, g->pdt, f32, CK_F32, g->slot_elems, err);
            sh_free(w, SH_MEM_COMM, f32, g->slot_f32);
        }
        if (rc)
            return rc;
    }
    g->ag_out_bytes = world * slot;
    g->ag_out = sh_alloc(w, SH_MEM_COMM, g->ag_out_bytes, false);
    if (!g->ag_out)
        return ck_err_set(err, -ENOMEM, "unsharding module '%s': out of memory",
                          g->module->name);
    const void *send = g->state == GS_POSTFWD ? g->pf_shard : g->ag_in;
    int rc = sh_all_gather(c, send, g->ag_out, slot / psz, g->pdt, &g->ag_work, err);
    if (rc)
        return ck_err_set(err, rc, "all-gather of module '%s'", g->module->name);
    g->ag_from_pf = g->state == GS_POSTFWD;
    g->state = GS_UNSHARDING;
    return 0;
}

int sh_group_wait_unshard(sh_group *g, ck_err *err)
{
    if (g->state != GS_UNSHARDING)
        return 0;
    sh_world *w = group_world(g);
    int rc = sh_work_wait(g->ag_work, err);
    g->ag_work = NULL;
    if (rc)
        return ck_err_set(err, rc, "all-gather of module '%s'", g->module->name);
    size_t psz = ck_dtype_size(g->pdt);
    void **dst = calloc((size_t)g->nparam, sizeof *dst);
    if (!dst)
        return ck_err_set(err, -ENOMEM, "unsharding: out of memory");
    for (int i = 0; !rc && i < g->nparam; i++) {
        sh_param *p = g->param[i];
        p->value.cap = p->numel * psz;
        p->value.data = sh_alloc(w, SH_MEM_PARAM, p->value.cap, false);
        if (!p->value.data && p->numel)
            rc = ck_err_set(err, -ENOMEM, "unsharding '%s': out of memory", p->name);
        dst[i] = p->value.data;
    }
    if (!rc) {
        const sh_dev_ops *d = sh_dev(w);
        if (g->ag_from_pf)
            rc = k_ag_copy_out_on(d->mem, dst, g->ag_out, g->slot_pf, g->seg_pf,
                                  (size_t)g->nparam, (size_t)g->pf_world);
        else
            rc = k_ag_copy_out_on(d->mem, dst, g->ag_out, g->slot_p, g->seg_p,
                                  (size_t)g->nparam, (size_t)g->W);
        if (rc)
            ck_err_set(err, rc, "unsharding module '%s': copying out on %s",
                       g->module->name, d->name);
    }
    free(dst);
    sh_free(w, SH_MEM_COMM, g->ag_in, g->ag_in_bytes);
    sh_free(w, SH_MEM_COMM, g->ag_out, g->ag_out_bytes);
    g->ag_in = g->ag_out = NULL;
    if (g->ag_from_pf) {
        sh_free(w, SH_MEM_PARAM, g->pf_shard, g->slot_pf);
        g->pf_shard = NULL;
    }
    if (rc)
        return rc;
    g->state = GS_UNSHARDED;
    return 0;
}

static void free_values(sh_group *g)
{
    for (int i = 0; i < g->nparam; i++) {
        sh_param *p = g->param[i];
        sh_free(group_world(g), SH_MEM_PARAM, p->value.data, p->value.cap);
        p->value.data = NULL;
        p->value.cap = 0;
    }
}

int sh_group_reshard(sh_group *g, ck_err *err)
{
    int rc = sh_group_wait_unshard(g, err);
    free_values(g);
    sh_free(group_world(g), SH_MEM_PARAM, g->pf_shard, g->slot_pf);
    g->pf_shard = NULL;
    g->state = GS_SHARDED;
    return rc;
}

int sh_group_reshard_post_forward(sh_group *g, ck_err *err)
{
    if (g->state != GS_UNSHARDED || g->nparam == 0)
        return 0;
    g->pf_shard = sh_alloc(group_world(g), SH_MEM_PARAM, g->slot_pf, false);
    const void **src = calloc((size_t)g->nparam, sizeof *src);
    if (!g->pf_shard || !src) {
        free(src);
        return ck_err_set(err, -ENOMEM, "resharding module '%s': out of memory",
                          g->module->name);
    }
    for (int i = 0; i < g->nparam; i++)
        src[i] = g->param[i]->value.data;
    const sh_dev_ops *d = sh_dev(group_world(g));
    int rc = k_ag_copy_in_on(d->mem, g->pf_shard, src, true, g->seg_pf, (size_t)g->nparam,
                             (size_t)g->pf_world, (size_t)(g->r % g->pf_world));
    free(src);
    if (rc)
        return ck_err_set(err, rc, "resharding module '%s' after forward: copying on %s",
                          g->module->name, d->name);
    free_values(g);
    g->state = GS_POSTFWD;
    return 0;
}
