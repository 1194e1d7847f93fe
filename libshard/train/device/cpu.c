/* device/cpu.c - the CPU's device table: libc, the kernels/ loops, OpenBLAS. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "adamw.h"
#include "bias.h"
#include "cast.h"
#include "device/device.h"
#include "embed.h"
#include "gelu.h"
#include "layernorm.h"
#include "norm.h"
#include "norm_elem.h"
#include "softmax.h"
#include "xent.h"

static int c_alloc(void **p, size_t bytes, bool zero)
{
    *p = zero ? calloc(1, bytes) : malloc(bytes);
    return *p || !bytes ? 0 : -ENOMEM;
}

static int c_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes)
        memcpy(dst, src, bytes);
    return 0;
}

static int c_zero(void *dst, size_t bytes)
{
    if (bytes)
        memset(dst, 0, bytes);
    return 0;
}

static int c_cast(void *dst, ck_dtype dd, const void *src, ck_dtype sd, size_t n)
{
    if (sd == CK_F32 && dd == CK_BF16)
        k_cast_f32_to_bf16(dst, src, n);
    else if (sd == CK_F32 && dd == CK_F16)
        k_cast_f32_to_f16(dst, src, n);
    else if (sd == CK_BF16 && dd == CK_F32)
        k_cast_bf16_to_f32(dst, src, n);
    else if (sd == CK_F16 && dd == CK_F32)
        k_cast_f16_to_f32(dst, src, n);
    else
        return -EINVAL;
    return 0;
}

static int c_scale(float *x, float s, size_t n)
{
    k_scale(x, s, n);
    return 0;
}

static int c_scale_add(float *dst, const float *src, float s, size_t n)
{
    k_scale_add(dst, src, s, n);
    return 0;
}

static int c_sumsq(const float *x, size_t n, double *acc)
{
    *acc += k_sumsq(x, n);
    return 0;
}

static int c_clip_scale(float *x, size_t n, const double *sumsq, double max_norm)
{
    float coef = k_clip_coef(*sumsq, max_norm);
    if (coef < 1.0f)
        k_scale(x, coef, n);
    return 0;
}

static int c_adamw(const k_adamw_tensor *t, int nt, const k_adamw_hparams *h)
{
    k_adamw_multi(t, nt, h);
    return 0;
}

static int c_gelu(float *y, const float *x, size_t n)
{
    k_gelu(y, x, n);
    return 0;
}

static int c_gelu_bwd(float *dx, const float *x, const float *dy, size_t n)
{
    k_gelu_bwd(dx, x, dy, n);
    return 0;
}

/* bf16 operands are widened to f32 first: OpenBLAS's sgemm then accumulates in f32,
 * as cuBLAS does on the device. */
static int c_gemm(void *blas, ck_dtype in, bool ta, bool tb, int m, int n, int k, float alpha,
                  const void *a, int lda, const void *b, int ldb, float beta, float *c, int ldc)
{
    (void)blas;
    float *wa = NULL, *wb = NULL;
    if (in == CK_BF16) {
        size_t na = (size_t)(ta ? k : m) * (size_t)lda, nb = (size_t)(tb ? n : k) * (size_t)ldb;
        wa = malloc(na * sizeof(float) + 1);
        wb = malloc(nb * sizeof(float) + 1);
        if (!wa || !wb) {
            free(wa);
            free(wb);
            return -ENOMEM;
        }
        k_cast_bf16_to_f32(wa, a, na);
        k_cast_bf16_to_f32(wb, b, nb);
        a = wa;
        b = wb;
    } else if (in != CK_F32) {
        return -EINVAL;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    free(wa);
    free(wb);
    return 0;
}

static int c_layernorm(float *y, float *mean, float *rstd, const float *x, const float *w,
                       const float *b, int N, int C)
{
    k_layernorm(y, mean, rstd, x, w, b, N, C);
    return 0;
}

static int c_residual_layernorm(float *x2, float *y, float *mean, float *rstd, const float *x,
                                const float *w, const float *b, int N, int C)
{
    k_scale_add(x2, x, 1.0f, (size_t)N * (size_t)C);
    k_layernorm(y, mean, rstd, x2, w, b, N, C);
    return 0;
}

static int c_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x,
                           const float *mean, const float *rstd, const float *w, int N, int C)
{
    k_layernorm_bwd(dx, dw, db, dy, x, mean, rstd, w, N, C);
    return 0;
}

static int c_softmax_causal(float *a, size_t rows, int T)
{
    k_softmax_causal(a, rows, T);
    return 0;
}

static int c_softmax_causal_bwd(float *dp, const float *a, size_t rows, int T, float scale)
{
    k_softmax_causal_bwd(dp, a, rows, T, scale);
    return 0;
}

static int c_embed(float *out, const int *tok, const float *wte, const float *wpe, int N,
                   int T, int C)
{
    k_embed(out, tok, wte, wpe, N, T, C);
    return 0;
}

static int c_embed_bwd(float *dwte, float *dwpe, const float *dout, const int *tok, int N,
                       int T, int C, int V)
{
    (void)V;
    k_embed_bwd(dwte, dwpe, dout, tok, N, T, C);
    return 0;
}

static int c_xent(float *dlogits, const float *logits, const int *targets, int N, int V,
                  float scale, double *loss)
{
    double *rows = malloc(sizeof(double) * (size_t)N + 1);
    if (!rows)
        return -ENOMEM;
    k_xent(dlogits, rows, logits, targets, N, V, scale);
    double sum = 0.0;
    for (int n = 0; n < N; n++)
        sum += rows[n];
    *loss += sum;
    free(rows);
    return 0;
}

static int c_bias_add(float *y, const float *b, int N, int O)
{
    k_bias_add(y, b, N, O);
    return 0;
}

static int c_bias_grad(float *db, const float *dy, int N, int O)
{
    k_bias_grad(db, dy, N, O);
    return 0;
}

static int c_sync(void) { return 0; }

const sh_dev_ops sh_dev_cpu = {
    .device = SH_CPU,
    .name = "CPU",
    .alloc = c_alloc,
    .free = free,
    .copy = c_copy,
    .zero = c_zero,
    .mem = &k_host_mem,
    .cast = c_cast,
    .scale = c_scale,
    .scale_add = c_scale_add,
    .sumsq = c_sumsq,
    .clip_scale = c_clip_scale,
    .adamw = c_adamw,
    .gelu = c_gelu,
    .gelu_bwd = c_gelu_bwd,
    .gemm = c_gemm,
    .layernorm = c_layernorm,
    .residual_layernorm = c_residual_layernorm,
    .layernorm_bwd = c_layernorm_bwd,
    .softmax_causal = c_softmax_causal,
    .softmax_causal_bwd = c_softmax_causal_bwd,
    .embed = c_embed,
    .embed_bwd = c_embed_bwd,
    .xent = c_xent,
    .bias_add = c_bias_add,
    .bias_grad = c_bias_grad,
    .sync = c_sync,
};
