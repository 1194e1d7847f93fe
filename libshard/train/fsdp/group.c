/* fsdp/group.c - a group's making and freeing: which mesh dims shard it, its
 * resolved options, the flat layouts of its parameters per dtype (the slots every
 * collective of the group moves), the post-forward communicator, and this rank's
 * rows of every parameter. What a training step does with a group is in the other
 * files of the box (group.h). */
#include <stdio.h>
#include <stdlib.h>

#include "ck/layout.h"
#include "comm/comm.h"
#include "fsdp/group.h"
#include "world/mesh.h"
#include "world/world.h"

static k_seg *make_segs(const sh_group *g, size_t itemsize, size_t world, size_t *slot)
{
    k_seg *s = calloc((size_t)g->nparam + 1, sizeof *s);
    if (!s)
        return NULL;
    for (int i = 0; i < g->nparam; i++) {
        s[i].rows = g->param[i]->rows;
        s[i].row_bytes = g->param[i]->row_elems * itemsize;
    }
    *slot = k_flat_layout(s, (size_t)g->nparam, world);
    return s;
}

/* A parameter materialized before fully_shard keeps only its own rows. */
static int shard_existing(sh_group *g, sh_param *p, ck_err *err)
{
    uint64_t off, len;
    ck_chunk(p->rows, (uint64_t)g->W, (uint64_t)g->r, &off, &len);
    size_t n = len * p->row_elems;
    float *s = NULL;
    if (n) {
        s = sh_alloc(g->module->world, SH_MEM_PARAM, n * sizeof(float), false);
        if (!s)
            return ck_err_set(err, -ENOMEM, "sharding '%s': out of memory", p->name);
        int rc = sh_dev(g->module->world)->copy(s, p->shard + off * p->row_elems,
                                                n * sizeof(float));
        if (rc) {
            sh_free(g->module->world, SH_MEM_PARAM, s, n * sizeof(float));
            return ck_err_set(err, rc, "sharding '%s': copying its rows", p->name);
        }
    }
    sh_free(g->module->world, SH_MEM_PARAM, p->shard, p->shard_numel * sizeof(float));
    p->shard = s;
    p->shard_row = off;
    p->shard_rows = len;
    p->shard_numel = n;
    p->value.data = NULL;
    return 0;
}

int sh_group_new(sh_module *m, sh_mesh *mesh, const sh_fsdp_opts *opts, sh_param **param,
                 int nparam, sh_group **out, ck_err *err)
{
    *out = NULL;
    sh_group *g = calloc(1, sizeof *g);
    if (!g) {
        free(param);
        return ck_err_set(err, -ENOMEM, "fully_shard: out of memory");
    }
    int rc = 0;
    int nd = mesh->desc.ndim;
    g->module = m;
    g->mesh = mesh;
    g->opts = *opts;
    g->param = param;
    g->nparam = nparam;
    g->pdt = opts->mp.param_dtype ? opts->mp.param_dtype : CK_F32;
    g->rdt = opts->mp.reduce_dtype ? opts->mp.reduce_dtype : g->pdt;
    g->shard_comm = mesh->comm[nd - 1];
    g->W = (int)mesh->desc.size[nd - 1];
    g->r = (int)mesh->coord[nd - 1];
    g->rep_comm = nd == 2 ? mesh->comm[0] : NULL;
    g->R = nd == 2 ? (int)mesh->desc.size[0] : 1;
    g->sync = true;
    g->post_fwd_index = -1;
    g->state = GS_SHARDED;
    /* FSDP2: an int of 1 means no resharding, the full world means resharding fully. */
    int k = opts->reshard_after_forward.kind == SH_RESHARD_TO
                ? opts->reshard_after_forward.to_world : 0;
    if (k == 1)
        g->opts.reshard_after_forward.kind = SH_RESHARD_FALSE;
    else if (k == g->W)
        g->opts.reshard_after_forward.kind = SH_RESHARD_TRUE;
    else if (k > 1) {
        g->pf_world = k;
        char name[64];
        snprintf(name, sizeof name, "post-forward group of %d", k);
        rc = sh_comm_split(g->shard_comm, g->r / k, g->r, name, &g->pf_comm, err);
    }
    size_t psz = ck_dtype_size(g->pdt), rsz = ck_dtype_size(g->rdt);
    size_t slot_bytes_f32 = 0;
    if (!rc) {
        g->seg_f32 = make_segs(g, sizeof(float), (size_t)g->W, &slot_bytes_f32);
        g->seg_p = make_segs(g, psz, (size_t)g->W, &g->slot_p);
        g->seg_r = make_segs(g, rsz, (size_t)g->W, &g->slot_r);
        g->seg_pf = make_segs(g, psz, (size_t)(g->pf_world ? g->pf_world : 1), &g->slot_pf);
        if (!g->seg_f32 || !g->seg_p || !g->seg_r || !g->seg_pf)
            rc = ck_err_set(err, -ENOMEM, "fully_shard: out of memory");
    }
    g->slot_f32 = slot_bytes_f32;
    g->slot_elems = slot_bytes_f32 / sizeof(float);
    for (int i = 0; !rc && i < g->nparam; i++)
        if (g->param[i]->materialized)
            rc = shard_existing(g, g->param[i], err);
    if (rc) {
        g->nparam = 0;
        sh_group_free(g);
        return rc;
    }
    for (int i = 0; i < g->nparam; i++) {
        sh_param *p = g->param[i];
        if (!p->materialized) {
            /* to_empty allocates this rank's rows only: in pinned host memory under
             * CPU offload on a CUDA rank (CPUOffloadPolicy); a parameter materialized
             * before fully_shard keeps its shard where it is. */
            uint64_t off, len;
            ck_chunk(p->rows, (uint64_t)g->W, (uint64_t)g->r, &off, &len);
            p->shard_row = off;
            p->shard_rows = len;
            p->shard_numel = len * p->row_elems;
            p->host_state = opts->offload.enabled && m->world->device == SH_CUDA;
        }
        p->sharded_by = m;
        p->value.dtype = g->pdt;
    }
    *out = g;
    return 0;
}

void sh_group_free(sh_group *g)
{
    sh_world *w = group_world(g);
    /* Collectives still in flight must finish before their buffers go. */
    sh_work_wait(g->ag_work, NULL);
    sh_work_wait(g->rs_work, NULL);
    sh_work_wait(g->ar_work, NULL);
    sh_free(w, SH_MEM_COMM, g->ag_in, g->ag_in_bytes);
    sh_free(w, SH_MEM_COMM, g->ag_out, g->ag_out_bytes);
    sh_free(w, SH_MEM_COMM, g->rs_in, (size_t)g->W * g->slot_r);
    sh_free(w, SH_MEM_COMM, g->rs_out, g->slot_r);
    sh_free(w, SH_MEM_PARAM, g->pf_shard, g->slot_pf);
    sh_comm_free(g->pf_comm);
    if (g->root) {
        free(g->root->groups);
        free(g->root->fwd_order);
        free(g->root->prev_fwd_order);
        free(g->root->post_fwd_order);
        free(g->root);
    }
    free(g->seg_f32);
    free(g->seg_p);
    free(g->seg_r);
    free(g->seg_pf);
    free(g->fwd_prefetch);
    free(g->bwd_prefetch);
    free(g->param);
    free(g);
}
