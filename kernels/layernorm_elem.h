/* layernorm_elem.h - LayerNorm over the last dim (eps 1e-5), one row or one column at a
 * time, for the CPU loops (layernorm.c) and the CUDA twins (cuda/layernorm.cu).
 *
 * A row (forward, the backward's dx) or a column (the backward's dw, db) is one
 * thread's work on the GPU and sums in the same order as the CPU loop, so without
 * fused multiply-adds both give the same bits.
 */
#ifndef KERNELS_LAYERNORM_ELEM_H
#define KERNELS_LAYERNORM_ELEM_H

#include <math.h>
#include <stddef.h>

#include "kernel_fn.h"

#define K_LN_EPS 1e-5f

/* y = (x - mean) * rstd * w + b over one row of C; the row's mean and rstd saved. */
KERNEL_FN void k_layernorm_row(float *y, float *mean, float *rstd, const float *x,
                               const float *w, const float *b, int C)
{
    float m = 0.0f, v = 0.0f;
    for (int c = 0; c < C; c++)
        m += x[c];
    m /= (float)C;
    for (int c = 0; c < C; c++)
        v += (x[c] - m) * (x[c] - m);
    float s = 1.0f / sqrtf(v / (float)C + K_LN_EPS);
    for (int c = 0; c < C; c++)
        y[c] = (x[c] - m) * s * w[c] + b[c];
    *mean = m;
    *rstd = s;
}

/* dx += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w, over one row. */
KERNEL_FN void k_layernorm_bwd_row(float *dx, const float *dy, const float *x, float mean,
                                   float rstd, const float *w, int C)
{
    float gm = 0.0f, gxm = 0.0f;
    for (int c = 0; c < C; c++) {
        float xhat = (x[c] - mean) * rstd;
        float g = dy[c] * w[c];
        gm += g;
        gxm += g * xhat;
    }
    gm /= (float)C;
    gxm /= (float)C;
    for (int c = 0; c < C; c++) {
        float xhat = (x[c] - mean) * rstd;
        dx[c] += rstd * (dy[c] * w[c] - gm - xhat * gxm);
    }
}

/* dw[c] += sum_n dy * xhat, db[c] += sum_n dy, rows in order, for column c. */
KERNEL_FN void k_layernorm_bwd_col(float *dw, float *db, const float *dy, const float *x,
                                   const float *mean, const float *rstd, int N, int C, int c)
{
    float sw = dw[c], sb = db[c];
    for (int n = 0; n < N; n++) {
        size_t i = (size_t)n * (size_t)C + (size_t)c;
        sw += dy[i] * ((x[i] - mean[n]) * rstd[n]);
        sb += dy[i];
    }
    dw[c] = sw;
    db[c] = sb;
}

#endif
