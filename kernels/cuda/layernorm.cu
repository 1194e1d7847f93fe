/* layernorm.cu - CUDA twins of layernorm.c, over layernorm_elem.h: one thread per row
 * (forward, dx) and one per column (dw, db), each summing in the CPU's order. */
#include "launch.h"

extern "C" {
#include "kernels_cuda.h"
#include "layernorm_elem.h"
}

__global__ static void ln_kernel(float *y, float *mean, float *rstd, const float *x,
                                 const float *w, const float *b, int N, int C)
{
    K_FOR_EACH(n, (size_t)N)
        k_layernorm_row(y + n * C, &mean[n], &rstd[n], x + n * C, w, b, C);
}

__global__ static void ln_bwd_rows(float *dx, const float *dy, const float *x,
                                   const float *mean, const float *rstd, const float *w,
                                   int N, int C)
{
    K_FOR_EACH(n, (size_t)N)
        k_layernorm_bwd_row(dx + n * C, dy + n * C, x + n * C, mean[n], rstd[n], w, C);
}

__global__ static void ln_bwd_cols(float *dw, float *db, const float *dy, const float *x,
                                   const float *mean, const float *rstd, int N, int C)
{
    K_FOR_EACH(c, (size_t)C) k_layernorm_bwd_col(dw, db, dy, x, mean, rstd, N, C, (int)c);
}

extern "C" int k_cuda_layernorm(float *y, float *mean, float *rstd, const float *x,
                                const float *w, const float *b, int N, int C, void *s)
{
    if (N > 0 && C > 0)
        ln_kernel<<<k_blocks((size_t)N), K_THREADS, 0, (cudaStream_t)s>>>(y, mean, rstd, x,
                                                                            w, b, N, C);
    return k_launched();
}

extern "C" int k_cuda_layernorm_bwd(float *dx, float *dw, float *db, const float *dy,
                                    const float *x, const float *mean, const float *rstd,
                                    const float *w, int N, int C, void *s)
{
    if (N > 0 && C > 0) {
        ln_bwd_rows<<<k_blocks((size_t)N), K_THREADS, 0, (cudaStream_t)s>>>(dx, dy, x, mean,
                                                                              rstd, w, N, C);
        ln_bwd_cols<<<k_blocks((size_t)C), K_THREADS, 0, (cudaStream_t)s>>>(dw, db, dy, x,
                                                                              mean, rstd, N, C);
    }
    return k_launched();
}
