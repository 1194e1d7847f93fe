/* mem.cu - the k_mem of device memory: asynchronous copies and zeroing on a stream,
 * so flat.c's copy-in, copy-out and chunk-cat loops move device buffers. */
#include "launch.h"

extern "C" {
#include "kernels_cuda.h"
}

static int dev_copy(void *ctx, void *dst, const void *src, size_t n)
{
    /* Default: the unified address space tells host from device, so the same
     * loops serve copies between pinned host and device memory. */
    return cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, (cudaStream_t)ctx) == cudaSuccess
               ? 0 : -EIO;
}

static int dev_zero(void *ctx, void *dst, size_t n)
{
    return cudaMemsetAsync(dst, 0, n, (cudaStream_t)ctx) == cudaSuccess ? 0 : -EIO;
}

extern "C" const k_mem k_cuda_default_mem = {dev_copy, dev_zero, NULL};

extern "C" k_mem k_cuda_mem(void *stream)
{
    k_mem m = {dev_copy, dev_zero, stream};
    return m;
}
