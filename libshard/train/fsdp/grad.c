/* fsdp/grad.c - what the user does with gradients around backward and the step:
 * turning the reduction off to accumulate locally (requires_gradient_sync), clipping
 * by the global norm, and zeroing. The gradients are made in reduce.c. */
#include <math.h>

#include "fsdp/hooks.h"
#include "sh/ops.h"
#include "world/world.h"

static int set_sync(sh_module *m, void *arg, ck_err *err)
{
    (void)err;
    sh_group *g = sh_fsdp_group(m);
    if (g)
        g->sync = *(const bool *)arg;
    return 0;
}

int sh_set_requires_gradient_sync(sh_module *m, bool sync, ck_err *err)
{
    return sh_module_walk(m, set_sync, &sync, err);
}

typedef struct norm_acc {
    double *sumsq;               /* device memory */
    double max_norm;
    sh_group *first;
    bool ungrouped;
    const char *ungrouped_name;
} norm_acc;

static int add_sumsq(sh_module *m, void *arg, ck_err *err)
{
    norm_acc *a = arg;
    sh_group *g = sh_fsdp_group(m);
    if (g && !a->first)
        a->first = g;
    if (g && g->mesh != a->first->mesh)
        return ck_err_set(err, -EINVAL, "clip_grad_norm: modules '%s' and '%s' are sharded "
                          "on different meshes", a->first->module->name, m->name);
    const sh_dev_ops *d = sh_dev(m->world);
    for (int i = 0; i < m->nparam; i++) {
        sh_param *p = m->param[i];
        int rc = 0;
        if (!p->sharded_by) {
            a->ungrouped = true;
            a->ungrouped_name = p->name;
            if (p->grad_full)
                rc = d->sumsq(p->grad_full, p->numel, a->sumsq);
        } else if (p->grad_shard) {
            rc = d->sumsq(p->grad_shard, p->shard_numel, a->sumsq);
        }
        if (rc)
            return ck_err_set(err, rc, "clip_grad_norm: the norm of '%s' on %s", p->name,
                              d->name);
    }
    return 0;
}

static int scale_grads(sh_module *m, void *arg, ck_err *err)
{
    const norm_acc *a = arg;
    const sh_dev_ops *d = sh_dev(m->world);
    for (int i = 0; i < m->nparam; i++) {
        sh_param *p = m->param[i];
        int rc = 0;
        if (p->sharded_by && p->grad_shard)
            rc = d->clip_scale(p->grad_shard, p->shard_numel, a->sumsq, a->max_norm);
        else if (!p->sharded_by && p->grad_full)
            rc = d->clip_scale(p->grad_full, p->numel, a->sumsq, a->max_norm);
        if (rc)
            return ck_err_set(err, rc, "clip_grad_norm: scaling '%s' on %s", p->name,
                              d->name);
    }
    return 0;
}

int sh_clip_grad_norm_dev(sh_module *root, double max_norm, double *sumsq, ck_err *err)
{
    norm_acc a = {sumsq, max_norm, NULL, false, NULL};
    const sh_dev_ops *d = sh_dev(root->world);
    int rc = d->zero(sumsq, sizeof *sumsq);
    if (rc)
        return ck_err_set(err, rc, "clip_grad_norm: zeroing the sum on %s", d->name);
    rc = sh_module_walk(root, add_sumsq, &a, err);
    if (rc)
        return rc;
    if (a.first && a.ungrouped)
        return ck_err_set(err, -EINVAL, "clip_grad_norm(module '%s'): parameter '%s' is not "
                          "sharded while others are; fully_shard the root too",
                          root->name, a.ungrouped_name);
    /* Replicas hold equal shards: summing over the shard dim alone counts each
     * element once. The sum stays in device memory (NCCL on CUDA ranks). */
    if (a.first) {
        rc = sh_all_reduce(a.first->shard_comm, sumsq, sumsq, 1, CK_F64, SH_SUM, NULL, err);
        if (rc)
            return ck_err_set(err, rc, "clip_grad_norm");
    }
    return sh_module_walk(root, scale_grads, &a, err);
}

int sh_clip_grad_norm(sh_module *root, double max_norm, double *total_norm, ck_err *err)
{
    sh_world *w = root->world;
    double *sumsq = NULL, host = 0.0;
    int rc = sh_buffer_alloc(w, sizeof *sumsq, (void **)&sumsq, err);
    if (!rc)
        rc = sh_clip_grad_norm_dev(root, max_norm, sumsq, err);
    if (!rc && total_norm)
        rc = sh_copy_to_host(w, &host, sumsq, sizeof host, err);
    sh_buffer_free(w, sumsq);
    if (!rc && total_norm)
        *total_norm = sqrt(host);
    return rc;
}

static int drop_grads(sh_module *m, void *arg, ck_err *err)
{
    (void)arg;
    (void)err;
    for (int i = 0; i < m->nparam; i++) {
        sh_param *p = m->param[i];
        sh_free(m->world, SH_MEM_GRAD, p->grad_full, p->numel * sizeof(float));
        sh_free_state(m->world, p->host_state, SH_MEM_GRAD, p->grad_shard,
                      p->shard_numel * sizeof(float));
        p->grad_full = p->grad_shard = NULL;
    }
    return 0;
}

int sh_zero_grad(sh_module *root, ck_err *err)
{
    return sh_module_walk(root, drop_grads, NULL, err);
}
