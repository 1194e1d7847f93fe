/* sh/fsdp.h - fully_shard and its controls (FSDP2's user contract, in C).
 *
 *   build the model on META (sh_module_new, sh_param_new)
 *   for each block: sh_fully_shard(block, mesh, &opts)
 *   sh_fully_shard(model, mesh, &opts)            the root takes the rest
 *   sh_module_to_empty(model, SH_CPU); sh_module_reset_parameters(model, seed)
 *   sh_adamw_new(model, ...)                       after sharding
 *   loop: sh_module_forward / sh_module_backward on the root,
 *         sh_clip_grad_norm, sh_adamw_step, sh_zero_grad
 */
#ifndef SH_FSDP_H
#define SH_FSDP_H

#include <stdbool.h>

#include "sh/comm.h"
#include "sh/module.h"

/* reshard_after_forward: UNSET is true for non-root modules and false for the root;
 * TO reshards to `to_world` ranks (a divisor of the shard dim's size) after forward,
 * so backward all-gathers over that smaller group (e.g. within a node). */
typedef enum sh_reshard_kind {
    SH_RESHARD_UNSET = 0, SH_RESHARD_TRUE, SH_RESHARD_FALSE, SH_RESHARD_TO
} sh_reshard_kind;

typedef struct sh_reshard {
    sh_reshard_kind kind;
    int to_world;                  /* SH_RESHARD_TO only */
} sh_reshard;

/* dtypes: 0 means "unset" (param_dtype: the parameter's own f32; reduce_dtype: the
 * param_dtype; output_dtype: no cast). */
typedef struct sh_mp_policy {
    ck_dtype param_dtype, reduce_dtype, output_dtype;
    bool cast_forward_inputs;      /* cast floating inputs to param_dtype */
} sh_mp_policy;

/* FSDP2's CPUOffloadPolicy. On CUDA ranks each parameter's shard, sharded gradient
 * and optimizer state live in pinned host memory, which the device's kernels reach in
 * place (the parameters must be on META when fully_shard runs). On CPU ranks they
 * are in host memory already, so it changes nothing (see docs/training-library.md). */
typedef struct sh_offload_policy {
    bool enabled;
    bool pin_memory;
} sh_offload_policy;

typedef struct sh_fsdp_opts {
    sh_reshard reshard_after_forward;
    sh_mp_policy mp;
    sh_offload_policy offload;
} sh_fsdp_opts;

/* FSDP2's defaults: reshard unset, no mixed precision, cast_forward_inputs true. */
void sh_fsdp_opts_default(sh_fsdp_opts *o);

/* Groups every parameter under m that no earlier call grouped, sharded on dim 0 over
 * the mesh's last dim; on a 2-D mesh the first dim replicates (HSDP). Call bottom-up:
 * blocks first, the root last. Parameters may be on META or already materialized
 * (then each rank keeps its shard). -EALREADY when m was already sharded. */
int sh_fully_shard(sh_module *m, sh_mesh *mesh, const sh_fsdp_opts *opts, ck_err *err);
bool sh_module_is_sharded(const sh_module *m);

/* Explicit prefetch: when m's forward (backward) starts, also start unsharding these
 * modules' groups. Setting a list, even an empty one, replaces the implicit prefetch
 * for m (forward: the next group in the previous iteration's order; backward: the
 * group whose forward ended before m's). Modules must have been fully_shard'ed. */
int sh_set_modules_to_forward_prefetch(sh_module *m, sh_module *const *mods, int n,
                                       ck_err *err);
int sh_set_modules_to_backward_prefetch(sh_module *m, sh_module *const *mods, int n,
                                        ck_err *err);

/* For every FSDP group under m: with sync off, backward accumulates the unsharded f32
 * gradients and skips the reduce-scatter (and all-reduce); the next backward with
 * sync on reduces the sum. */
int sh_set_requires_gradient_sync(sh_module *m, bool sync, ck_err *err);

/* Clips the sharded gradients under root to a global L2 norm of at most max_norm and
 * returns the norm before clipping (the host waits for it; total_norm may be NULL). The norm sums squares over the shard dim only,
 * so HSDP's replicas are not counted twice. Scale: max_norm / (norm + 1e-6), at most
 * 1, as torch.nn.utils.clip_grad_norm_. */
int sh_clip_grad_norm(sh_module *root, double max_norm, double *total_norm, ck_err *err);
/* The same without the host: *sumsq (one double of the world device's memory) becomes
 * the global sum of squares (the norm squared), and the factor is computed from it on
 * the device. Nothing waits, so a step can keep the device fed. */
int sh_clip_grad_norm_dev(sh_module *root, double max_norm, double *sumsq, ck_err *err);

/* Drops every gradient under root (torch's zero_grad(set_to_none=True)). */
int sh_zero_grad(sh_module *root, ck_err *err);

#endif
