/* sh/ops.h - compute on the world's device, for module callbacks.
 *
 * A callback that computes through these runs unchanged on CPU ranks (kernels/ loops,
 * OpenBLAS) and on CUDA ranks (the CUDA twins, cuBLAS). Pointers are memory of the
 * world's device: parameter values and gradients (sh_param_value, sh_param_grad) and
 * tensors made with SH_TENSOR_INIT_ON(sh_world_device(w)). On CUDA the work is queued
 * on the legacy default stream, in order with the library's own kernels, copies and
 * collectives; only sh_copy_to_host, sh_sumsq, sh_cross_entropy, sh_device_sync and
 * sh_clip_grad_norm make the host wait (sh_world_host_waits counts how often).
 */
#ifndef SH_OPS_H
#define SH_OPS_H

#include <stdbool.h>
#include <stddef.h>

#include "sh/tensor.h"
#include "sh/world.h"

/* Row-major C = alpha op(A) op(B) + beta C: op(A) is m x k, op(B) k x n, C m x n;
 * leading dims in elements. A and B are `in` (f32 or bf16), C is f32; products
 * accumulate in f32 (cuBLAS without TF32; OpenBLAS after widening bf16). */
int sh_gemm(sh_world *w, ck_dtype in, bool ta, bool tb, int m, int n, int k, float alpha,
            const void *a, int lda, const void *b, int ldb, float beta, float *c, int ldc,
            ck_err *err);
/* y = gelu(x) (tanh form); dx = dy * gelu'(x). */
int sh_gelu(sh_world *w, float *y, const float *x, size_t n, ck_err *err);
int sh_gelu_bwd(sh_world *w, float *dx, const float *x, const float *dy, size_t n,
                ck_err *err);
/* x *= s;  dst += s * src. */
int sh_scale(sh_world *w, float *x, float s, size_t n, ck_err *err);
int sh_scale_add(sh_world *w, float *dst, const float *src, float s, size_t n, ck_err *err);
/* *out (host) = sum of x[i]^2, accumulated in double. The host waits. */
int sh_sumsq(sh_world *w, const float *x, size_t n, double *out, ck_err *err);
/* Copies on the device, or from host memory to it (queued). */
int sh_copy(sh_world *w, void *dst, const void *src, size_t bytes, ck_err *err);
/* Copies device memory into host memory; returns when the bytes are there. */
int sh_copy_to_host(sh_world *w, void *dst, const void *src, size_t bytes, ck_err *err);
int sh_zero(sh_world *w, void *dst, size_t bytes, ck_err *err);
/* The host waits for everything queued on the device (timing a step). */
int sh_device_sync(sh_world *w, ck_err *err);
/* How many times the host has waited for the device through the calls above: a
 * training step that makes none keeps the device fed (tests count them). */
long sh_world_host_waits(const sh_world *w);
/* dst = src converted (f32 <-> bf16/f16), both on the device. */
int sh_convert(sh_world *w, void *dst, ck_dtype dst_dtype, const void *src,
               ck_dtype src_dtype, size_t n, ck_err *err);

/* Memory of the world's device for a callback's activations and scratch (cudaMalloc'd,
 * stream-ordered, on CUDA ranks; malloc on CPU ranks). *out is NULL for 0 bytes.
 * Free with sh_buffer_free on the same world (NULL is allowed). */
int sh_buffer_alloc(sh_world *w, size_t bytes, void **out, ck_err *err);
void sh_buffer_free(sh_world *w, void *p);

/* Host memory the device copies into at full speed: pinned (cudaHostAlloc) on CUDA
 * ranks, malloc on CPU ranks. For staging and for measuring a copy's physical rate.
 * Free with sh_host_buffer_free on the same world. */
int sh_host_buffer_alloc(sh_world *w, size_t bytes, void **out, ck_err *err);
void sh_host_buffer_free(sh_world *w, void *p);

/* The layers of a GPT, over f32 row-major arrays of the world's device; shapes count
 * rows N and columns C (or O, V). Backward functions add (+=) into every gradient
 * they name except where they say "=". */
/* LayerNorm over the last dim, eps 1e-5: y = (x - mean) * rstd * w + b; mean[N] and
 * rstd[N] saved for the backward. */
int sh_layernorm(sh_world *w, float *y, float *mean, float *rstd, const float *x,
                 const float *wt, const float *b, int N, int C, ck_err *err);
/* x2 += x, then y = LayerNorm(x2) as above: a block's residual connection and the
 * LayerNorm after it, in one pass over the rows on CUDA ranks. */
int sh_residual_layernorm(sh_world *w, float *x2, float *y, float *mean, float *rstd,
                          const float *x, const float *wt, const float *b, int N, int C,
                          ck_err *err);
/* dx += ..., dw += ..., db += ... */
int sh_layernorm_bwd(sh_world *w, float *dx, float *dw, float *db, const float *dy,
                     const float *x, const float *mean, const float *rstd, const float *wt,
                     int N, int C, ck_err *err);
/* In place over `rows` stacked T x T score matrices (row r is row r % T of its matrix):
 * the causal softmax (columns after the row's own are 0). */
int sh_softmax_causal(sh_world *w, float *a, size_t rows, int T, ck_err *err);
/* dp = a * (dp - rowsum(a * dp)) * scale (the scores' gradient times scale). */
int sh_softmax_causal_bwd(sh_world *w, float *dp, const float *a, size_t rows, int T,
                          float scale, ck_err *err);
/* Causal multi-head self-attention over qkv[B*T, 3C] (q, k, v side by side; head h in
 * columns h*hs .. h*hs+hs of each, hs = C / H): out[B*T, C] = softmax(q k^T / sqrt(hs),
 * causal) v per head. `saved` keeps what the backward needs: on CUDA ranks (heads of
 * up to 256 columns) each row's log-sum-exp, the backward recomputing the
 * probabilities (flash-attention style, kernels/cuda/attention.cu); elsewhere the
 * T x T probabilities of each head. sh_attention_sizes gives the floats `saved` and
 * the backward's `scratch` need per row of qkv (B*T rows). */
void sh_attention_sizes(sh_world *w, int T, int C, int H, size_t *saved, size_t *scratch);
int sh_attention(sh_world *w, float *out, float *saved, const float *qkv, int B, int T, int C,
                 int H, ck_err *err);
/* dqkv = the gradient of qkv (=) from dout, the forward's out, qkv and saved. */
int sh_attention_bwd(sh_world *w, float *dqkv, float *scratch, const float *dout,
                     const float *qkv, const float *out, const float *saved, int B, int T,
                     int C, int H, ck_err *err);
/* out[n] = wte[tok[n]] + wpe[n % T], rows of C; tok (device ints) must be rows of wte. */
int sh_embed(sh_world *w, float *out, const int *tok, const float *wte, const float *wpe,
             int N, int T, int C, ck_err *err);
/* dwte[V, C] += ..., dwpe += ... (V: wte's rows, which every token indexes). */
int sh_embed_bwd(sh_world *w, float *dwte, float *dwpe, const float *dout, const int *tok,
                 int N, int T, int C, int V, ck_err *err);
/* y[n] += b;  db += sum over rows of dy. */
int sh_bias_add(sh_world *w, float *y, const float *b, int N, int O, ck_err *err);
int sh_bias_grad(sh_world *w, float *db, const float *dy, int N, int O, ck_err *err);
/* Softmax cross-entropy of logits[N, V] against targets[N] (device ints in [0, V)):
 * dlogits = (softmax - onehot) * scale (=), and the sum of the N row losses in double
 * (in row order on CPU ranks; a fixed tree on CUDA ranks) added to *loss, one double
 * in the device's memory: the loss stays on the device, nothing waits. */
int sh_cross_entropy_add(sh_world *w, float *dlogits, const float *logits,
                         const int *targets, int N, int V, float scale, double *loss,
                         ck_err *err);
/* The same with *loss (host) = the sum: the host waits for it. */
int sh_cross_entropy(sh_world *w, float *dlogits, const float *logits, const int *targets,
                     int N, int V, float scale, double *loss, ck_err *err);

#endif
