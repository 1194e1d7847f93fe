/* adamw.h - the AdamW step over an f32 shard (CPU loop of adamw_elem.h). */
#ifndef KERNELS_ADAMW_H
#define KERNELS_ADAMW_H

#include <stddef.h>

#include "adamw_elem.h"

/* Fills h for step t (1-based) from the hyper-parameters. */
void k_adamw_hparams_for_step(k_adamw_hparams *h, float lr, float beta1, float beta2,
                              float eps, float weight_decay, long step);

/* One step over n elements: p, m, v updated in place from g. */
void k_adamw_step(float *p, const float *g, float *m, float *v, size_t n,
                  const k_adamw_hparams *h);

/* The step of every tensor of t[0..nt): h's lr, betas, eps and weight decay, each
 * tensor's own step_size and bc2_sqrt. The same arithmetic as k_adamw_step per tensor;
 * on the GPU one launch serves them all (k_cuda_adamw_multi). */
void k_adamw_multi(const k_adamw_tensor *t, int nt, const k_adamw_hparams *h);

#endif
