/* device/device.h - where the library's memory lives and how its kernels run there.
 *
 * One table per device: the CPU's (libc, kernels/ loops, OpenBLAS) and, in a CUDA
 * build, CUDA's (cudaMalloc, the CUDA twins and cuBLAS on the legacy default stream,
 * where the NCCL backend orders its collectives). FSDP, the optimizer, tensors and
 * the public ops (sh/ops.h) call through the table of the world's device, so the
 * same code runs on both. Functions return 0 or a negative errno; messages are the
 * caller's to write. The box knows no world: world/world.h's sh_dev(w) picks the
 * world's table.
 */
#ifndef SH_DEVICE_DEVICE_H
#define SH_DEVICE_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "adamw_elem.h"
#include "ck/error.h"
#include "ck/types.h"
#include "flat.h"
#include "sh/tensor.h"

typedef struct sh_dev_ops {
    sh_device device;
    const char *name;                         /* "CPU", "CUDA" */
    int (*alloc)(void **p, size_t bytes, bool zero);
    void (*free)(void *p);
    /* Between any two of this device's and host memory (host to device included). */
    int (*copy)(void *dst, const void *src, size_t bytes);
    int (*zero)(void *dst, size_t bytes);
    const k_mem *mem;                         /* for flat.h's loops */
    /* Only f32 <-> bf16/f16 (tensor.c checks the pair). */
    int (*cast)(void *dst, ck_dtype dd, const void *src, ck_dtype sd, size_t n);
    int (*scale)(float *x, float s, size_t n);
    int (*scale_add)(float *dst, const float *src, float s, size_t n);
    /* *acc (this device's memory, one double) += sum of x[i]^2; nothing waits. */
    int (*sumsq)(const float *x, size_t n, double *acc);
    /* x *= k_clip_coef(*sumsq, max_norm) when that is below 1 (*sumsq on the device). */
    int (*clip_scale)(float *x, size_t n, const double *sumsq, double max_norm);
    /* AdamW over every tensor of t (kernels/adamw.h's k_adamw_multi): one call for
     * the whole optimizer step. */
    int (*adamw)(const k_adamw_tensor *t, int nt, const k_adamw_hparams *h);
    int (*gelu)(float *y, const float *x, size_t n);
    int (*gelu_bwd)(float *dx, const float *x, const float *dy, size_t n);
    /* Row-major, A and B f32 or bf16 (in), C f32; blas: the world's handle. */
    int (*gemm)(void *blas, ck_dtype in, bool ta, bool tb, int m, int n, int k, float alpha,
                const void *a, int lda, const void *b, int ldb, float beta, float *c,
                int ldc);
    /* The GPT's layers: kernels/layernorm.h, softmax.h, embed.h, bias.h, and xent.h,
     * whose per-row losses are summed (the CPU: in row order; CUDA: a fixed tree) and
     * added to *loss, a double of this device's memory: nothing waits. */
    int (*layernorm)(float *y, float *mean, float *rstd, const float *x, const float *w,
                     const float *b, int N, int C);
    /* x2 += x, then y = layernorm(x2) (the CPU: k_scale_add, then k_layernorm). */
    int (*residual_layernorm)(float *x2, float *y, float *mean, float *rstd, const float *x,
                              const float *w, const float *b, int N, int C);
    int (*layernorm_bwd)(float *dx, float *dw, float *db, const float *dy, const float *x,
                         const float *mean, const float *rstd, const float *w, int N, int C);
    int (*softmax_causal)(float *a, size_t rows, int T);
    int (*softmax_causal_bwd)(float *dp, const float *a, size_t rows, int T, float scale);
    int (*embed)(float *out, const int *tok, const float *wte, const float *wpe, int N, int T,
                 int C);
    int (*embed_bwd)(float *dwte, float *dwpe, const float *dout, const int *tok, int N, int T,
                     int C, int V);
    int (*xent)(float *dlogits, const float *logits, const int *targets, int N, int V,
                float scale, double *loss);
    /* Fused causal self-attention (sh_attention: lse[B*H*T] saved, D[B*H*T] scratch),
     * for heads up to K_ATTN_HS_MAX columns; NULL where the device has none (then
     * compute/attention.c composes it from gemm and the causal softmax). */
    int (*attention)(float *out, float *lse, const float *qkv, int B, int T, int C, int H);
    int (*attention_bwd)(float *dqkv, float *D, const float *dout, const float *qkv,
                         const float *out, const float *lse, int B, int T, int C, int H);
    int (*bias_add)(float *y, const float *b, int N, int O);
    int (*bias_grad)(float *db, const float *dy, int N, int O);
    int (*sync)(void);   /* the host waits for queued work: only through host_wait */
} sh_dev_ops;

extern const sh_dev_ops sh_dev_cpu;

/* The table of a device: NULL for META, and for CUDA in a build without it. */
const sh_dev_ops *sh_dev_for(sh_device d);

/* Pinned host memory, which the device reaches directly (cuda.c; -ENOTSUP without
 * CUDA). */
int sh_pinned_alloc(void **p, size_t bytes, bool zero);
void sh_pinned_free(void *p);

/* dst[i] = src[i] converted, on d (the dtype pair checked, equal dtypes copied). */
int sh_dev_cast(const sh_dev_ops *d, void *dst, ck_dtype dst_dtype, const void *src,
                ck_dtype src_dtype, size_t n, ck_err *err);

#endif
