/* device/cuda.c - CUDA's device table: stream-ordered allocations, the CUDA twins and
 * cuBLAS, all on the legacy default stream (NULL), where the NCCL backend orders its
 * collectives. cudaFree would synchronize the device at every reshard; a buffer freed
 * with cudaFreeAsync is reused only by work queued after it, and FSDP frees a
 * collective's buffers only after sh_work_wait has ordered the default stream behind
 * the collective. Also the pinned host memory of CPU offload and of save staging. */
#include <cuda_runtime_api.h>
#include <string.h>

#include "device/device.h"
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

static int g_sumsq(const float *x, size_t n, double *acc)
{
    return k_cuda_sumsq(x, n, acc, NULL);
}

static int g_clip_scale(float *x, size_t n, const double *sumsq, double max_norm)
{
    return k_cuda_clip_scale(x, n, sumsq, max_norm, NULL);
}

static int g_adamw(const k_adamw_tensor *t, int nt, const k_adamw_hparams *h)
{
    return k_cuda_adamw_multi(t, nt, h, NULL);
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

static int g_layernorm(float *y, float *mean, float *rstd, const float *x, const float *w,
                       const float *b, int N, int C)
{
    return k_cuda_layernorm(y, mean, rstd, x, w, b, N, C, NULL);
}

static int g_residual_layernorm(float *x2, float *y, float *mean, float *rstd, const float *x,
                                const float *w, const float *b, int N, int C)
{
    return k_cuda_residual_layernorm(x2, y, mean, rstd, x, w, b, N, C, NULL);
}

static int g_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x,
                           const float *mean, const float *rstd, const float *w, int N, int C)
{
    return k_cuda_layernorm_bwd(dx, dw, db, dy, x, mean, rstd, w, N, C, NULL);
}

static int g_softmax_causal(float *a, size_t rows, int T)
{
    return k_cuda_softmax_causal(a, rows, T, NULL);
}

static int g_softmax_causal_bwd(float *dp, const float *a, size_t rows, int T, float scale)
{
    return k_cuda_softmax_causal_bwd(dp, a, rows, T, scale, NULL);
}

static int g_embed(float *out, const int *tok, const float *wte, const float *wpe, int N,
                   int T, int C)
{
    return k_cuda_embed(out, tok, wte, wpe, N, T, C, NULL);
}

static int g_embed_bwd(float *dwte, float *dwpe, const float *dout, const int *tok, int N,
                       int T, int C, int V)
{
    return k_cuda_embed_bwd(dwte, dwpe, dout, tok, N, T, C, V, NULL);
}

/* The rows' losses stay on the device and are added to *loss there (a fixed tree
 * instead of the CPU's row order: they differ in the last bits of the double). */
static int g_xent(float *dlogits, const float *logits, const int *targets, int N, int V,
                  float scale, double *loss)
{
    if (N <= 0)
        return 0;
    double *rows = NULL;
    int rc = ok(cudaMallocAsync((void **)&rows, sizeof(double) * (size_t)N, NULL));
    if (!rc)
        rc = k_cuda_xent(dlogits, rows, logits, targets, N, V, scale, NULL);
    if (!rc)
        rc = k_cuda_add_sum(loss, rows, (size_t)N, NULL);
    if (rows)
        cudaFreeAsync(rows, NULL);
    return rc;
}

static int g_attention(float *out, float *lse, const float *qkv, int B, int T, int C, int H)
{
    return k_cuda_attention_fwd(out, lse, qkv, B, T, C, H, NULL);
}

static int g_attention_bwd(float *dqkv, float *D, const float *dout, const float *qkv,
                           const float *out, const float *lse, int B, int T, int C, int H)
{
    return k_cuda_attention_bwd(dqkv, D, dout, qkv, out, lse, B, T, C, H, NULL);
}

static int g_bias_add(float *y, const float *b, int N, int O)
{
    return k_cuda_bias_add(y, b, N, O, NULL);
}

static int g_bias_grad(float *db, const float *dy, int N, int O)
{
    return k_cuda_bias_grad(db, dy, N, O, NULL);
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
    .clip_scale = g_clip_scale,
    .adamw = g_adamw,
    .gelu = g_gelu,
    .gelu_bwd = g_gelu_bwd,
    .gemm = g_gemm,
    .layernorm = g_layernorm,
    .residual_layernorm = g_residual_layernorm,
    .layernorm_bwd = g_layernorm_bwd,
    .softmax_causal = g_softmax_causal,
    .softmax_causal_bwd = g_softmax_causal_bwd,
    .embed = g_embed,
    .embed_bwd = g_embed_bwd,
    .xent = g_xent,
    .attention = g_attention,
    .attention_bwd = g_attention_bwd,
    .bias_add = g_bias_add,
    .bias_grad = g_bias_grad,
    .sync = g_sync,
};

const sh_dev_ops *sh_dev_for(sh_device d)
{
    return d == SH_CPU ? &sh_dev_cpu : d == SH_CUDA ? &dev_cuda : NULL;
}

int sh_pinned_alloc(void **p, size_t bytes, bool zero)
{
    /* Under unified addressing pinned memory is mapped: kernels read and write it in
     * place, so offloaded state needs no copies around the optimizer step. */
    if (cudaHostAlloc(p, bytes, cudaHostAllocDefault) != cudaSuccess) {
        cudaGetLastError();
        *p = NULL;
        return -ENOMEM;
    }
    if (zero)
        memset(*p, 0, bytes);
    return 0;
}

void sh_pinned_free(void *p)
{
    cudaFreeHost(p);
}
