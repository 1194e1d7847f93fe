/* layernorm.cu - LayerNorm on the GPU over layernorm_tile.h: a warp per row (lanes over
 * the columns, the row's sums combined by the warp's butterfly), and dw, db as
 * chunked column sums (colsum_tile.h). layernorm.c's *_tiled functions replay these
 * bit for bit. The residual form adds the skip connection into x2 and normalizes it
 * in the same pass over the row. */
#include "launch.h"

extern "C" {
#include "kernels_cuda.h"
#include "layernorm_tile.h"
}

/* Rows of this warp: its global index, then grid-stride. */
#define WARPS_PER_BLOCK (K_THREADS / 32)
#define FOR_EACH_ROW(n, N)                                                             \
    for (size_t n = blockIdx.x * (size_t)WARPS_PER_BLOCK + threadIdx.x / 32; n < (size_t)(N); \
         n += (size_t)gridDim.x * WARPS_PER_BLOCK)

static inline unsigned row_blocks(int N)
{
    size_t b = ((size_t)N + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK;
    return (unsigned)(b < 8192 ? (b ? b : 1) : 8192);
}

__device__ __forceinline__ float warp_sum(float x)
{
#pragma unroll
    for (int w = 1; w < 32; w *= 2)
        x = x + __shfl_xor_sync(0xffffffffu, x, w);
    return x;
}

/* One row: x2 += x first when x is given (the residual form), then y = layernorm(x2). */
__device__ __forceinline__ void ln_row(float *y, float *mean, float *rstd, float *x2,
                                       const float *x, const float *w, const float *b, int C)
{
    int lane = threadIdx.x % 32;
    if (x)
        k_ln_lane_residual(x2, x, C, lane);   /* a lane reads back only its own columns */
    float m = k_ln_mean(warp_sum(k_ln_lane_sum(x2, C, lane)), C);
    float s = k_ln_rstd(warp_sum(k_ln_lane_sqdev(x2, m, C, lane)), C);
    k_ln_lane_out(y, x2, m, s, w, b, C, lane);
    if (lane == 0) {
        *mean = m;
        *rstd = s;
    }
}

/* x == NULL: y = layernorm(x2) (x2 read only); else x2 += x, y = layernorm(x2). */
__global__ static void ln_kernel(float *y, float *mean, float *rstd, float *x2, const float *x,
                                 const float *w, const float *b, int N, int C)
{
    FOR_EACH_ROW(n, N)
        ln_row(y + n * C, &mean[n], &rstd[n], x2 + n * C, x ? x + n * C : NULL, w, b, C);
}

__global__ static void ln_bwd_rows(float *dx, const float *dy, const float *x,
                                   const float *mean, const float *rstd, const float *w,
                                   int N, int C)
{
    int lane = threadIdx.x % 32;
    FOR_EACH_ROW(n, N) {
        size_t o = n * C;
        float a, b;
        k_ln_lane_bwd_sums(&a, &b, dy + o, x + o, mean[n], rstd[n], w, C, lane);
        float gm = warp_sum(a) / (float)C, gxm = warp_sum(b) / (float)C;
        k_ln_lane_dx(dx + o, dy + o, x + o, mean[n], rstd[n], w, gm, gxm, C, lane);
    }
}

/* Thread (chunk = blockIdx.y, column): that chunk's parts of dw and db. */
__global__ static void ln_col_parts(float *pw, float *pb, const float *dy, const float *x,
                                    const float *mean, const float *rstd, int N, int C)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y;
    if (c < C)
        k_ln_col_part(&pw[(size_t)k * C + c], &pb[(size_t)k * C + c], dy, x, mean, rstd, N, C,
                      c, k);
}

__global__ static void ln_col_finish(float *dw, float *db, const float *pw, const float *pb,
                                     int chunks, int C)
{
    K_FOR_EACH(c, (size_t)C) {
        k_col_finish(dw, pw, chunks, C, (int)c);
        k_col_finish(db, pb, chunks, C, (int)c);
    }
}

extern "C" int k_cuda_layernorm(float *y, float *mean, float *rstd, const float *x,
                                const float *w, const float *b, int N, int C, void *s)
{
    if (N > 0 && C > 0)
        ln_kernel<<<row_blocks(N), K_THREADS, 0, (cudaStream_t)s>>>(
            y, mean, rstd, (float *)x, NULL, w, b, N, C);
    return k_launched();
}

extern "C" int k_cuda_residual_layernorm(float *x2, float *y, float *mean, float *rstd,
                                         const float *x, const float *w, const float *b, int N,
                                         int C, void *s)
{
    if (N > 0 && C > 0)
        ln_kernel<<<row_blocks(N), K_THREADS, 0, (cudaStream_t)s>>>(y, mean, rstd, x2, x, w, b,
                                                                     N, C);
    return k_launched();
}

extern "C" int k_cuda_layernorm_bwd(float *dx, float *dw, float *db, const float *dy,
                                    const float *x, const float *mean, const float *rstd,
                                    const float *w, int N, int C, void *s)
{
    if (N <= 0 || C <= 0)
        return 0;
    cudaStream_t st = (cudaStream_t)s;
    int chunks = k_col_chunks(N);
    float *part = NULL;
    /* Stream-ordered scratch: the pool hands the same bytes back every step. */
    if (cudaMallocAsync((void **)&part, 2 * (size_t)chunks * C * sizeof(float), st) !=
        cudaSuccess) {
        cudaGetLastError();
        return -ENOMEM;
    }
    ln_bwd_rows<<<row_blocks(N), K_THREADS, 0, st>>>(dx, dy, x, mean, rstd, w, N, C);
    dim3 grid((unsigned)((C + K_THREADS - 1) / K_THREADS), (unsigned)chunks);
    ln_col_parts<<<grid, K_THREADS, 0, st>>>(part, part + (size_t)chunks * C, dy, x, mean, rstd,
                                             N, C);
    ln_col_finish<<<k_blocks((size_t)C), K_THREADS, 0, st>>>(
        dw, db, part, part + (size_t)chunks * C, chunks, C);
    int rc = k_launched();
    cudaFreeAsync(part, st);
    return rc;
}
