/* bias.cu - CUDA twins of bias.c: the add over bias_elem.h, the gradient as chunked
 * column sums (colsum_tile.h; bias.c's k_bias_grad_tiled replays it bit for bit). */
#include "launch.h"

extern "C" {
#include "bias_elem.h"
#include "colsum_tile.h"
#include "kernels_cuda.h"
}

__global__ static void bias_add_kernel(float *y, const float *b, size_t n, int O)
{
    K_FOR_EACH(i, n) y[i] = k_bias_add_elem(y[i], b, i, O);
}

/* Thread (chunk = blockIdx.y, column). */
__global__ static void bias_parts(float *part, const float *dy, int N, int O)
{
    int o = blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y;
    if (o < O)
        part[(size_t)k * O + o] = k_col_part(dy, N, O, o, k);
}

__global__ static void bias_finish(float *db, const float *part, int chunks, int O)
{
    K_FOR_EACH(o, (size_t)O) k_col_finish(db, part, chunks, O, (int)o);
}

extern "C" int k_cuda_bias_add(float *y, const float *b, int N, int O, void *s)
{
    size_t n = (size_t)N * (size_t)O;
    if (n)
        bias_add_kernel<<<k_blocks(n), K_THREADS, 0, (cudaStream_t)s>>>(y, b, n, O);
    return k_launched();
}

extern "C" int k_cuda_bias_grad(float *db, const float *dy, int N, int O, void *s)
{
    if (N <= 0 || O <= 0)
        return 0;
    cudaStream_t st = (cudaStream_t)s;
    int chunks = k_col_chunks(N);
    float *part = NULL;
    size_t bytes = (size_t)chunks * O * sizeof(float);
    if (cudaMallocAsync((void **)&part, bytes, st) != cudaSuccess) {
        cudaGetLastError();
        return -ENOMEM;
    }
    dim3 grid((unsigned)((O + K_THREADS - 1) / K_THREADS), (unsigned)chunks);
    bias_parts<<<grid, K_THREADS, 0, st>>>(part, dy, N, O);
    bias_finish<<<k_blocks((size_t)O), K_THREADS, 0, st>>>(db, part, chunks, O);
    int rc = k_launched();
    cudaFreeAsync(part, st);
    return rc;
}
