/* fsdp.c - sh_fully_shard and the controls set before training: which parameters form
 * a group, how it is sharded (its mesh dims, chunk rows, flat layouts per dtype), the
 * resolved options, and the explicit prefetch lists. Everything a training step does
 * with a group lives in the other fsdp_*.c files (see fsdp_int.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev.h"
#include "fsdp_int.h"

void sh_fsdp_opts_default(sh_fsdp_opts *o)
{
    memset(o, 0, sizeof *o);
    o->mp.cast_forward_inputs = true;
}

bool sh_module_is_sharded(const sh_module *m) { return m->group != NULL; }

static bool valid_float(ck_dtype dt)
{
    return dt == 0 || dt == CK_F32 || dt == CK_BF16 || dt == CK_F16;
}

typedef struct param_list {
    sh_param **p;
    int n;
} param_list;

static int collect_ungrouped(sh_module *m, void *arg, ck_err *err)
{
    param_list *l = arg;
    for (int i = 0; i < m->nparam; i++) {
        if (m->param[i]->sharded_by)
            continue;
        sh_param **np = realloc(l->p, (size_t)(l->n + 1) * sizeof *np);
        if (!np)
            return ck_err_set(err, -ENOMEM, "fully_shard: out of memory");
        l->p = np;
        l->p[l->n++] = m->param[i];
    }
    return 0;
}

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

static int check_opts(const sh_module *m, const sh_mesh *mesh, const sh_fsdp_opts *o,
                      ck_err *err)
{
    if (mesh->world != m->world)
        return ck_err_set(err, -EINVAL, "fully_shard(module '%s'): the mesh belongs to "
                          "another world", m->name);
    if (mesh->desc.ndim > 2)
        return ck_err_set(err, -EINVAL, "fully_shard(module '%s'): a %d-D mesh; FSDP takes "
                          "a 1-D (shard) or 2-D (replicate x shard) mesh", m->name,
                          mesh->desc.ndim);
    if (!valid_float(o->mp.param_dtype) || !valid_float(o->mp.reduce_dtype) ||
        !valid_float(o->mp.output_dtype))
        return ck_err_set(err, -EINVAL, "fully_shard(module '%s'): mixed precision dtypes "
                          "must be f32, bf16 or f16", m->name);
    int W = (int)mesh->desc.size[mesh->desc.ndim - 1];
    if (o->reshard_after_forward.kind == SH_RESHARD_TO) {
        int k = o->reshard_after_forward.to_world;
        if (k < 1 || W % k)
            return ck_err_set(err, -EINVAL, "fully_shard(module '%s'): "
                              "reshard_after_forward=%d must divide the shard world size %d",
                              m->name, k, W);
    }
    return 0;
}

int sh_fully_shard(sh_module *m, sh_mesh *mesh, const sh_fsdp_opts *opts, ck_err *err)
{
    sh_fsdp_opts def;
    if (!opts) {
        sh_fsdp_opts_default(&def);
        opts = &def;
    }
    if (m->group)
        return ck_err_set(err, -EALREADY, "fully_shard was already applied to module '%s' "
                          "(rank %d): call it once per module, bottom-up", m->name,
                          m->world->rank);
    int rc = check_opts(m, mesh, opts, err);
    if (rc)
        return rc;
    param_list l = {NULL, 0};
    rc = sh_module_walk(m, collect_ungrouped, &l, err);
    for (int i = 0; !rc && i < l.n; i++)
        if (l.p[i]->ndim == 0)
            rc = ck_err_set(err, -EINVAL, "fully_shard(module '%s'): parameter '%s' is 0-D; "
                            "FSDP shards dim 0, so give it shape [1]", m->name, l.p[i]->name);
    sh_group *g = rc ? NULL : calloc(1, sizeof *g);
    if (!rc && !g)
        rc = ck_err_set(err, -ENOMEM, "fully_shard: out of memory");
    if (rc) {
        free(l.p);
        return rc;
    }
    int nd = mesh->desc.ndim;
    g->module = m;
    g->mesh = mesh;
    g->opts = *opts;
    g->param = l.p;
    g->nparam = l.n;
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
    m->group = g;
    sh_fsdp_install_hooks(g);
    return 0;
}

static int set_prefetch(sh_module *m, sh_module *const *mods, int n, bool fwd, ck_err *err)
{
    if (!m->group)
        return ck_err_set(err, -EINVAL, "module '%s' is not sharded: call fully_shard "
                          "before setting its prefetch", m->name);
    sh_group **l = n ? calloc((size_t)n, sizeof *l) : NULL;
    if (n && !l)
        return ck_err_set(err, -ENOMEM, "prefetch list: out of memory");
    for (int i = 0; i < n; i++) {
        if (!mods[i]->group) {
            free(l);
            return ck_err_set(err, -EINVAL, "module '%s' cannot prefetch module '%s', which "
                              "is not sharded", m->name, mods[i]->name);
        }
        l[i] = mods[i]->group;
    }
    sh_group *g = m->group;
    if (fwd) {
        free(g->fwd_prefetch);
        g->fwd_prefetch = l;
        g->nfwd_prefetch = n;
        g->fwd_set = true;
    } else {
        free(g->bwd_prefetch);
        g->bwd_prefetch = l;
        g->nbwd_prefetch = n;
        g->bwd_set = true;
    }
    return 0;
}

int sh_set_modules_to_forward_prefetch(sh_module *m, sh_module *const *mods, int n,
                                       ck_err *err)
{
    return set_prefetch(m, mods, n, true, err);
}

int sh_set_modules_to_backward_prefetch(sh_module *m, sh_module *const *mods, int n,
                                        ck_err *err)
{
    return set_prefetch(m, mods, n, false, err);
}
