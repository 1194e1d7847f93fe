/* dev_cpu.c - the CPU's device table: libc, the kernels/ loops, OpenBLAS. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "adamw.h"
#include "cast.h"
#include "dev.h"
#include "gelu.h"
#include "norm.h"

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

static int c_sumsq(const float *x, size_t n, double *out)
{
    *out = k_sumsq(x, n);
    return 0;
}

static int c_adamw(float *p, const float *g, float *m, float *v, size_t n,
                   const k_adamw_hparams *h)
{
    k_adamw_step(p, g, m, v, n, h);
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
    .adamw = c_adamw,
    .gelu = c_gelu,
    .gelu_bwd = c_gelu_bwd,
    .gemm = c_gemm,
    .sync = c_sync,
};
