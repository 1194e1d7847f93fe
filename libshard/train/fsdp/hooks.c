/* fsdp/hooks.c - the hooks fully_shard installs on a module: what each of
 * sh_module_forward / sh_module_backward's steps does to the group, in which order,
 * and which group to prefetch. The root's first forward settles the tree (lazy init);
 * the mixed-precision casts of inputs and outputs happen here too, so module.c runs
 * hooks without knowing FSDP. The collectives themselves are in gather.c and
 * reduce.c; the group is the hooks' state, so a module's group is found here. */
#include <stdlib.h>

#include "device/device.h"
#include "fsdp/gather.h"
#include "fsdp/hooks.h"
#include "fsdp/reduce.h"
#include "world/world.h"

/* The FSDP root group above m (m's own when m is the root). */
static sh_group *root_group(sh_module *m)
{
    sh_group *top = NULL;
    for (sh_module *a = m; a; a = a->parent)
        if (sh_fsdp_group(a))
            top = sh_fsdp_group(a);
    return top;
}

typedef struct group_list {
    sh_group **g;
    int n;
} group_list;

static int collect_groups(sh_module *m, void *arg, ck_err *err)
{
    group_list *l = arg;
    sh_group *g = sh_fsdp_group(m);
    if (!g)
        return 0;
    for (int i = 0; i < g->nparam; i++)
        if (!g->param[i]->materialized)
            return ck_err_set(err, -EINVAL, "parameter '%s' is still on META: call "
                              "sh_module_to_empty and sh_module_reset_parameters before "
                              "the first forward", g->param[i]->name);
    sh_group **n = realloc(l->g, (size_t)(l->n + 1) * sizeof *n);
    if (!n)
        return ck_err_set(err, -ENOMEM, "FSDP init: out of memory");
    l->g = n;
    l->g[l->n++] = g;
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

/* An explicit prefetch list: start every all-gather now, wait for none. */
static int prefetch(sh_group **list, int n, ck_err *err)
{
    for (int i = 0; i < n; i++) {
        int rc = sh_group_unshard(list[i], err);
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
    rc = sh_group_unshard(g, err);
    if (!rc)
        rc = sh_group_wait_unshard(g, err);
    if (rc)
        return rc;
    if (g->fwd_set)
        return prefetch(g->fwd_prefetch, g->nfwd_prefetch, err);
    /* Implicit: the group that followed g last time (the tree's order the first time). */
    sh_group **order = r->nprev_fwd ? r->prev_fwd_order : r->groups;
    int n = r->nprev_fwd ? r->nprev_fwd : r->ngroups;
    for (int i = 0; i + 1 < n; i++)
        if (order[i] == g)
            return order[i + 1]->is_root ? 0 : sh_group_unshard(order[i + 1], err);
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
    scratch->device = x->device;
    rc = sh_tensor_resize(scratch, g->pdt, x->ndim, x->shape, err);
    if (!rc)
        rc = sh_dev_cast(sh_dev_for(x->device), scratch->data, g->pdt, x->data, x->dtype,
                         x->numel, err);
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
        rc = g->pf_world ? sh_group_reshard_post_forward(g, err) : sh_group_reshard(g, err);
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
    int rc = sh_group_unshard(g, err);
    if (!rc)
        rc = sh_group_wait_unshard(g, err);
    if (rc)
        return rc;
    g->in_backward = true;
    if (g->bwd_set)
        return prefetch(g->bwd_prefetch, g->nbwd_prefetch, err);
    /* Implicit: backward runs the forward order in reverse, so the group whose forward
     * ended just before g's is the next to need its parameters. */
    int i = g->post_fwd_index;
    return i > 0 ? sh_group_unshard(r->post_fwd_order[i - 1], err) : 0;
}

static int post_backward(void *state, ck_err *err)
{
    sh_group *g = state;
    int rc = 0;
    bool any = false;
    for (int i = 0; i < g->nparam; i++)
        any |= g->param[i]->grad_full != NULL;
    if (any && g->sync && g->nparam)
        rc = sh_group_reduce(root_group(g->module)->root, g, err);
    g->in_backward = false;
    int rc2 = sh_group_reshard(g, err);
    rc = rc ? rc : rc2;
    if (!rc && g->is_root)
        rc = sh_fsdp_finish_backward(g, err);
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

static void release(void *state) { sh_group_free(state); }

sh_group *sh_fsdp_group(const sh_module *m)
{
    /* Only FSDP's hooks release with release(): any other installer's state is not a
     * group. */
    return m->hooks.release == release ? m->hooks.state : NULL;
}

void sh_fsdp_install_hooks(sh_group *g)
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
