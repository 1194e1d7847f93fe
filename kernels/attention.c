/* attention.c - the CPU replay of cuda/attention.cu (see attention.h): each GPU thread
 * group's row becomes one iteration here, its lanes an inner loop, their shuffle tree
 * k_tree_sum, the tile sequence unchanged. */
#include "attention.h"

#include <stddef.h>

#include "tree_elem.h"

#define LANES_MAX (K_ATTN_HS_MAX / 32)

typedef struct head_shape {
    int hs, d, lanes;          /* head columns, columns per lane, lanes */
    size_t C3;                 /* qkv's row stride */
    float scale;
} head_shape;

static head_shape shape_of(int C, int H)
{
    head_shape s;
    s.hs = C / H;
    int width = k_attn_width(s.hs);
    s.d = k_attn_lane_d(width);
    s.lanes = k_attn_lanes(width);
    s.C3 = 3 * (size_t)C;
    s.scale = 1.0f / sqrtf((float)s.hs);
    return s;
}

/* The combined dot product of two head rows, lane by lane as the GPU cuts it. */
static float dot(const head_shape *s, const float *a, const float *b)
{
    float part[LANES_MAX];
    for (int l = 0; l < s->lanes; l++)
        part[l] = k_attn_dot_part(a + l * s->d, b + l * s->d, k_attn_lane_cols(s->hs, s->d, l));
    return k_tree_sum(part, s->lanes);
}

/* One query row: keys 0..i in tiles, the online softmax. */
static void fwd_row(const head_shape *s, float *out, float *lse, const float *q,
                    const float *k0, int i)
{
    float acc[K_ATTN_HS_MAX] = {0}, m = -INFINITY, l = 0.0f;
    for (int j0 = 0; j0 <= i; j0 += K_ATTN_KT) {
        int n = i + 1 - j0 < K_ATTN_KT ? i + 1 - j0 : K_ATTN_KT;
        const float *k = k0 + (size_t)j0 * s->C3, *v = k + s->C3 / 3;
        float part[LANES_MAX][K_ATTN_KT], sc[K_ATTN_KT];
        for (int ln = 0; ln < s->lanes; ln++)
            k_attn_scores_part(part[ln], q + ln * s->d, k + ln * s->d, (int)s->C3, n,
                               k_attn_lane_cols(s->hs, s->d, ln));
        for (int j = 0; j < K_ATTN_KT; j++) {
            float p[LANES_MAX];
            for (int ln = 0; ln < s->lanes; ln++)
                p[ln] = part[ln][j];
            sc[j] = k_tree_sum(p, s->lanes);
        }
        float alpha = k_attn_softmax_tile(sc, n, s->scale, &m, &l);
        for (int ln = 0; ln < s->lanes; ln++)
            k_attn_acc_tile(acc + ln * s->d, alpha, sc, v + ln * s->d, (int)s->C3, n,
                            k_attn_lane_cols(s->hs, s->d, ln));
    }
    *lse = k_attn_finish(out, acc, s->hs, m, l);
}

void k_attention_fwd(float *out, float *lse, const float *qkv, int B, int T, int C, int H)
{
    head_shape s = shape_of(C, H);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                const float *seq = qkv + (size_t)b * T * s.C3 + (size_t)h * s.hs;
                fwd_row(&s, out + ((size_t)b * T + i) * C + (size_t)h * s.hs,
                        lse + ((size_t)b * H + h) * T + i, seq + (size_t)i * s.C3,
                        seq + C, i);
            }
}

void k_attention_bwd(float *dqkv, float *D, const float *dout, const float *qkv,
                     const float *out, const float *lse, int B, int T, int C, int H)
{
    head_shape s = shape_of(C, H);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            size_t row0 = (size_t)b * T, hoff = (size_t)h * s.hs;
            const float *L = lse + ((size_t)b * H + h) * T;
            float *Dh = D + ((size_t)b * H + h) * T;
            const float *q = qkv + row0 * s.C3 + hoff, *k = q + C, *v = q + 2 * C;
            const float *dO = dout + row0 * C + hoff;
            float *dq = dqkv + row0 * s.C3 + hoff, *dk = dq + C, *dv = dq + 2 * C;
            for (int i = 0; i < T; i++)
                Dh[i] = k_attn_dot_part(dO + (size_t)i * C, out + (row0 + i) * C + hoff,
                                        s.hs);
            /* dq: per query row, keys in order (the dq kernel). */
            for (int i = 0; i < T; i++) {
                float acc[K_ATTN_HS_MAX] = {0};
                const float *qi = q + i * s.C3, *dOi = dO + (size_t)i * C;
                for (int j = 0; j <= i; j++) {
                    float p, ds = k_attn_pair(dot(&s, qi, k + j * s.C3),
                                              dot(&s, dOi, v + j * s.C3), s.scale, L[i],
                                              Dh[i], &p);
                    k_attn_axpy(acc, ds, k + j * s.C3, s.hs);
                }
                k_attn_scale_out(dq + i * s.C3, acc, s.scale, s.hs);
            }
            /* dk, dv: per key row, queries in order (the dkv kernel). */
            for (int j = 0; j < T; j++) {
                float ak[K_ATTN_HS_MAX] = {0}, av[K_ATTN_HS_MAX] = {0};
                const float *kj = k + j * s.C3, *vj = v + j * s.C3;
                for (int i = j; i < T; i++) {
                    const float *qi = q + i * s.C3, *dOi = dO + (size_t)i * C;
                    float p, ds = k_attn_pair(dot(&s, qi, kj), dot(&s, dOi, vj), s.scale, L[i],
                                              Dh[i], &p);
                    k_attn_axpy(av, p, dOi, s.hs);
                    k_attn_axpy(ak, ds, qi, s.hs);
                }
                k_attn_scale_out(dk + j * s.C3, ak, s.scale, s.hs);
                k_attn_scale_out(dv + j * s.C3, av, 1.0f, s.hs);
            }
        }
}
