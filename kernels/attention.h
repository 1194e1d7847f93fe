/* attention.h - causal multi-head self-attention, tiled (flash style): the CPU replay
 * of the CUDA kernels of cuda/attention.cu, over attention_tile.h. The trainer's CPU
 * ranks keep the unfused attention (GEMMs and softmax.h) and its bits; this is the
 * reference the GPU kernels are tested against, and itself tested against the
 * formula in double.
 *
 * qkv[B*T, 3C] (q, k, v side by side; head h in columns h*hs .. h*hs+hs of each),
 * out[B*T, C], lse[B*H*T] (row b*H*T + h*T + t); hs = C / H at most K_ATTN_HS_MAX.
 */
#ifndef KERNELS_ATTENTION_H
#define KERNELS_ATTENTION_H

#include "attention_tile.h"

/* out = softmax(q k^T / sqrt(hs), causal) v per head; lse saved for the backward. */
void k_attention_fwd(float *out, float *lse, const float *qkv, int B, int T, int C, int H);

/* dqkv (written, not added) from dout, the forward's out and lse; D[B*H*T] scratch
 * (the rows' dO . O). */
void k_attention_bwd(float *dqkv, float *D, const float *dout, const float *qkv,
                     const float *out, const float *lse, int B, int T, int C, int H);

#endif
