/* norm.cu - CUDA twins of norm.c, over norm_elem.h, and the device-side sums that keep
 * the loss and the gradient norm on the GPU (no host round trip inside a step). */
#include "launch.h"

extern "C" {
#include "kernels_cuda.h"
#include "norm_elem.h"
}

/* A block's threads' doubles, summed in shared memory by halves: the block's total in
 * thread 0. */
__device__ static double block_sum(double s)
{
    __shared__ double part[K_THREADS];
    part[threadIdx.x] = s;
    __syncthreads();
    for (unsigned half = K_THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half)
            part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    return part[0];
}

/* Block b's part of the sum of squares (its grid-stride share) into parts[b]. */
__global__ static void sumsq_parts(const float *x, size_t n, double *parts)
{
    double s = 0.0;
    K_FOR_EACH(i, n) s += k_sq_elem(x[i]);
    s = block_sum(s);
    if (threadIdx.x == 0)
        parts[blockIdx.x] = s;
}

/* One block: *acc += the sum of x[0..n) (thread t takes t, t + K_THREADS, ...). */
__global__ static void add_sum_kernel(double *acc, const double *x, size_t n)
{
    double s = 0.0;
    for (size_t i = threadIdx.x; i < n; i += K_THREADS)
        s += x[i];
    s = block_sum(s);
    if (threadIdx.x == 0)
        *acc += s;
}

extern "C" int k_cuda_add_sum(double *acc, const double *x, size_t n, void *s)
{
    add_sum_kernel<<<1, K_THREADS, 0, (cudaStream_t)s>>>(acc, x, n);
    return k_launched();
}

extern "C" int k_cuda_sumsq(const float *x, size_t n, double *acc, void *s)
{
    if (!n)
        return 0;
    cudaStream_t st = (cudaStream_t)s;
    unsigned blocks = k_blocks(n);
    double *parts = NULL;
    if (cudaMallocAsync((void **)&parts, blocks * sizeof(double), st) != cudaSuccess) {
        cudaGetLastError();
        return -ENOMEM;
    }
    sumsq_parts<<<blocks, K_THREADS, 0, st>>>(x, n, parts);
    add_sum_kernel<<<1, K_THREADS, 0, st>>>(acc, parts, blocks);
    int rc = k_launched();
    cudaFreeAsync(parts, st);
    return rc;
}

__global__ static void clip_kernel(float *x, size_t n, const double *sumsq, double max_norm)
{
    float coef = k_clip_coef(*sumsq, max_norm);
    if (coef < 1.0f)
        K_FOR_EACH(i, n) x[i] = k_scale_elem(x[i], coef);
}

extern "C" int k_cuda_clip_scale(float *x, size_t n, const double *sumsq, double max_norm,
                                 void *s)
{
    if (n)
        clip_kernel<<<k_blocks(n), K_THREADS, 0, (cudaStream_t)s>>>(x, n, sumsq, max_norm);
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
