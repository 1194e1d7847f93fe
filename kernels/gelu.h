/* gelu.h - GELU forward and backward over f32 arrays (CPU loops of gelu_elem.h). */
#ifndef KERNELS_GELU_H
#define KERNELS_GELU_H

#include <stddef.h>

/* y[i] = gelu(x[i]). y may alias x. */
void k_gelu(float *y, const float *x, size_t n);
/* dx[i] = dy[i] * gelu'(x[i]), x the forward's input. dx may alias dy. */
void k_gelu_bwd(float *dx, const float *x, const float *dy, size_t n);

#endif
