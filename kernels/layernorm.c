/* layernorm.c - CPU loops of layernorm_elem.h. */
#include "layernorm.h"

#include "layernorm_elem.h"

void k_layernorm(float *y, float *mean, float *rstd, const float *x, const float *w,
                 const float *b, int N, int C)
{
    for (int n = 0; n < N; n++)
        k_layernorm_row(y + (size_t)n * C, &mean[n], &rstd[n], x + (size_t)n * C, w, b, C);
}

void k_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x,
                     const float *mean, const float *rstd, const float *w, int N, int C)
{
    for (int n = 0; n < N; n++)
        k_layernorm_bwd_row(dx + (size_t)n * C, dy + (size_t)n * C, x + (size_t)n * C,
                            mean[n], rstd[n], w, C);
    for (int c = 0; c < C; c++)
        k_layernorm_bwd_col(dw, db, dy, x, mean, rstd, N, C, c);
}
