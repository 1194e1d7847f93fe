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

#endif
