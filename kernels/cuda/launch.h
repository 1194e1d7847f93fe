/* launch.h - the grid shape and error convention shared by the CUDA twins. */
#ifndef KERNELS_CUDA_LAUNCH_H
#define KERNELS_CUDA_LAUNCH_H

#include <cuda_runtime.h>
#include <errno.h>

/* Grid-stride loops over a bounded grid: any n, no grid-size limit to hit. */
#define K_THREADS 256
#define K_FOR_EACH(i, n)                                                               \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);            \
         i += (size_t)gridDim.x * blockDim.x)

static inline unsigned k_blocks(size_t n)
{
    size_t b = (n + K_THREADS - 1) / K_THREADS;
    return (unsigned)(b < 4096 ? (b ? b : 1) : 4096);
}

static inline int k_launched(void)
{
    return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}

#endif
