/* kernels_cuda.h - the CUDA twins of the CPU loops (built when nvcc is found).
 *
 * Each kernel calls the same *_elem.h function as its CPU loop; the .cu files are
 * compiled with --fmad=false so no multiply-add is fused behind the source's back, and
 * the CPU and GPU results are bitwise equal (the sum of squares excepted: its
 * summation order differs). Pointers are device pointers; `stream` is a cudaStream_t
 * (NULL: the default stream). Launches are asynchronous; functions return 0 or -EIO
 * when the launch failed.
 */
#ifndef KERNELS_CUDA_H
#define KERNELS_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "adamw_elem.h"
#include "flat.h"

#ifdef __cplusplus
extern "C" {
#endif

int k_cuda_cast_f32_to_bf16(uint16_t *dst, const float *src, size_t n, void *stream);
int k_cuda_cast_bf16_to_f32(float *dst, const uint16_t *src, size_t n, void *stream);
int k_cuda_cast_f32_to_f16(uint16_t *dst, const float *src, size_t n, void *stream);
int k_cuda_cast_f16_to_f32(float *dst, const uint16_t *src, size_t n, void *stream);

/* AdamW over every tensor of t[0..nt) (adamw.h's k_adamw_multi), a few launches for
 * any number of tensors; t itself is host memory, read before this returns. */
int k_cuda_adamw_multi(const k_adamw_tensor *t, int nt, const k_adamw_hparams *h,
                       void *stream);

/* *acc (device, one double) += the sum of squares of x, in a fixed order (per block,
 * then the blocks' parts by k_cuda_add_sum): deterministic, no host wait. */
int k_cuda_sumsq(const float *x, size_t n, double *acc, void *stream);
/* *acc (device) += x[0] + ... + x[n-1] (device doubles), in a fixed tree order. */
int k_cuda_add_sum(double *acc, const double *x, size_t n, void *stream);
/* x *= k_clip_coef(*sumsq, max_norm) when that is below 1 (sumsq: device). */
int k_cuda_clip_scale(float *x, size_t n, const double *sumsq, double max_norm, void *stream);
int k_cuda_scale(float *x, float s, size_t n, void *stream);
int k_cuda_scale_add(float *dst, const float *src, float s, size_t n, void *stream);

/* GELU forward and backward (gelu_elem.h; tanhf is the device's: not bitwise). */
int k_cuda_gelu(float *y, const float *x, size_t n, void *stream);
int k_cuda_gelu_bwd(float *dx, const float *x, const float *dy, size_t n, void *stream);

/* The GPT's layers (layernorm.h, softmax.h, embed.h, xent.h, bias.h on the device).
 * LayerNorm and the bias gradient are the tiled forms (layernorm.h's and bias.h's
 * *_tiled replay them); the embedding's backward takes wte's rows V.
 * k_cuda_xent writes each row's loss to loss[N] (device doubles). */
int k_cuda_layernorm(float *y, float *mean, float *rstd, const float *x, const float *w,
                     const float *b, int N, int C, void *stream);
/* x2 += x, then y = layernorm(x2): the block's residual and the next LayerNorm. */
int k_cuda_residual_layernorm(float *x2, float *y, float *mean, float *rstd, const float *x,
                              const float *w, const float *b, int N, int C, void *stream);
int k_cuda_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x,
                         const float *mean, const float *rstd, const float *w, int N, int C,
                         void *stream);
int k_cuda_softmax_causal(float *a, size_t rows, int T, void *stream);
int k_cuda_softmax_causal_bwd(float *dp, const float *a, size_t rows, int T, float scale,
                              void *stream);
int k_cuda_embed(float *out, const int *tok, const float *wte, const float *wpe, int N,
                 int T, int C, void *stream);
int k_cuda_embed_bwd(float *dwte, float *dwpe, const float *dout, const int *tok, int N,
                     int T, int C, int V, void *stream);
int k_cuda_xent(float *dlogits, double *loss, const float *logits, const int *targets, int N,
                int V, float scale, void *stream);
/* Causal self-attention, tiled (attention.h's layout; the head at most K_ATTN_HS_MAX
 * columns, else -EINVAL): out and lse[B*H*T] forward; the backward writes dqkv, with
 * D[B*H*T] as scratch. */
int k_cuda_attention_fwd(float *out, float *lse, const float *qkv, int B, int T, int C, int H,
                         void *stream);
int k_cuda_attention_bwd(float *dqkv, float *D, const float *dout, const float *qkv,
                         const float *out, const float *lse, int B, int T, int C, int H,
                         void *stream);
int k_cuda_bias_add(float *y, const float *b, int N, int O, void *stream);
int k_cuda_bias_grad(float *db, const float *dy, int N, int O, void *stream);

/* Device memory for flat.h's loops: asynchronous copies (any direction the unified
 * address space can tell) and zeroing on `stream`. */
k_mem k_cuda_mem(void *stream);
extern const k_mem k_cuda_default_mem;   /* on the legacy default stream */

/* Row-major C = alpha op(A) op(B) + beta C, op(A) m x k, op(B) k x n, C m x n, leading
 * dims in elements; A and B f32 or bf16, C f32, accumulation in f32. `blas` is a
 * cuBLAS handle from k_cuda_blas_new (one per thread). */
typedef enum k_gemm_type { K_GEMM_F32, K_GEMM_BF16 } k_gemm_type;
int k_cuda_blas_new(void **out);
void k_cuda_blas_free(void *blas);
int k_cuda_gemm(void *blas, void *stream, k_gemm_type type, bool ta, bool tb, int m, int n,
                int k, float alpha, const void *a, int lda, const void *b, int ldb,
                float beta, float *c, int ldc);

#ifdef __cplusplus
}
#endif

#endif
