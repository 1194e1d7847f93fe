/* softmax_elem.h - the causal softmax of attention, one row at a time, for the CPU
 * loops (softmax.c) and the CUDA twins (cuda/softmax.cu). Row t of a T x T score
 * matrix sees columns 0..t; the rest are probabilities 0 and get no gradient. expf is
 * libm's on the CPU and the device's on the GPU: equal within a few ulps, not bitwise.
 */
#ifndef KERNELS_SOFTMAX_ELEM_H
#define KERNELS_SOFTMAX_ELEM_H

#include <math.h>

#include "kernel_fn.h"

/* In place: r[0..t] becomes its softmax (max subtracted), r[t+1..T) zero. */
KERNEL_FN void k_softmax_causal_row(float *r, int t, int T)
{
    float mx = r[0], sum = 0.0f;
    for (int u = 1; u <= t; u++)
        mx = r[u] > mx ? r[u] : mx;
    for (int u = 0; u <= t; u++) {
        r[u] = expf(r[u] - mx);
        sum += r[u];
    }
    for (int u = 0; u <= t; u++)
        r[u] /= sum;
    for (int u = t + 1; u < T; u++)
        r[u] = 0.0f;
}

/* In place: dp (the gradient of the probabilities a) becomes the gradient of the
 * scores times scale: a * (dp - sum(a * dp)) * scale, zero above the diagonal. */
KERNEL_FN void k_softmax_causal_bwd_row(float *dp, const float *a, int t, int T, float scale)
{
    float dot = 0.0f;
    for (int u = 0; u <= t; u++)
        dot += a[u] * dp[u];
    for (int u = 0; u < T; u++)
        dp[u] = u <= t ? a[u] * (dp[u] - dot) * scale : 0.0f;
}

#endif
