/* bias.cu - CUDA twins of bias.c, over bias_elem.h. */
#include "launch.h"

extern "C" {
#include "bias_elem.h"
#include "kernels_cuda.h"
}

__global__ static void bias_add_kernel(float *y, const float *b, size_t n, int O)
{
    K_FOR_EACH(i, n) y[i] = k_bias_add_elem(y[i], b, i, O);
}

__global__ static void bias_grad_kernel(float *db, const float *dy, int N, int O)
{
    K_FOR_EACH(o, (size_t)O) k_bias_grad_col(db, dy, N, O, (int)o);
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
    if (N > 0 && O > 0)
        bias_grad_kernel<<<k_blocks((size_t)O), K_THREADS, 0, (cudaStream_t)s>>>(db, dy, N, O);
    return k_launched();
}
