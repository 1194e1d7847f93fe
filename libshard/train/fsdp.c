/* fsdp.c - fully_shard: parameter groups, and the unshard / reshard / reduce-scatter
 * hooks that fully_shard installs on the module for sh_module_forward / _backward.
 *
 * A group's life in one training step:
 *   SHARDED --pre-forward: all-gather--> UNSHARDED --post-forward--> SHARDED
 *     (or POSTFWD, a shard over the smaller reshard_after_forward world, or stays
 *     UNSHARDED when reshard_after_forward is false)
 *   --pre-backward: all-gather--> UNSHARDED --post-backward: reduce-scatter, reshard-->
 *   SHARDED; the root's post-backward waits for every reduction and accumulates the
 *   averaged result into the sharded f32 gradients.
 * Prefetching starts a group's all-gather early (state UNSHARDING) and the hook that
 * needs it waits for it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "norm.h"

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
        memcpy(s, p->shard + off * p->row_elems, n * sizeof(float));
    }
    sh_free(g->module->world, SH_MEM_PARAM, p->shard, p->shard_numel * sizeof(float));
    p->shard = s;
    p->shard_row = off;
    p->shard_rows = len;
    p->shard_numel = n;
    p->value.data = NULL;
    return 0;
}

static void group_free(sh_group *g)
{
    sh_world *w = g->module->world;
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

static void install_hooks(sh_group *g);

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
        group_free(g);
        return rc;
    }
    for (int i = 0; i < g->nparam; i++) {
        sh_param *p = g->param[i];
        if (!p->materialized) {
            /* to_empty allocates this rank's rows only. */
            uint64_t off, len;
            ck_chunk(p->rows, (uint64_t)g->W, (uint64_t)g->r, &off, &len);
            p->shard_row = off;
            p->shard_rows = len;
            p->shard_numel = len * p->row_elems;
        }
        p->sharded_by = m;
        p->value.dtype = g->pdt;
    }
    m->group = g;
    install_hooks(g);
    return 0;
}

/* ---- root detection and lazy init ---- */

/* The FSDP root group above m (m's own when m is the root). */
static sh_group *root_group(sh_module *m)
{
    sh_group *top = NULL;
    for (sh_module *a = m; a; a = a->parent)
        if (a->group)
            top = a->group;
    return top;
}

typedef struct group_list {
    sh_group **g;
    int n;
} group_list;

static int collect_groups(sh_module *m, void *arg, ck_err *err)
{
    group_list *l = arg;
    if (!m->group)
        return 0;
    for (int i = 0; i < m->group->nparam; i++)
        if (!m->group->param[i]->materialized)
            return ck_err_set(err, -EINVAL, "parameter '%s' is still on META: call "
                              "sh_module_to_empty and sh_module_reset_parameters before "
                              "the first forward", m->group->param[i]->name);
    sh_group **n = realloc(l->g, (size_t)(l->n + 1) * sizeof *n);
    if (!n)
        return ck_err_set(err, -ENOMEM, "FSDP init: out of memory");
    l->g = n;
    l->g[l->n++] = m->group;
    return 0;
}

/* The first forward through a root settles what fully_shard could not know: which
 * group is the root (its reshard default differs) and the set of groups it drives. */
static int lazy_init(sh_group *rg, ck_err *err)
{
    group_list l = {NULL, 0};
    int rc = sh_module_walk(rg->module, collect_groups, &l, err);
    sh_fsdp_root *r = rc ? NULL : calloc(1, sizeof *r);
    if (r) {
        r->fwd_order = calloc((size_t)l.n, sizeof *r->fwd_order);
        r->prev_fwd_order = calloc((size_t)l.n, sizeof *r->prev_fwd_order);
        r->post_fwd_order = calloc((size_t)l.n, sizeof *r->post_fwd_order);
    }
    if (!rc && (!r || !r->fwd_order || !r->prev_fwd_order || !r->post_fwd_order))
        rc = ck_err_set(err, -ENOMEM, "FSDP init: out of memory");
    if (rc) {
        if (r) {
            free(r->fwd_order);
            free(r->prev_fwd_order);
            free(r->post_fwd_order);
            free(r);
        }
        free(l.g);
        return rc;
    }
    r->groups = l.g;
    r->ngroups = l.n;
    for (int i = 0; i < l.n; i++) {
        sh_group *g = l.g[i];
        g->is_root = g == rg;
        sh_reshard_kind k = g->opts.reshard_after_forward.kind;
        g->reshard_after_forward = k == SH_RESHARD_TRUE || k == SH_RESHARD_TO ||
                                   (k == SH_RESHARD_UNSET && !g->is_root);
    }
    rg->root = r;
    return 0;
}

/* ---- unshard / reshard ---- */

static sh_world *gworld(const sh_group *g) { return g->module->world; }

/* Starts the all-gather that rebuilds g's parameters; wait_unshard ends it. */
static int unshard(sh_group *g, ck_err *err)
{
    if (g->state == GS_UNSHARDED || g->state == GS_UNSHARDING)
        return 0;
    if (g->nparam == 0) {
        g->state = GS_UNSHARDED;
        return 0;
    }
    sh_world *w = gworld(g);
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
        k_ag_copy_in(f32, src, false, g->seg_f32, (size_t)g->nparam, (size_t)g->W,
                     (size_t)g->r);
        free(src);
        if (f32 != g->ag_in) {
            sh_cast(g->ag_in, g->pdt, f32, CK_F32, g->slot_elems, err);
            sh_free(w, SH_MEM_COMM, f32, g->slot_f32);
        }
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

static int wait_unshard(sh_group *g, ck_err *err)
{
    if (g->state != GS_UNSHARDING)
        return 0;
    sh_world *w = gworld(g);
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
        if (g->ag_from_pf)
            k_ag_copy_out(dst, g->ag_out, g->slot_pf, g->seg_pf, (size_t)g->nparam,
                          (size_t)g->pf_world);
        else
            k_ag_copy_out(dst, g->ag_out, g->slot_p, g->seg_p, (size_t)g->nparam,
                          (size_t)g->W);
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
        sh_free(gworld(g), SH_MEM_PARAM, p->value.data, p->value.cap);
        p->value.data = NULL;
        p->value.cap = 0;
    }
}

/* Back to SHARDED from any state. */
static int reshard(sh_group *g, ck_err *err)
{
    int rc = wait_unshard(g, err);
    free_values(g);
    sh_free(gworld(g), SH_MEM_PARAM, g->pf_shard, g->slot_pf);
    g->pf_shard = NULL;
    g->state = GS_SHARDED;
    return rc;
}

/* reshard_after_forward=int: keep this rank's part of the smaller world's sharding. */
static int reshard_to_post_forward(sh_group *g, ck_err *err)
{
    if (g->state != GS_UNSHARDED || g->nparam == 0)
        return 0;
    g->pf_shard = sh_alloc(gworld(g), SH_MEM_PARAM, g->slot_pf, false);
    const void **src = calloc((size_t)g->nparam, sizeof *src);
    if (!g->pf_shard || !src) {
        free(src);
        return ck_err_set(err, -ENOMEM, "resharding module '%s': out of memory",
                          g->module->name);
    }
    for (int i = 0; i < g->nparam; i++)
        src[i] = g->param[i]->value.data;
    k_ag_copy_in(g->pf_shard, src, true, g->seg_pf, (size_t)g->nparam, (size_t)g->pf_world,
                 (size_t)(g->r % g->pf_world));
    free(src);
    free_values(g);
    g->state = GS_POSTFWD;
    return 0;
}

/* ---- hooks ---- */

static int prefetch(sh_group **list, int n, ck_err *err)
{
    for (int i = 0; i < n; i++) {
        int rc = unshard(list[i], err);
        if (rc)
            return rc;
    }
    return 0;
}

/* Unshards g for its forward and starts the prefetch of the group expected next. */
static int unshard_for_forward(sh_group *g, ck_err *err)
{
    sh_group *rg = root_group(g->module);
    int rc = rg->root ? 0 : lazy_init(rg, err);
    if (rc)
        return rc;
    sh_fsdp_root *r = rg->root;
    if (g == rg) {
        /* A new forward pass: last pass's order guides this pass's prefetching. */
        if (r->nfwd) {
            sh_group **t = r->prev_fwd_order;
            r->prev_fwd_order = r->fwd_order;
            r->fwd_order = t;
            r->nprev_fwd = r->nfwd;
        }
        r->nfwd = 0;
        r->npost_fwd = 0;
        for (int i = 0; i < r->ngroups; i++)
            r->groups[i]->post_fwd_index = -1;
    }
    if (r->nfwd < r->ngroups)
        r->fwd_order[r->nfwd++] = g;
    rc = unshard(g, err);
    if (!rc)
        rc = wait_unshard(g, err);
    if (rc)
        return rc;
    if (g->fwd_set)
        return prefetch(g->fwd_prefetch, g->nfwd_prefetch, err);
    /* Implicit: the group that followed g last time (the tree's order the first time). */
    sh_group **order = r->nprev_fwd ? r->prev_fwd_order : r->groups;
    int n = r->nprev_fwd ? r->nprev_fwd : r->ngroups;
    for (int i = 0; i + 1 < n; i++)
        if (order[i] == g)
            return order[i + 1]->is_root ? 0 : unshard(order[i + 1], err);
    return 0;
}

/* The module hooks. cast_forward_inputs and output_dtype are applied here so that the
 * callback computes in param_dtype and its caller gets output_dtype. */
static int pre_forward(void *state, const sh_tensor **in, sh_tensor *scratch, ck_err *err)
{
    sh_group *g = state;
    int rc = unshard_for_forward(g, err);
    const sh_tensor *x = *in;
    if (rc || !g->opts.mp.cast_forward_inputs || !g->opts.mp.param_dtype || !x ||
        x->dtype == g->pdt)
        return rc;
    rc = sh_tensor_resize(scratch, g->pdt, x->ndim, x->shape, err);
    if (!rc)
        rc = sh_cast(scratch->data, g->pdt, x->data, x->dtype, x->numel, err);
    if (!rc)
        *in = scratch;
    return rc;
}

static int post_forward(void *state, sh_tensor *out, ck_err *err)
{
    sh_group *g = state;
    sh_fsdp_root *r = root_group(g->module)->root;
    if (r->npost_fwd < r->ngroups) {
        g->post_fwd_index = r->npost_fwd;
        r->post_fwd_order[r->npost_fwd++] = g;
    }
    int rc = 0;
    if (g->reshard_after_forward)
        rc = g->pf_world ? reshard_to_post_forward(g, err) : reshard(g, err);
    if (!rc && g->opts.mp.output_dtype && out)
        rc = sh_tensor_cast(out, g->opts.mp.output_dtype, err);
    return rc;
}

static int pre_backward(void *state, ck_err *err)
{
    sh_group *g = state;
    sh_fsdp_root *r = root_group(g->module)->root;
    if (!r)
        return ck_err_set(err, -EINVAL, "module '%s': backward before any forward",
                          g->module->name);
    int rc = unshard(g, err);
    if (!rc)
        rc = wait_unshard(g, err);
    if (rc)
        return rc;
    g->in_backward = true;
    if (g->bwd_set)
        return prefetch(g->bwd_prefetch, g->nbwd_prefetch, err);
    /* Implicit: backward runs the forward order in reverse, so the group whose forward
     * ended just before g's is the next to need its parameters. */
    int i = g->post_fwd_index;
    return i > 0 ? unshard(r->post_fwd_order[i - 1], err) : 0;
}

/* Cuts the unsharded f32 gradients into slots, casts them to the reduce dtype, and
 * starts the reduce-scatter; finish_backward completes it. */
static int start_reduce(sh_group *g, ck_err *err)
{
    sh_world *w = gworld(g);
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
    k_rs_chunk_cat(flat, g->slot_f32, src, g->seg_f32, (size_t)g->nparam, W);
    free(src);
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
            sh_cast(g->rs_in, g->rdt, flat, CK_F32, W * g->slot_elems, err);
        sh_free(w, SH_MEM_COMM, flat, W * g->slot_f32);
    }
    g->rs_out = sh_alloc(w, SH_MEM_COMM, g->slot_r, false);
    if (!g->rs_in || !g->rs_out)
        return ck_err_set(err, -ENOMEM, "reducing gradients of module '%s': out of memory",
                          g->module->name);
    g->rs_pending = true;
    int rc = sh_reduce_scatter(g->shard_comm, g->rs_in, g->rs_out, g->slot_elems, g->rdt,
                               SH_SUM, &g->rs_work, err);
    return rc ? ck_err_set(err, rc, "reduce-scatter of module '%s'", g->module->name) : 0;
}

/* Completes g's reduction: all-reduce over replicas (HSDP) already waited for;
 * averages over every data-parallel rank and adds into the sharded gradients. */
static int land_reduced(sh_group *g, ck_err *err)
{
    sh_world *w = gworld(g);
    const float *red = g->rs_out;
    float *tmp = NULL;
    if (g->rdt != CK_F32) {
        tmp = sh_alloc(w, SH_MEM_COMM, g->slot_f32, false);
        if (!tmp && g->slot_f32)
            return ck_err_set(err, -ENOMEM, "gradients of module '%s': out of memory",
                              g->module->name);
        sh_cast(tmp, CK_F32, g->rs_out, g->rdt, g->slot_elems, err);
        red = tmp;
    }
    float scale = 1.0f / (float)(g->W * g->R);
    int rc = 0;
    for (int i = 0; !rc && i < g->nparam; i++) {
        sh_param *p = g->param[i];
        if (!p->shard_numel)
            continue;
        if (!p->grad_shard) {
            p->grad_shard = sh_alloc(w, SH_MEM_GRAD, p->shard_numel * sizeof(float), true);
            if (!p->grad_shard) {
                rc = ck_err_set(err, -ENOMEM, "gradient of '%s': out of memory", p->name);
                break;
            }
        }
        k_scale_add(p->grad_shard, red + g->seg_f32[i].flat_off / sizeof(float), scale,
                    p->shard_numel);
    }
    sh_free(w, SH_MEM_COMM, tmp, g->slot_f32);
    sh_free(w, SH_MEM_COMM, g->rs_out, g->slot_r);
    g->rs_out = NULL;
    g->rs_pending = false;
    return rc;
}

/* The end of the root's backward, the end of the pass: every group's reduction. */
static int finish_backward(sh_group *rg, ck_err *err)
{
    sh_fsdp_root *r = rg->root;
    int rc = 0;
    /* Reduce-scatters first (they overlapped the rest of backward), then the replica
     * all-reduces all in flight together, then the results. */
    for (int i = 0; !rc && i < r->ngroups; i++) {
        sh_group *g = r->groups[i];
        if (!g->rs_pending)
            continue;
        rc = sh_work_wait(g->rs_work, err);
        g->rs_work = NULL;
        sh_free(gworld(g), SH_MEM_COMM, g->rs_in, (size_t)g->W * g->slot_r);
        g->rs_in = NULL;
        if (!rc && g->rep_comm && g->R > 1)
            rc = sh_all_reduce(g->rep_comm, g->rs_out, g->rs_out, g->slot_elems, g->rdt,
                               SH_SUM, &g->ar_work, err);
    }
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
            rc = reshard(r->groups[i], err);
    }
    return rc;
}

static int post_backward(void *state, ck_err *err)
{
    sh_group *g = state;
    int rc = 0;
    bool any = false;
    for (int i = 0; i < g->nparam; i++)
        any |= g->param[i]->grad_full != NULL;
    if (any && g->sync && g->nparam)
        rc = start_reduce(g, err);
    g->in_backward = false;
    int rc2 = reshard(g, err);
    rc = rc ? rc : rc2;
    if (!rc && g->is_root)
        rc = finish_backward(g, err);
    return rc;
}

/* A sharded parameter's full value exists only while its group is unsharded, and its
 * gradient buffer only inside the group's backward. */
static int check_param(void *state, const sh_param *p, bool grad, ck_err *err)
{
    const sh_group *g = state;
    if (!grad && g->state != GS_UNSHARDED)
        return ck_err_set(err, -EPERM,
                          "parameter '%s' is sharded (rank %d holds rows %zu..%zu only): "
                          "run module '%s' through sh_module_forward / sh_module_backward "
                          "so that FSDP's hooks unshard it", p->name,
                          p->owner->world->rank, p->shard_row, p->shard_row + p->shard_rows,
                          g->module->name);
    if (grad && !(g->in_backward && g->state == GS_UNSHARDED))
        return ck_err_set(err, -EPERM,
                          "gradient of parameter '%s' requested outside backward: run "
                          "module '%s' through sh_module_backward", p->name,
                          g->module->name);
    return 0;
}

static void release(void *state) { group_free(state); }

static void install_hooks(sh_group *g)
{
    g->module->hooks = (sh_module_hooks){
        .pre_forward = pre_forward,
        .post_forward = post_forward,
        .pre_backward = pre_backward,
        .post_backward = post_backward,
        .check_param = check_param,
        .release = release,
        .state = g,
    };
}

/* ---- user controls ---- */

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

static int set_sync(sh_module *m, void *arg, ck_err *err)
{
    (void)err;
    if (m->group)
        m->group->sync = *(const bool *)arg;
    return 0;
}

int sh_set_requires_gradient_sync(sh_module *m, bool sync, ck_err *err)
{
    return sh_module_walk(m, set_sync, &sync, err);
}

typedef struct norm_acc {
    double sumsq;
    sh_group *first;
    bool ungrouped;
    const char *ungrouped_name;
} norm_acc;

static int add_sumsq(sh_module *m, void *arg, ck_err *err)
{
    norm_acc *a = arg;
    if (m->group && !a->first)
        a->first = m->group;
    if (m->group && m->group->mesh != a->first->mesh)
        return ck_err_set(err, -EINVAL, "clip_grad_norm: modules '%s' and '%s' are sharded "
                          "on different meshes", a->first->module->name, m->name);
    for (int i = 0; i < m->nparam; i++) {
        sh_param *p = m->param[i];
        if (!p->sharded_by) {
            a->ungrouped = true;
            a->ungrouped_name = p->name;
            if (p->grad_full)
                a->sumsq += k_sumsq(p->grad_full, p->numel);
        } else if (p->grad_shard) {
            a->sumsq += k_sumsq(p->grad_shard, p->shard_numel);
        }
    }
    return 0;
}

static int scale_grads(sh_module *m, void *arg, ck_err *err)
{
    (void)err;
    float s = *(const float *)arg;
    for (int i = 0; i < m->nparam; i++) {
        sh_param *p = m->param[i];
        if (p->sharded_by && p->grad_shard)
            k_scale(p->grad_shard, s, p->shard_numel);
        else if (!p->sharded_by && p->grad_full)
            k_scale(p->grad_full, s, p->numel);
    }
    return 0;
}

int sh_clip_grad_norm(sh_module *root, double max_norm, double *total_norm, ck_err *err)
{
    norm_acc a = {0};
    int rc = sh_module_walk(root, add_sumsq, &a, err);
    if (rc)
        return rc;
    if (a.first && a.ungrouped)
        return ck_err_set(err, -EINVAL, "clip_grad_norm(module '%s'): parameter '%s' is not "
                          "sharded while others are; fully_shard the root too",
                          root->name, a.ungrouped_name);
    /* Replicas hold equal shards: summing over the shard dim alone counts each
     * element once. */
    if (a.first) {
        rc = sh_all_reduce(a.first->shard_comm, &a.sumsq, &a.sumsq, 1, CK_F64, SH_SUM, NULL,
                           err);
        if (rc)
            return ck_err_set(err, rc, "clip_grad_norm");
    }
    double norm = sqrt(a.sumsq);
    if (total_norm)
        *total_norm = norm;
    float coef = (float)(max_norm / (norm + 1e-6));
    if (coef < 1.0f)
        rc = sh_module_walk(root, scale_grads, &coef, err);
    return rc;
}

static int drop_grads(sh_module *m, void *arg, ck_err *err)
{
    (void)arg;
    (void)err;
    for (int i = 0; i < m->nparam; i++) {
        sh_param *p = m->param[i];
        sh_free(m->world, SH_MEM_GRAD, p->grad_full, p->numel * sizeof(float));
        sh_free(m->world, SH_MEM_GRAD, p->grad_shard, p->shard_numel * sizeof(float));
        p->grad_full = p->grad_shard = NULL;
    }
    return 0;
}

int sh_zero_grad(sh_module *root, ck_err *err)
{
    return sh_module_walk(root, drop_grads, NULL, err);
}
