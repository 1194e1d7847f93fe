/* norm_elem.h - per-element pieces of gradient clipping and gradient reduction. */
#ifndef KERNELS_NORM_ELEM_H
#define KERNELS_NORM_ELEM_H

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

/* dst + s * src: accumulating a reduced, averaged gradient into a sharded one. */
KERNEL_FN float k_scale_add_elem(float dst, float src, float s)
{
    return dst + s * src;
}

#endif
