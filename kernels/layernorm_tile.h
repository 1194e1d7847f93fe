/* layernorm_tile.h - LayerNorm as the GPU computes it: a warp per row, lane l owning
 * columns l, l + 32, l + 64, ... For the CPU replays (layernorm.c) and the CUDA
 * kernels (cuda/layernorm.cu).
 *
 * A row's sums (the mean, the squared deviations; the backward's mean(g) and
 * mean(g * xhat)) are each lane's partial over its columns in order, combined by the
 * warp's butterfly (tree_elem.h). The rest is layernorm_elem.h's formula, element for
 * element, so the replay is bitwise the GPU's (division and sqrtf are correctly
 * rounded on both). dw and db are column sums (colsum_tile.h) of dy * xhat and dy.
 * The residual form adds the block's skip connection first (x2 += x, as
 * k_scale_add with 1) and normalizes the sum, in one pass over the row.
 */
#ifndef KERNELS_LAYERNORM_TILE_H
#define KERNELS_LAYERNORM_TILE_H

#include <stddef.h>

#include "colsum_tile.h"
#include "layernorm_elem.h"
#include "norm_elem.h"

#define K_LN_LANES 32

/* Lane `lane`'s columns of x2 += x. */
KERNEL_FN void k_ln_lane_residual(float *x2, const float *x, int C, int lane)
{
    for (int c = lane; c < C; c += K_LN_LANES)
        x2[c] = k_scale_add_elem(x2[c], x[c], 1.0f);
}

KERNEL_FN float k_ln_lane_sum(const float *x, int C, int lane)
{
    float s = 0.0f;
    for (int c = lane; c < C; c += K_LN_LANES)
        s = s + x[c];
    return s;
}

KERNEL_FN float k_ln_lane_sqdev(const float *x, float m, int C, int lane)
{
    float s = 0.0f;
    for (int c = lane; c < C; c += K_LN_LANES)
        s = s + (x[c] - m) * (x[c] - m);
    return s;
}

/* From the row's combined sums: the mean, and rstd from the squared deviations. */
KERNEL_FN float k_ln_mean(float sum, int C) { return sum / (float)C; }
KERNEL_FN float k_ln_rstd(float sqdev, int C)
{
    return 1.0f / sqrtf(sqdev / (float)C + K_LN_EPS);
}

KERNEL_FN void k_ln_lane_out(float *y, const float *x, float m, float s, const float *w,
                             const float *b, int C, int lane)
{
    for (int c = lane; c < C; c += K_LN_LANES)
        y[c] = (x[c] - m) * s * w[c] + b[c];
}

/* Lane `lane`'s parts of sum(g) and sum(g * xhat), g = dy * w. */
KERNEL_FN void k_ln_lane_bwd_sums(float *gm, float *gxm, const float *dy, const float *x,
                                  float mean, float rstd, const float *w, int C, int lane)
{
    float a = 0.0f, b = 0.0f;
    for (int c = lane; c < C; c += K_LN_LANES) {
        float xhat = (x[c] - mean) * rstd;
        float g = dy[c] * w[c];
        a = a + g;
        b = b + g * xhat;
    }
    *gm = a;
    *gxm = b;
}

/* dx += rstd * (g - gm - xhat * gxm) over the lane's columns, gm and gxm the row's
 * means. */
KERNEL_FN void k_ln_lane_dx(float *dx, const float *dy, const float *x, float mean, float rstd,
                            const float *w, float gm, float gxm, int C, int lane)
{
    for (int c = lane; c < C; c += K_LN_LANES) {
        float xhat = (x[c] - mean) * rstd;
        dx[c] += rstd * (dy[c] * w[c] - gm - xhat * gxm);
    }
}

/* Chunk `chunk`'s parts of dw[c] (sum dy * xhat) and db[c] (sum dy), rows in order. */
KERNEL_FN void k_ln_col_part(float *pw, float *pb, const float *dy, const float *x,
                             const float *mean, const float *rstd, int N, int C, int c,
                             int chunk)
{
    int n1 = (chunk + 1) * K_COL_ROWS < N ? (chunk + 1) * K_COL_ROWS : N;
    float sw = 0.0f, sb = 0.0f;
    for (int n = chunk * K_COL_ROWS; n < n1; n++) {
        size_t i = (size_t)n * (size_t)C + (size_t)c;
        sw = sw + dy[i] * ((x[i] - mean[n]) * rstd[n]);
        sb = sb + dy[i];
    }
    *pw = sw;
    *pb = sb;
}

#endif
