/* layernorm.h - LayerNorm forward and backward over f32 rows (CPU loops of
 * layernorm_elem.h). x, y, dy, dx are [N, C] row-major; w, b, dw, db are [C]. */
#ifndef KERNELS_LAYERNORM_H
#define KERNELS_LAYERNORM_H

/* y = (x - mean) * rstd * w + b per row; mean[N] and rstd[N] saved for the backward. */
void k_layernorm(float *y, float *mean, float *rstd, const float *x, const float *w,
                 const float *b, int N, int C);
/* dx += ..., dw += ..., db += ... (accumulating, as every backward here). */
void k_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x,
                     const float *mean, const float *rstd, const float *w, int N, int C);

#endif
