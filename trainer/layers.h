/* layers.h - the GPT's compute, as plain functions over f32 row-major arrays.
 *
 * No libshard here: model.c fetches the (unsharded) parameters through the module
 * hooks and calls these. Shapes use N = rows (batch x sequence), C = channels.
 * Backward functions add (+=) into parameter gradients, so gradient accumulation works
 * by not zeroing, and write (=) or add into input gradients as each one says.
 */
#ifndef TR_LAYERS_H
#define TR_LAYERS_H

#include <stddef.h>

/* y[N,O] = x[N,K] W[O,K]^T + b (b may be NULL). */
void tr_linear_fwd(float *y, const float *x, const float *W, const float *b, int N, int K,
                   int O);
/* dW += dy^T x, db += sum_rows dy (db may be NULL), dx = dy W (dx may be NULL), or
 * dx += dy W when accumulate. */
void tr_linear_bwd(float *dx, float *dW, float *db, const float *dy, const float *x,
                   const float *W, int N, int K, int O, int accumulate);

/* LayerNorm over the last dim, eps 1e-5: y = (x - mean) * rstd * w + b. Saves mean
 * and rstd per row for the backward. */
void tr_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *w,
                      const float *b, int N, int C);
/* dx += ..., dw += ..., db += ... */
void tr_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x,
                      const float *mean, const float *rstd, const float *w, int N, int C);

/* Causal multi-head self-attention on qkv[B*T, 3C] (q, k, v side by side, head h in
 * columns h*hs .. h*hs+hs of each), out[B*T, C]. att[B, H, T, T] keeps the softmax
 * probabilities for the backward (zero above the diagonal). */
void tr_attention_fwd(float *out, float *att, const float *qkv, int B, int T, int C, int H);
/* dqkv = d(qkv) (written). dp: scratch of T x T floats. */
void tr_attention_bwd(float *dqkv, float *dp, const float *dout, const float *qkv,
                      const float *att, int B, int T, int C, int H);

/* out[N, C] = wte[tok] + wpe[position within the sequence of T]. */
void tr_embed_fwd(float *out, const int *tok, const float *wte, const float *wpe, int B,
                  int T, int C);
void tr_embed_bwd(float *dwte, float *dwpe, const float *dout, const int *tok, int B, int T,
                  int C);

/* Softmax cross-entropy of logits[N, V] against targets: returns the sum of the N
 * losses (in double) and writes dlogits = (softmax - onehot) * scale. */
double tr_cross_entropy(float *dlogits, const float *logits, const int *targets, int N, int V,
                        float scale);

#endif
