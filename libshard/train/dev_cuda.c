/* dev_cuda.c - CUDA's device table: stream-ordered allocations, the CUDA twins and
 * cuBLAS, all on the legacy default stream (NULL), where the NCCL backend orders its
 * collectives. cudaFree would synchronize the device at every reshard; a buffer freed
 * with cudaFreeAsync is reused only by work queued after it, and FSDP frees a
 * collective's buffers only after sh_work_wait has ordered the default stream behind
 * the collective. */
#include <cuda_runtime_api.h>

#include "dev.h"
#include "kernels_cuda.h"

static int ok(cudaError_t e)
{
    if (e == cudaSuccess)
        return 0;
    cudaGetLastError();
    return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

static int g_alloc(void **p, size_t bytes, bool zero)
{
    *p = NULL;
    if (!bytes)
        return 0;
    int rc = ok(cudaMallocAsync(p, bytes, NULL));
    if (!rc && zero)
        rc = ok(cudaMemsetAsync(*p, 0, bytes, NULL));
    return rc;
}

static void g_free(void *p)
{
    if (p)
        cudaFreeAsync(p, NULL);
}

static int g_copy(void *dst, const void *src, size_t bytes)
{
    return bytes ? ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, NULL)) : 0;
}

static int g_zero(void *dst, size_t bytes)
{
    return bytes ? ok(cudaMemsetAsync(dst, 0, bytes, NULL)) : 0;
}

static int g_cast(void *dst, ck_dtype dd, const void *src, ck_dtype sd, size_t n)
{
    if (sd == CK_F32 && dd == CK_BF16)
        return k_cuda_cast_f32_to_bf16(dst, src, n, NULL);
    if (sd == CK_F32 && dd == CK_F16)
        return k_cuda_cast_f32_to_f16(dst, src, n, NULL);
    if (sd == CK_BF16 && dd == CK_F32)
        return k_cuda_cast_bf16_to_f32(dst, src, n, NULL);
    if (sd == CK_F16 && dd == CK_F32)
        return k_cuda_cast_f16_to_f32(dst, src, n, NULL);
    return -EINVAL;
}

static int g_scale(float *x, float s, size_t n) { return k_cuda_scale(x, s, n, NULL); }

static int g_scale_add(float *dst, const float *src, float s, size_t n)
{
    return k_cuda_scale_add(dst, src, s, n, NULL);
}

/* The sum lands in a stream-ordered device double, then the host waits for it. */
static int g_sumsq(const float *x, size_t n, double *out)
{
    double *d = NULL;
    int rc = ok(cudaMallocAsync((void **)&d, sizeof *d, NULL));
    if (rc)
        return rc;
    rc = k_cuda_sumsq(x, n, d, NULL);
    if (!rc)
        rc = ok(cudaMemcpyAsync(out, d, sizeof *d, cudaMemcpyDeviceToHost, NULL));
    cudaFreeAsync(d, NULL);
    if (!rc)
        rc = ok(cudaStreamSynchronize(NULL));
    return rc;
}

static int g_adamw(float *p, const float *g, float *m, float *v, size_t n,
                   const k_adamw_hparams *h)
{
    return k_cuda_adamw_step(p, g, m, v, n, h, NULL);
}

static int g_gelu(float *y, const float *x, size_t n) { return k_cuda_gelu(y, x, n, NULL); }

static int g_gelu_bwd(float *dx, const float *x, const float *dy, size_t n)
{
    return k_cuda_gelu_bwd(dx, x, dy, n, NULL);
}

static int g_gemm(void *blas, ck_dtype in, bool ta, bool tb, int m, int n, int k, float alpha,
                  const void *a, int lda, const void *b, int ldb, float beta, float *c, int ldc)
{
    if (in != CK_F32 && in != CK_BF16)
        return -EINVAL;
    return k_cuda_gemm(blas, NULL, in == CK_F32 ? K_GEMM_F32 : K_GEMM_BF16, ta, tb, m, n, k,
                       alpha, a, lda, b, ldb, beta, c, ldc);
}

static int g_sync(void) { return ok(cudaStreamSynchronize(NULL)); }

static const sh_dev_ops dev_cuda = {
    .device = SH_CUDA,
    .name = "CUDA",
    .alloc = g_alloc,
    .free = g_free,
    .copy = g_copy,
    .zero = g_zero,
    .mem = &k_cuda_default_mem,
    .cast = g_cast,
    .scale = g_scale,
    .scale_add = g_scale_add,
    .sumsq = g_sumsq,
    .adamw = g_adamw,
    .gelu = g_gelu,
    .gelu_bwd = g_gelu_bwd,
    .gemm = g_gemm,
    .sync = g_sync,
};

const sh_dev_ops *sh_dev_for(sh_device d)
{
    return d == SH_CPU ? &sh_dev_cpu : d == SH_CUDA ? &dev_cuda : NULL;
}
