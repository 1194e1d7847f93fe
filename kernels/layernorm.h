/* layernorm.h - LayerNorm forward and backward over f32 rows (CPU loops of
 * layernorm_elem.h). x, y, dy, dx are [N, C] row-major; w, b, dw, db are [C]. */
#ifndef KERNELS_LAYERNORM_H
#define KERNELS_LAYERNORM_H

#include "colsum_tile.h"

/* y = (x - mean) * rstd * w + b per row; mean[N] and rstd[N] saved for the backward. */
void k_layernorm(float *y, float *mean, float *rstd, const float *x, const float *w,
                 const float *b, int N, int C);
/* dx += ..., dw += ..., db += ... (accumulating, as every backward here). */
void k_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x,
                     const float *mean, const float *rstd, const float *w, int N, int C);

/* The GPU's LayerNorm (layernorm_tile.h), replayed: the same results as above up to
 * the order of the row and column sums. The residual form first adds x into x2 and
 * normalizes x2 (y = layernorm(x2 += x)). The backward's part is scratch of
 * k_layernorm_part_floats(N, C) floats. */
void k_layernorm_tiled(float *y, float *mean, float *rstd, const float *x, const float *w,
                       const float *b, int N, int C);
void k_residual_layernorm_tiled(float *x2, float *y, float *mean, float *rstd, const float *x,
                                const float *w, const float *b, int N, int C);
void k_layernorm_bwd_tiled(float *dx, float *dw, float *db, const float *dy, const float *x,
                           const float *mean, const float *rstd, const float *w, int N, int C,
                           float *part);
#define k_layernorm_part_floats(N, C) (2 * (size_t)k_col_chunks(N) * (size_t)(C))

#endif
