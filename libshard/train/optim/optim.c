/* optim/optim.c - AdamW over local shards (kernels/adamw.h does the arithmetic). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adamw.h"
#include "module/module.h"
#include "optim/optim.h"
#include "world/world.h"

struct sh_adamw {
    sh_world *world;
    sh_adamw_opts o;
    sh_param **p;
    float **m, **v;
    long *steps;          /* per parameter, as torch: a step without a gradient skips */
    k_adamw_tensor *t;    /* the step's list of shards (n entries at most) */
    int n;
    long calls;
    int (*fence)(void *arg, ck_err *err);
    void *fence_arg;
};

void sh_adamw_set_fence(sh_adamw *o, int (*fence)(void *arg, ck_err *err), void *arg)
{
    o->fence = fence;
    o->fence_arg = arg;
}

void sh_adamw_opts_default(sh_adamw_opts *o)
{
    o->lr = 1e-3f;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->eps = 1e-8f;
    o->weight_decay = 1e-2f;
}

typedef struct opt_collect {
    sh_adamw *o;
    int cap;
} opt_collect;

static int collect(sh_module *m, void *arg, ck_err *err)
{
    opt_collect *c = arg;
    for (int i = 0; i < m->nparam; i++) {
        sh_param *p = m->param[i];
        if (!p->sharded_by)
            return ck_err_set(err, -EINVAL,
                              "create the optimizer after fully_shard: parameter '%s' is "
                              "not sharded yet, so the optimizer would hold full tensors "
                              "(call fully_shard on its module or the root first)", p->name);
        if (!p->materialized)
            return ck_err_set(err, -EINVAL, "parameter '%s' is on META: call "
                              "sh_module_to_empty before creating the optimizer", p->name);
        if (c->o->n == c->cap) {
            c->cap = c->cap ? 2 * c->cap : 16;
            sh_param **np = realloc(c->o->p, (size_t)c->cap * sizeof *np);
            if (!np)
                return ck_err_set(err, -ENOMEM, "optimizer: out of memory");
            c->o->p = np;
        }
        c->o->p[c->o->n++] = p;
    }
    return 0;
}

int sh_adamw_new(sh_module *root, const sh_adamw_opts *opts, sh_adamw **out, ck_err *err)
{
    *out = NULL;
    sh_adamw *o = calloc(1, sizeof *o);
    if (!o)
        return ck_err_set(err, -ENOMEM, "optimizer: out of memory");
    o->world = root->world;
    if (opts)
        o->o = *opts;
    else
        sh_adamw_opts_default(&o->o);
    opt_collect c = {o, 0};
    int rc = sh_module_walk(root, collect, &c, err);
    if (!rc) {
        o->m = calloc((size_t)o->n + 1, sizeof *o->m);
        o->v = calloc((size_t)o->n + 1, sizeof *o->v);
        o->steps = calloc((size_t)o->n + 1, sizeof *o->steps);
        o->t = calloc((size_t)o->n + 1, sizeof *o->t);
        if (!o->m || !o->v || !o->steps || !o->t)
            rc = ck_err_set(err, -ENOMEM, "optimizer: out of memory");
    }
    for (int i = 0; !rc && i < o->n; i++) {
        size_t bytes = o->p[i]->shard_numel * sizeof(float);
        bool host = o->p[i]->host_state;
        o->m[i] = sh_alloc_state(o->world, host, SH_MEM_OPTIM, bytes, true);
        o->v[i] = sh_alloc_state(o->world, host, SH_MEM_OPTIM, bytes, true);
        if (bytes && (!o->m[i] || !o->v[i]))
            rc = ck_err_set(err, -ENOMEM, "optimizer state of '%s': out of memory",
                            o->p[i]->name);
    }
    if (rc) {
        sh_adamw_free(o);
        return rc;
    }
    *out = o;
    return 0;
}

int sh_adamw_step(sh_adamw *o, ck_err *err)
{
    const sh_dev_ops *d = sh_dev(o->world);
    int rc = o->fence ? o->fence(o->fence_arg, err) : 0;
    if (rc)
        return rc;
    o->calls++;
    k_adamw_hparams h;
    int nt = 0;
    for (int i = 0; i < o->n; i++) {
        sh_param *p = o->p[i];
        /* Shards that are empty on this rank still count the step, as torch counts it
         * for a parameter whose gradient exists elsewhere. */
        if (!p->grad_shard && p->shard_numel)
            continue;
        k_adamw_hparams_for_step(&h, o->o.lr, o->o.beta1, o->o.beta2, o->o.eps,
                                 o->o.weight_decay, ++o->steps[i]);
        if (p->shard_numel)
            o->t[nt++] = (k_adamw_tensor){p->shard, o->m[i], o->v[i], p->grad_shard,
                                          p->shard_numel, h.step_size, h.bc2_sqrt};
    }
    /* Every shard in one call: one launch (a few) on CUDA ranks. */
    rc = nt ? d->adamw(o->t, nt, &h) : 0;
    return rc ? ck_err_set(err, rc, "AdamW step of %d tensors (rank %d) on %s", nt,
                           o->world->rank, d->name)
              : 0;
}

long sh_adamw_step_count(const sh_adamw *o) { return o->calls; }

void sh_adamw_set_lr(sh_adamw *o, float lr) { o->o.lr = lr; }

void sh_adamw_set_step_count(sh_adamw *o, long n)
{
    o->calls = n;
    for (int i = 0; i < o->n; i++)
        o->steps[i] = n;
}

void sh_adamw_free(sh_adamw *o)
{
    if (!o)
        return;
    for (int i = 0; o->m && i < o->n; i++) {
        size_t bytes = o->p[i]->shard_numel * sizeof(float);
        bool host = o->p[i]->host_state;
        sh_free_state(o->world, host, SH_MEM_OPTIM, o->m[i], bytes);
        sh_free_state(o->world, host, SH_MEM_OPTIM, o->v[i], bytes);
    }
    free(o->m);
    free(o->v);
    free(o->steps);
    free(o->t);
    free(o->p);
    free(o);
}

/* For state_dict.c: the optimizer's parameters and state. */
int sh_adamw_num_params(const sh_adamw *o) { return o->n; }
sh_param *sh_adamw_param(const sh_adamw *o, int i) { return o->p[i]; }
float *sh_adamw_exp_avg(const sh_adamw *o, int i) { return o->m[i]; }
float *sh_adamw_exp_avg_sq(const sh_adamw *o, int i) { return o->v[i]; }
