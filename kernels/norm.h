/* norm.h - sum of squares and scaling over f32 arrays (CPU loops of norm_elem.h). */
#ifndef KERNELS_NORM_H
#define KERNELS_NORM_H

#include <stddef.h>

/* Sum of x[i]^2, accumulated in double. 0 for n == 0. */
double k_sumsq(const float *x, size_t n);
/* x[i] *= s. */
void k_scale(float *x, float s, size_t n);
/* dst[i] += s * src[i]. */
void k_scale_add(float *dst, const float *src, float s, size_t n);

#endif
