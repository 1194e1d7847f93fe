/* adamw_elem.h - one AdamW update of one f32 parameter element.
 *
 * torch.optim.AdamW (decoupled weight decay, no amsgrad), in the order torch's
 * single-tensor path evaluates it, so a reference written against torch agrees to
 * rounding:
 *   p -= lr * wd * p
 *   m  = m + (1 - b1) * (g - m)          (torch: m.lerp_(g, 1 - b1))
 *   v  = b2 * v + (1 - b2) * g * g
 *   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
 * bc1 = 1 - b1^t and bc2 = 1 - b2^t depend only on the step, so the caller computes
 * them once per step (k_adamw_hparams).
 */
#ifndef KERNELS_ADAMW_ELEM_H
#define KERNELS_ADAMW_ELEM_H

#include <math.h>
#include <stddef.h>

#include "kernel_fn.h"

typedef struct k_adamw_hparams {
    float lr, beta1, beta2, eps, weight_decay;
    float step_size;        /* lr / bc1 */
    float bc2_sqrt;         /* sqrt(bc2) */
} k_adamw_hparams;

/* One tensor of a fused step over many: its arrays and its own bias corrections (torch
 * counts steps per parameter, so they can differ between tensors). */
typedef struct k_adamw_tensor {
    float *p, *m, *v;
    const float *g;
    size_t n;
    float step_size, bc2_sqrt;
} k_adamw_tensor;

KERNEL_FN void k_adamw_elem(float *p, float g, float *m, float *v, const k_adamw_hparams *h)
{
    float pv = *p * (1.0f - h->lr * h->weight_decay);
    float mv = *m + (1.0f - h->beta1) * (g - *m);
    float vv = h->beta2 * *v + (1.0f - h->beta2) * g * g;
    float denom = sqrtf(vv) / h->bc2_sqrt + h->eps;
    *p = pv - h->step_size * (mv / denom);
    *m = mv;
    *v = vv;
}

#endif
