/* module/module.c - the module tree, parameters, materialization, and running a module:
 * sh_module_forward / sh_module_backward run the callback inside whatever hooks are
 * installed on the module (sh_fully_shard installs FSDP's). What a hook does is the
 * installer's business; this file only knows where each one runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "module/module.h"
#include "world/world.h"

static int grow(void **arr, int n, size_t elem)
{
    void *p = realloc(*arr, (size_t)(n + 1) * elem);
    if (!p)
        return -ENOMEM;
    *arr = p;
    return 0;
}

/* Hooks may own what is under the module (fully_shard groups its parameters), so the
 * tree below it is frozen once they are installed. */
static bool hooked(const sh_module *m) { return m->hooks.state != NULL; }

int sh_module_new(sh_world *w, sh_module *parent, const char *name, sh_forward_fn forward,
                  sh_backward_fn backward, void *user, sh_module **out, ck_err *err)
{
    *out = NULL;
    sh_module *m = calloc(1, sizeof *m);
    if (!m)
        return ck_err_set(err, -ENOMEM, "module '%s': out of memory", name);
    m->world = w;
    m->parent = parent;
    m->forward = forward;
    m->backward = backward;
    m->user = user;
    /* torch's naming: the root's own name prefixes none of its descendants. */
    int len;
    if (parent && parent->parent)
        len = snprintf(m->name, sizeof m->name, "%s.%s", parent->name, name);
    else
        len = snprintf(m->name, sizeof m->name, "%s", name);
    if (len >= (int)sizeof m->name) {
        free(m);
        return ck_err_set(err, -ENAMETOOLONG, "module name '%s' is too long", name);
    }
    if (parent) {
        if (hooked(parent)) {
            free(m);
            return ck_err_set(err, -EINVAL, "module '%s' cannot get a child '%s' after "
                              "fully_shard", parent->name, name);
        }
        if (grow((void **)&parent->child, parent->nchild, sizeof *parent->child)) {
            free(m);
            return ck_err_set(err, -ENOMEM, "module '%s': out of memory", name);
        }
        parent->child[parent->nchild++] = m;
    }
    *out = m;
    return 0;
}

static void free_param_storage(sh_param *p)
{
    sh_world *w = p->owner->world;
    if (p->sharded_by)
        sh_free(w, SH_MEM_PARAM, p->value.data, p->value.cap);
    p->value.data = NULL;
    p->value.cap = 0;
    size_t shard_bytes = p->shard_numel * sizeof(float);
    sh_free_state(w, p->host_state, SH_MEM_PARAM, p->shard, shard_bytes);
    sh_free(w, SH_MEM_GRAD, p->grad_full, p->numel * sizeof(float));
    sh_free_state(w, p->host_state, SH_MEM_GRAD, p->grad_shard, shard_bytes);
    p->shard = p->grad_full = p->grad_shard = NULL;
    p->materialized = false;
}

void sh_module_free(sh_module *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->nchild; i++)
        sh_module_free(m->child[i]);
    /* The hooks' state first: it may hold buffers of in-flight collectives. */
    if (m->hooks.release)
        m->hooks.release(m->hooks.state);
    for (int i = 0; i < m->nparam; i++) {
        free_param_storage(m->param[i]);
        free(m->param[i]);
    }
    free(m->param);
    free(m->child);
    free(m);
}

const char *sh_module_name(const sh_module *m) { return m->name; }
sh_world *sh_module_world(const sh_module *m) { return m->world; }
int sh_module_num_children(const sh_module *m) { return m->nchild; }
sh_module *sh_module_child(const sh_module *m, int i) { return m->child[i]; }

int sh_module_walk(sh_module *root, sh_module_visit_fn fn, void *arg, ck_err *err)
{
    int rc = fn(root, arg, err);
    for (int i = 0; !rc && i < root->nchild; i++)
        rc = sh_module_walk(root->child[i], fn, arg, err);
    return rc;
}

int sh_param_new(sh_module *m, const char *name, int ndim, const int64_t *shape,
                 sh_init_spec init, sh_param **out, ck_err *err)
{
    *out = NULL;
    if (ndim < 0 || ndim > CK_MAX_NDIM)
        return ck_err_set(err, -EINVAL, "parameter '%s' of module '%s': %d dims (max %d)",
                          name, m->name, ndim, CK_MAX_NDIM);
    if (hooked(m))
        return ck_err_set(err, -EINVAL, "parameter '%s' added to module '%s' after "
                          "fully_shard", name, m->name);
    sh_param *p = calloc(1, sizeof *p);
    if (!p)
        return ck_err_set(err, -ENOMEM, "parameter '%s': out of memory", name);
    p->owner = m;
    int len = m->parent ? snprintf(p->name, sizeof p->name, "%s.%s", m->name, name)
                        : snprintf(p->name, sizeof p->name, "%s", name);
    if (len >= (int)sizeof p->name) {
        free(p);
        return ck_err_set(err, -ENAMETOOLONG, "parameter name '%s' is too long", name);
    }
    p->ndim = ndim;
    p->numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) {
            int rc = ck_err_set(err, -EINVAL, "parameter '%s': negative size in dim %d",
                                p->name, d);
            free(p);
            return rc;
        }
        p->shape[d] = shape[d];
        p->numel *= (size_t)shape[d];
    }
    p->rows = ndim ? (size_t)shape[0] : 1;
    p->row_elems = 1;
    for (int d = 1; d < ndim; d++)
        p->row_elems *= (size_t)shape[d];
    p->shard_rows = p->rows;
    p->shard_numel = p->numel;
    p->init = init;
    p->value.dtype = CK_F32;
    p->value.device = SH_META;
    p->value.ndim = ndim;
    memcpy(p->value.shape, p->shape, sizeof p->shape);
    p->value.numel = p->numel;
    if (grow((void **)&m->param, m->nparam, sizeof *m->param)) {
        int rc = ck_err_set(err, -ENOMEM, "parameter '%s': out of memory", p->name);
        free(p);
        return rc;
    }
    m->param[m->nparam++] = p;
    *out = p;
    return 0;
}

const char *sh_param_name(const sh_param *p) { return p->name; }
int sh_param_ndim(const sh_param *p) { return p->ndim; }
const int64_t *sh_param_shape(const sh_param *p) { return p->shape; }

static int materialize(sh_module *m, void *arg, ck_err *err)
{
    (void)arg;
    for (int i = 0; i < m->nparam; i++) {
        sh_param *p = m->param[i];
        if (p->materialized)
            continue;
        /* Whoever sharded p already set which rows are local. */
        if (p->shard_numel) {
            p->shard = sh_alloc_state(m->world, p->host_state, SH_MEM_PARAM,
                                      p->shard_numel * sizeof(float), true);
            if (!p->shard)
                return ck_err_set(err, -ENOMEM, "parameter '%s': out of memory for its "
                                  "%zu-element shard", p->name, p->shard_numel);
        }
        p->materialized = true;
        p->value.device = m->world->device;
        if (!p->sharded_by) {
            /* An unsharded parameter is its own full value. */
            p->value.data = p->shard;
            p->value.dtype = CK_F32;
        }
    }
    return 0;
}

int sh_module_to_empty(sh_module *root, sh_device dev, ck_err *err)
{
    if (dev != SH_CPU && dev != SH_CUDA)
        return ck_err_set(err, -EINVAL, "module '%s': to_empty needs a real device",
                          root->name);
    if (dev != root->world->device)
        return ck_err_set(err, dev == SH_CUDA ? -ENODEV : -EINVAL,
                          "module '%s': to_empty on %s, but rank %d's world is on %s: call "
                          "sh_world_set_device(w, %s) first", root->name,
                          dev == SH_CUDA ? "CUDA" : "CPU", root->world->rank,
                          root->world->device == SH_CUDA ? "CUDA" : "CPU",
                          dev == SH_CUDA ? "SH_CUDA" : "SH_CPU");
    return sh_module_walk(root, materialize, NULL, err);
}

static int reset(sh_module *m, void *arg, ck_err *err)
{
    uint64_t seed = *(const uint64_t *)arg;
    for (int i = 0; i < m->nparam; i++) {
        sh_param *p = m->param[i];
        if (!p->materialized)
            return ck_err_set(err, -EINVAL, "parameter '%s' is on META: call "
                              "sh_module_to_empty before reset_parameters", p->name);
        /* Values are made on the host (they depend only on the seed, the name and the
         * index) and copied to the device's shard. */
        const sh_dev_ops *d = sh_dev(m->world);
        bool in_host = d->device == SH_CPU || p->host_state;
        float *host = in_host ? p->shard : malloc(p->shard_numel * sizeof(float));
        if (!host && p->shard_numel)
            return ck_err_set(err, -ENOMEM, "initializing '%s': out of memory", p->name);
        sh_init_fill(&p->init, seed, p->name, p->shard_row * p->row_elems, host,
                     p->shard_numel);
        int rc = 0;
        if (host != p->shard) {
            rc = d->copy(p->shard, host, p->shard_numel * sizeof(float));
            if (!rc)
                rc = d->sync();
            free(host);
        }
        if (rc)
            return ck_err_set(err, rc, "initializing '%s': copying to %s", p->name, d->name);
    }
    return 0;
}

int sh_module_reset_parameters(sh_module *root, uint64_t seed, ck_err *err)
{
    return sh_module_walk(root, reset, &seed, err);
}

/* The hooks that sharded p decide when its full value and gradient exist. */
static int check_access(const sh_param *p, bool grad, ck_err *err)
{
    const sh_module_hooks *h = p->sharded_by ? &p->sharded_by->hooks : NULL;
    return h && h->check_param ? h->check_param(h->state, p, grad, err) : 0;
}

int sh_param_value(sh_param *p, sh_tensor **out, ck_err *err)
{
    *out = NULL;
    if (!p->materialized)
        return ck_err_set(err, -EPERM, "parameter '%s' is on META: call sh_module_to_empty "
                          "first", p->name);
    int rc = check_access(p, false, err);
    if (rc)
        return rc;
    *out = &p->value;
    return 0;
}

int sh_param_grad(sh_param *p, float **out, ck_err *err)
{
    *out = NULL;
    if (!p->materialized)
        return ck_err_set(err, -EPERM, "parameter '%s' is on META", p->name);
    int rc = check_access(p, true, err);
    if (rc)
        return rc;
    if (!p->grad_full && p->numel) {
        p->grad_full = sh_alloc(p->owner->world, SH_MEM_GRAD, p->numel * sizeof(float), true);
        if (!p->grad_full)
            return ck_err_set(err, -ENOMEM, "gradient of '%s': out of memory", p->name);
    }
    *out = p->grad_full;
    return 0;
}

int sh_module_forward(sh_module *m, const sh_tensor *in, sh_tensor *out, ck_err *err)
{
    const sh_module_hooks *h = &m->hooks;
    const sh_tensor *arg = in;
    sh_tensor scratch = SH_TENSOR_INIT;
    int rc = h->pre_forward ? h->pre_forward(h->state, &arg, &scratch, err) : 0;
    if (rc) {
        sh_tensor_free(&scratch);
        return ck_err_set(err, rc, "before forward of module '%s'", m->name);
    }
    if (m->forward)
        rc = m->forward(m, arg, out, m->user, err);
    sh_tensor_free(&scratch);
    if (rc)
        return ck_err_set(err, rc, "forward of module '%s'", m->name);
    rc = h->post_forward ? h->post_forward(h->state, out, err) : 0;
    if (rc)
        return ck_err_set(err, rc, "after forward of module '%s'", m->name);
    return 0;
}

int sh_module_backward(sh_module *m, const sh_tensor *grad_out, sh_tensor *grad_in,
                       ck_err *err)
{
    const sh_module_hooks *h = &m->hooks;
    int rc = h->pre_backward ? h->pre_backward(h->state, err) : 0;
    if (rc)
        return ck_err_set(err, rc, "before backward of module '%s'", m->name);
    if (m->backward) {
        rc = m->backward(m, grad_out, grad_in, m->user, err);
        if (rc)
            return ck_err_set(err, rc, "backward of module '%s'", m->name);
    }
    rc = h->post_backward ? h->post_backward(h->state, err) : 0;
    if (rc)
        return ck_err_set(err, rc, "after backward of module '%s'", m->name);
    return 0;
}
