/* sh/optim.h - AdamW over the local shards, with f32 state.
 *
 * Created after fully_shard, so that it holds the sharded parameters (FSDP2: "create
 * the optimizer after sharding"). Its state is allocated at creation, shard-sized.
 */
#ifndef SH_OPTIM_H
#define SH_OPTIM_H

#include "sh/module.h"

typedef struct sh_adamw sh_adamw;

typedef struct sh_adamw_opts {
    float lr, beta1, beta2, eps, weight_decay;
} sh_adamw_opts;

/* torch.optim.AdamW's defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, wd 1e-2. */
void sh_adamw_opts_default(sh_adamw_opts *o);

/* -EINVAL, naming the parameter, when some parameter under root is not sharded or not
 * materialized yet. */
int sh_adamw_new(sh_module *root, const sh_adamw_opts *opts, sh_adamw **out, ck_err *err);
/* One step for every parameter that has a gradient, after the fence, if one is set. */
int sh_adamw_step(sh_adamw *o, ck_err *err);
/* fence(arg) runs at the start of every step, before any parameter or moment changes,
 * and a failure stops the step: a lazy checkpoint's copy (sh/checkpoint.h) still reads
 * them. NULL removes it. */
void sh_adamw_set_fence(sh_adamw *o, int (*fence)(void *arg, ck_err *err), void *arg);
long sh_adamw_step_count(const sh_adamw *o);
/* The learning rate of the following steps: a schedule sets it before each step. */
void sh_adamw_set_lr(sh_adamw *o, float lr);
/* Restores the step count after loading a checkpoint's moments: every parameter's
 * step (bias correction) continues from n, as torch's loaded per-parameter "step". */
void sh_adamw_set_step_count(sh_adamw *o, long n);
void sh_adamw_free(sh_adamw *o);

#endif
