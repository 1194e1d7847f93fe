/* norm.cu - CUDA twins of norm.c, over norm_elem.h. */
#include "launch.h"

extern "C" {
#include "kernels_cuda.h"
#include "norm_elem.h"
}

/* Each block reduces its grid-stride share in shared memory, then adds one double
 * atomically (sm_60+). */
__global__ static void sumsq_kernel(const float *x, size_t n, double *out)
{
    __shared__ double part[K_THREADS];
    double s = 0.0;
    K_FOR_EACH(i, n) s += k_sq_elem(x[i]);
    part[threadIdx.x] = s;
    __syncthreads();
    for (unsigned half = K_THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half)
            part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicAdd(out, part[0]);
}

extern "C" int k_cuda_sumsq(const float *x, size_t n, double *out, void *s)
{
    if (cudaMemsetAsync(out, 0, sizeof *out, (cudaStream_t)s) != cudaSuccess)
        return -EIO;
    if (n)
        sumsq_kernel<<<k_blocks(n), K_THREADS, 0, (cudaStream_t)s>>>(x, n, out);
    return k_launched();
}

__global__ static void scale_kernel(float *x, float sc, size_t n)
{
    K_FOR_EACH(i, n) x[i] = k_scale_elem(x[i], sc);
}

extern "C" int k_cuda_scale(float *x, float sc, size_t n, void *s)
{
    if (n)
        scale_kernel<<<k_blocks(n), K_THREADS, 0, (cudaStream_t)s>>>(x, sc, n);
    return k_launched();
}

__global__ static void scale_add_kernel(float *dst, const float *src, float sc, size_t n)
{
    K_FOR_EACH(i, n) dst[i] = k_scale_add_elem(dst[i], src[i], sc);
}

extern "C" int k_cuda_scale_add(float *dst, const float *src, float sc, size_t n, void *s)
{
    if (n)
        scale_add_kernel<<<k_blocks(n), K_THREADS, 0, (cudaStream_t)s>>>(dst, src, sc, n);
    return k_launched();
}
