/* fsdp/group.h - FSDP's group: the parameters fully_shard took over on one module,
 * shared by the box's files and by the state dicts (checkpoint/state_dict.c).
 *
 * The box's files, each calling only files listed after it (tests/layering checks
 * that no two call each other):
 *   fully_shard.c  sh_fully_shard: options, which parameters, prefetch lists
 *   grad.c         gradient sync, clipping, zero_grad
 *   hooks.c        the module hooks: lazy init, order, prefetch, mixed-precision
 *                  casts; a module's group is the state of the hooks on it
 *   reduce.c       reduce-scatter, HSDP all-reduce, the end of backward
 *   gather.c       unshard (all-gather into the flat buffer) and reshard
 *   group.c        a group's making (its comms, flat layouts, shards) and freeing
 *
 * A group's life in one training step:
 *   SHARDED --pre-forward: all-gather--> UNSHARDED --post-forward--> SHARDED
 *     (or POSTFWD, a shard over the smaller reshard_after_forward world, or stays
 *     UNSHARDED when reshard_after_forward is false)
 *   --pre-backward: all-gather--> UNSHARDED --post-backward: reduce-scatter, reshard-->
 *   SHARDED; the next group's post-backward waits for that reduce-scatter and
 *   accumulates the averaged result into the sharded f32 gradients (the root's
 *   post-backward does so for the last one, and for the HSDP all-reduces).
 * Prefetching starts a group's all-gather early (state UNSHARDING) and the hook that
 * needs it waits for it.
 */
#ifndef SH_FSDP_GROUP_H
#define SH_FSDP_GROUP_H

#include <stdbool.h>
#include <stddef.h>

#include "flat.h"
#include "module/module.h"
#include "sh/fsdp.h"

typedef struct sh_group sh_group;

typedef enum group_state {
    GS_SHARDED,                  /* only the shards exist */
    GS_POSTFWD,                  /* resharded to the smaller post-forward world */
    GS_UNSHARDING,               /* all-gather in flight */
    GS_UNSHARDED,
} group_state;

/* One FSDP root's bookkeeping: its groups and the orders of the last forward. */
typedef struct sh_fsdp_root {
    sh_group **groups;           /* every group under the root, root's group last */
    int ngroups;
    sh_group **fwd_order, **prev_fwd_order;   /* pre-forward order, this / last pass */
    int nfwd, nprev_fwd;
    sh_group **post_fwd_order;   /* post-forward order of this pass (backward prefetch) */
    int npost_fwd;
    sh_group *rs_inflight;       /* the group whose reduce-scatter is in flight (reduce.c:
                                    one at a time), or NULL */
} sh_fsdp_root;

struct sh_group {
    sh_module *module;
    sh_mesh *mesh;
    sh_fsdp_opts opts;
    sh_param **param;
    int nparam;
    ck_dtype pdt, rdt;           /* resolved param and reduce dtypes */
    sh_comm *shard_comm, *rep_comm;  /* rep_comm NULL on a 1-D mesh */
    int W, r, R;                 /* shard world, shard rank, replicas */
    bool reshard_after_forward;  /* resolved at lazy init (root: false when unset) */
    int pf_world;                /* >1: reshard to this many ranks after forward */
    sh_comm *pf_comm;
    /* Flat layouts at the shard world, per dtype: f32 (shards, gradients), param
     * dtype (all-gather), reduce dtype (reduce-scatter); and at the post-forward world
     * in param dtype. Slots are measured in bytes of their dtype. */
    k_seg *seg_f32, *seg_p, *seg_r, *seg_pf;
    size_t slot_f32, slot_p, slot_r, slot_pf, slot_elems;
    group_state state;
    bool in_backward;
    bool sync;                   /* requires_gradient_sync */
    sh_work *ag_work;
    void *ag_in, *ag_out;        /* this rank's slot and the gathered slots (param
                                    dtype) while UNSHARDING */
    size_t ag_in_bytes, ag_out_bytes;
    bool ag_from_pf;             /* gathering the post-forward shards */
    void *pf_shard;              /* post-forward shard (param dtype) */
    /* Gradient reduction: the reduce-scatter is retired at the next group's
     * post-backward, the replica all-reduce at the end of backward. */
    sh_work *rs_work, *ar_work;
    void *rs_in;                 /* the chunk-cat slots, reduce dtype, while reduce-scattering */
    void *rs_out;                /* this rank's reduced slot (reduce dtype) */
    bool rs_pending;             /* rs_out not yet added into the sharded gradients */
    bool fwd_set, bwd_set;       /* explicit prefetch lists given */
    sh_group **fwd_prefetch, **bwd_prefetch;
    int nfwd_prefetch, nbwd_prefetch;
    sh_fsdp_root *root;          /* set on the root group at lazy init */
    bool is_root;
    int post_fwd_index;          /* index in the root's post_fwd_order, -1 if none */
};

static inline sh_world *group_world(const sh_group *g) { return g->module->world; }

/* Makes the group of module m on mesh over its param[0..nparam) (the array is the
 * group's from then on, freed with it even on failure): their rows sharded across
 * the mesh's last dim, the parameters materialized already cut to this rank's rows. */
int sh_group_new(sh_module *m, sh_mesh *mesh, const sh_fsdp_opts *opts, sh_param **param,
                 int nparam, sh_group **out, ck_err *err);

/* Frees g, waiting first for its collectives still in flight. */
void sh_group_free(sh_group *g);

#endif
