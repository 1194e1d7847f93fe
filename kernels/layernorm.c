/* layernorm.c - CPU loops of layernorm_elem.h (the CPU ranks' LayerNorm), and the
 * replays of the GPU's (layernorm_tile.h) that its kernels are tested against. */
#include "layernorm.h"

#include "layernorm_elem.h"
#include "layernorm_tile.h"
#include "tree_elem.h"

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

/* The replays of cuda/layernorm.cu (layernorm_tile.h): a warp's 32 lanes in turn, their
 * parts combined by the warp's tree. */
static void row_stats(float *mean, float *rstd, const float *x, int C)
{
    float p[K_LN_LANES];
    for (int l = 0; l < K_LN_LANES; l++)
        p[l] = k_ln_lane_sum(x, C, l);
    float m = k_ln_mean(k_tree_sum(p, K_LN_LANES), C);
    for (int l = 0; l < K_LN_LANES; l++)
        p[l] = k_ln_lane_sqdev(x, m, C, l);
    *mean = m;
    *rstd = k_ln_rstd(k_tree_sum(p, K_LN_LANES), C);
}

static void row_out(float *y, float *mean, float *rstd, const float *x, const float *w,
                    const float *b, int C)
{
    row_stats(mean, rstd, x, C);
    for (int l = 0; l < K_LN_LANES; l++)
        k_ln_lane_out(y, x, *mean, *rstd, w, b, C, l);
}

void k_layernorm_tiled(float *y, float *mean, float *rstd, const float *x, const float *w,
                       const float *b, int N, int C)
{
    for (int n = 0; n < N; n++)
        row_out(y + (size_t)n * C, &mean[n], &rstd[n], x + (size_t)n * C, w, b, C);
}

void k_residual_layernorm_tiled(float *x2, float *y, float *mean, float *rstd, const float *x,
                                const float *w, const float *b, int N, int C)
{
    for (int n = 0; n < N; n++) {
        float *r = x2 + (size_t)n * C;
        for (int l = 0; l < K_LN_LANES; l++)
            k_ln_lane_residual(r, x + (size_t)n * C, C, l);
        row_out(y + (size_t)n * C, &mean[n], &rstd[n], r, w, b, C);
    }
}

void k_layernorm_bwd_tiled(float *dx, float *dw, float *db, const float *dy, const float *x,
                           const float *mean, const float *rstd, const float *w, int N, int C,
                           float *part)
{
    for (int n = 0; n < N; n++) {
        size_t o = (size_t)n * C;
        float pa[K_LN_LANES], pb[K_LN_LANES];
        for (int l = 0; l < K_LN_LANES; l++)
            k_ln_lane_bwd_sums(&pa[l], &pb[l], dy + o, x + o, mean[n], rstd[n], w, C, l);
        float gm = k_tree_sum(pa, K_LN_LANES) / (float)C;
        float gxm = k_tree_sum(pb, K_LN_LANES) / (float)C;
        for (int l = 0; l < K_LN_LANES; l++)
            k_ln_lane_dx(dx + o, dy + o, x + o, mean[n], rstd[n], w, gm, gxm, C, l);
    }
    int chunks = k_col_chunks(N);
    float *pw = part, *pbias = part + (size_t)chunks * C;
    for (int k = 0; k < chunks; k++)
        for (int c = 0; c < C; c++)
            k_ln_col_part(&pw[(size_t)k * C + c], &pbias[(size_t)k * C + c], dy, x, mean, rstd,
                          N, C, c, k);
    for (int c = 0; c < C; c++) {
        k_col_finish(dw, pw, chunks, C, c);
        k_col_finish(db, pbias, chunks, C, c);
    }
}
