/* attention_tile.h - causal self-attention, flash style: the arithmetic of one row
 * against one tile of keys (or queries), for the CPU driver (attention.c) and the
 * CUDA kernels (cuda/attention.cu), so that the CPU tests check the very sequence of
 * operations the GPU runs.
 *
 * Shapes: qkv[B*T, 3C] holds q, k and v side by side, head h in columns h*hs ..
 * h*hs+hs of each (hs = C / H); out[B*T, C]; lse[B, H, T] the log-sum-exp of each
 * query row's scaled scores, kept for the backward, which recomputes the
 * probabilities from it instead of storing T x T of them.
 *
 * A head row is cut into `lanes` chunks of k_attn_lane_d columns, one per GPU thread
 * (the kernels pad the head to k_attn_width columns with zeros, which adds exact
 * zeros). A dot product is each lane's sequential fmaf sum over its chunk, the lanes
 * then combined by the shuffle tree of tree_elem.h. fmaf is fused on both sides, so
 * the CPU replay is bitwise the kernel's except for expf and logf (libm's against the
 * device's, a few ulps).
 *
 * Forward, per query row i: keys 0..i in tiles of K_ATTN_KT, in order; per tile the
 * lanes' partial scores (k_attn_scores_part), combined, then the online softmax step
 * (k_attn_softmax_tile: new running max m, rescale factor alpha, probabilities,
 * running sum l) and the accumulator's rescale-and-add (k_attn_acc_tile); at the end
 * out = acc / l and lse = m + log l.
 * Backward, with D_i = dO_i . O_i (k_attn_dot_part over the whole head): per pair
 * (i, j), j <= i, s = q_i . k_j, p = exp(s * scale - lse_i), dp = dO_i . v_j,
 * ds = p (dp - D_i). dq_i = scale sum_j ds k_j over keys in order; dk_j = scale
 * sum_i ds q_i and dv_j = sum_i p dO_i over queries in order (k_attn_pair).
 */
#ifndef KERNELS_ATTENTION_TILE_H
#define KERNELS_ATTENTION_TILE_H

#include <math.h>

#include "kernel_fn.h"

#define K_ATTN_KT 16         /* keys per online-softmax step */
#define K_ATTN_HS_MAX 256    /* the largest head the tiled kernels take */

/* The padded head width the kernels are built for (16, 32, 64, 128, 256), 0 when hs
 * is larger than K_ATTN_HS_MAX. */
KERNEL_FN int k_attn_width(int hs)
{
    int w = 16;
    while (w < hs && w < K_ATTN_HS_MAX)
        w *= 2;
    return hs <= w ? w : 0;
}

/* Columns per lane (at most 32, so that a lane's registers stay few) and lanes per
 * row for a padded width. */
KERNEL_FN int k_attn_lane_d(int width) { return width < 32 ? width : 32; }
KERNEL_FN int k_attn_lanes(int width) { return width / k_attn_lane_d(width); }

/* The real (unpadded) columns of lane `lane`: hs - lane * d, clamped to [0, d]. */
KERNEL_FN int k_attn_lane_cols(int hs, int d, int lane)
{
    int n = hs - lane * d;
    return n < 0 ? 0 : n > d ? d : n;
}

/* One lane's part of a dot product: columns [0, n) of a and b, in order. */
KERNEL_FN float k_attn_dot_part(const float *a, const float *b, int n)
{
    float s = 0.0f;
    K_UNROLL
    for (int c = 0; c < n; c++)
        s = fmaf(a[c], b[c], s);
    return s;
}

/* s[j] = this lane's part of q . k_j for the tile's keys j < n (k_j at k + j * ldk),
 * 0 for the masked rest of the tile. */
KERNEL_FN void k_attn_scores_part(float *s, const float *q, const float *k, int ldk, int n,
                                  int d)
{
    K_UNROLL
    for (int j = 0; j < K_ATTN_KT; j++)
        s[j] = j < n ? k_attn_dot_part(q, k + j * ldk, d) : 0.0f;
}

/* The online softmax step over a tile whose combined dot products are s[0..n):
 * scales them, moves the running max *m (-INFINITY before the first tile) and sum *l,
 * leaves in s the probabilities relative to the new max (0 beyond n), and returns
 * the factor by which the accumulator must be rescaled. */
KERNEL_FN float k_attn_softmax_tile(float *s, int n, float scale, float *m, float *l)
{
    float mx = *m;
    K_UNROLL
    for (int j = 0; j < K_ATTN_KT; j++)
        if (j < n) {
            s[j] = s[j] * scale;
            mx = fmaxf(mx, s[j]);
        }
    float alpha = expf(*m - mx);    /* the first tile: exp(-inf) = 0 */
    float sum = 0.0f;
    K_UNROLL
    for (int j = 0; j < K_ATTN_KT; j++) {
        float p = j < n ? expf(s[j] - mx) : 0.0f;
        s[j] = p;
        sum = sum + p;
    }
    *l = *l * alpha + sum;
    *m = mx;
    return alpha;
}

/* This lane's accumulator columns [0, d): acc = acc * alpha + sum_j p[j] v_j, the keys
 * in order (v_j at v + j * ldv). */
KERNEL_FN void k_attn_acc_tile(float *acc, float alpha, const float *p, const float *v,
                               int ldv, int n, int d)
{
    K_UNROLL
    for (int c = 0; c < d; c++) {
        float a = acc[c] * alpha;
        K_UNROLL
        for (int j = 0; j < K_ATTN_KT; j++)
            if (j < n)
                a = fmaf(p[j], v[j * ldv + c], a);
        acc[c] = a;
    }
}

/* The row's end: out = acc / l over [0, d); returns lse. */
KERNEL_FN float k_attn_finish(float *out, const float *acc, int d, float m, float l)
{
    K_UNROLL
    for (int c = 0; c < d; c++)
        out[c] = acc[c] / l;
    return m + logf(l);
}

/* The backward of one (query i, key j) pair from the combined dot products s = q_i . k_j
 * and dp = dO_i . v_j: returns ds = p (dp - D_i), p = exp(s * scale - lse_i) in *p. */
KERNEL_FN float k_attn_pair(float s, float dp, float scale, float lse, float D, float *p)
{
    *p = expf(s * scale - lse);
    return *p * (dp - D);
}

/* acc[c] += a * x[c] over [0, d), fused: dq, dk and dv accumulate this way. */
KERNEL_FN void k_attn_axpy(float *acc, float a, const float *x, int d)
{
    K_UNROLL
    for (int c = 0; c < d; c++)
        acc[c] = fmaf(a, x[c], acc[c]);
}

/* out[c] = acc[c] * s over [0, d): dq and dk take the scale once, at the end. */
KERNEL_FN void k_attn_scale_out(float *out, const float *acc, float s, int d)
{
    K_UNROLL
    for (int c = 0; c < d; c++)
        out[c] = acc[c] * s;
}

#endif
