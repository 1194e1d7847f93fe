/* fsdp_grad.c - what the user does with gradients around backward and the step:
 * turning the reduction off to accumulate locally (requires_gradient_sync), clipping
 * by the global norm, and zeroing. The gradients are made in fsdp_reduce.c. */
#include <math.h>

#include "dev.h"
#include "fsdp_int.h"

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
    const sh_dev_ops *d = sh_dev(m->world);
    for (int i = 0; i < m->nparam; i++) {
        sh_param *p = m->param[i];
        double s = 0;
        int rc = 0;
        if (!p->sharded_by) {
            a->ungrouped = true;
            a->ungrouped_name = p->name;
            if (p->grad_full)
                rc = d->sumsq(p->grad_full, p->numel, &s);
        } else if (p->grad_shard) {
            rc = d->sumsq(p->grad_shard, p->shard_numel, &s);
        }
        if (rc)
            return ck_err_set(err, rc, "clip_grad_norm: the norm of '%s' on %s", p->name,
                              d->name);
        a->sumsq += s;
    }
    return 0;
}

static int scale_grads(sh_module *m, void *arg, ck_err *err)
{
    float s = *(const float *)arg;
    const sh_dev_ops *d = sh_dev(m->world);
    for (int i = 0; i < m->nparam; i++) {
        sh_param *p = m->param[i];
        int rc = 0;
        if (p->sharded_by && p->grad_shard)
            rc = d->scale(p->grad_shard, s, p->shard_numel);
        else if (!p->sharded_by && p->grad_full)
            rc = d->scale(p->grad_full, s, p->numel);
        if (rc)
            return ck_err_set(err, rc, "clip_grad_norm: scaling '%s' on %s", p->name,
                              d->name);
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
        sh_free_state(m->world, p, SH_MEM_GRAD, p->grad_shard, p->shard_numel * sizeof(float));
        p->grad_full = p->grad_shard = NULL;
    }
    return 0;
}

int sh_zero_grad(sh_module *root, ck_err *err)
{
    return sh_module_walk(root, drop_grads, NULL, err);
}
