/* norm_elem.h - per-element pieces of gradient clipping and gradient reduction. */
#ifndef KERNELS_NORM_ELEM_H
#define KERNELS_NORM_ELEM_H

#include <math.h>

#include "kernel_fn.h"

/* A square, widened first: sums of squares of millions of f32 gradients lose the
 * small terms in f32. */
KERNEL_FN double k_sq_elem(float x)
{
    return (double)x * (double)x;
}

KERNEL_FN float k_scale_elem(float x, float s)
{
    return x * s;
}

/* The factor torch's clip_grad_norm_ scales the gradients by, from their global sum
 * of squares: max_norm / (norm + 1e-6) in double, rounded once to f32; the gradients
 * are scaled only when it is below 1. */
KERNEL_FN float k_clip_coef(double sumsq, double max_norm)
{
    return (float)(max_norm / (sqrt(sumsq) + 1e-6));
}

/* dst + s * src: accumulating a reduced, averaged gradient into a sharded one. */
KERNEL_FN float k_scale_add_elem(float dst, float src, float s)
{
    return dst + s * src;
}

#endif
