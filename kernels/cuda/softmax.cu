/* softmax.cu - CUDA twins of softmax.c, over softmax_elem.h: one thread per row. */
#include "launch.h"

extern "C" {
#include "kernels_cuda.h"
#include "softmax_elem.h"
}

__global__ static void softmax_kernel(float *a, size_t rows, int T)
{
    K_FOR_EACH(r, rows) k_softmax_causal_row(a + r * T, (int)(r % (size_t)T), T);
}

__global__ static void softmax_bwd_kernel(float *dp, const float *a, size_t rows, int T,
                                          float scale)
{
    K_FOR_EACH(r, rows)
        k_softmax_causal_bwd_row(dp + r * T, a + r * T, (int)(r % (size_t)T), T, scale);
}

extern "C" int k_cuda_softmax_causal(float *a, size_t rows, int T, void *s)
{
    if (rows && T > 0)
        softmax_kernel<<<k_blocks(rows), K_THREADS, 0, (cudaStream_t)s>>>(a, rows, T);
    return k_launched();
}

extern "C" int k_cuda_softmax_causal_bwd(float *dp, const float *a, size_t rows, int T,
                                         float scale, void *s)
{
    if (rows && T > 0)
        softmax_bwd_kernel<<<k_blocks(rows), K_THREADS, 0, (cudaStream_t)s>>>(dp, a, rows, T,
                                                                                scale);
    return k_launched();
}
