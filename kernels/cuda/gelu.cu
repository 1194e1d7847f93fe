/* gelu.cu - CUDA twins of gelu.c, over gelu_elem.h. tanhf is the device's, so the
 * results may differ from the CPU's libm by an ulp or two (test_cuda.c measures it). */
#include "launch.h"

extern "C" {
#include "gelu_elem.h"
#include "kernels_cuda.h"
}

__global__ static void gelu_kernel(float *y, const float *x, size_t n)
{
    K_FOR_EACH(i, n) y[i] = k_gelu_elem(x[i]);
}

__global__ static void gelu_bwd_kernel(float *dx, const float *x, const float *dy, size_t n)
{
    K_FOR_EACH(i, n) dx[i] = k_gelu_bwd_elem(x[i], dy[i]);
}

extern "C" int k_cuda_gelu(float *y, const float *x, size_t n, void *s)
{
    if (n)
        gelu_kernel<<<k_blocks(n), K_THREADS, 0, (cudaStream_t)s>>>(y, x, n);
    return k_launched();
}

extern "C" int k_cuda_gelu_bwd(float *dx, const float *x, const float *dy, size_t n, void *s)
{
    if (n)
        gelu_bwd_kernel<<<k_blocks(n), K_THREADS, 0, (cudaStream_t)s>>>(dx, x, dy, n);
    return k_launched();
}
