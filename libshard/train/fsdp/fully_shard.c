/* fsdp/fully_shard.c - sh_fully_shard and the controls set before training: the
 * options checked, which parameters form a group (group.c makes it), the hooks that
 * run it installed (hooks.c), and the explicit prefetch lists. Everything a training
 * step does with a group lives in the other files of the box (see group.h). */
#include <stdlib.h>
#include <string.h>

#include "fsdp/group.h"
#include "fsdp/hooks.h"
#include "world/mesh.h"
#include "world/world.h"

void sh_fsdp_opts_default(sh_fsdp_opts *o)
{
    memset(o, 0, sizeof *o);
    o->mp.cast_forward_inputs = true;
}

bool sh_module_is_sharded(const sh_module *m) { return sh_fsdp_group(m) != NULL; }

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
    if (sh_fsdp_group(m))
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
    if (rc) {
        free(l.p);
        return rc;
    }
    sh_group *g;
    rc = sh_group_new(m, mesh, opts, l.p, l.n, &g, err);
    if (rc)
        return rc;
    sh_fsdp_install_hooks(g);
    return 0;
}

static int set_prefetch(sh_module *m, sh_module *const *mods, int n, bool fwd, ck_err *err)
{
    sh_group *g = sh_fsdp_group(m);
    if (!g)
        return ck_err_set(err, -EINVAL, "module '%s' is not sharded: call fully_shard "
                          "before setting its prefetch", m->name);
    sh_group **l = n ? calloc((size_t)n, sizeof *l) : NULL;
    if (n && !l)
        return ck_err_set(err, -ENOMEM, "prefetch list: out of memory");
    for (int i = 0; i < n; i++) {
        l[i] = sh_fsdp_group(mods[i]);
        if (!l[i]) {
            free(l);
            return ck_err_set(err, -EINVAL, "module '%s' cannot prefetch module '%s', which "
                              "is not sharded", m->name, mods[i]->name);
        }
    }
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
