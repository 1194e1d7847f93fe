/* compute/attention.c - sh_attention (sh/ops.h): causal multi-head self-attention through
 * the device table. A device with fused attention kernels (CUDA: kernels/cuda/
 * attention.cu, heads up to K_ATTN_HS_MAX columns) keeps only each row's log-sum-exp
 * and recomputes the probabilities in its backward; any other (the CPU, a wider head)
 * runs the composition here: a GEMM per (sequence, head) for the scores, the causal
 * softmax over all of them, a GEMM per (sequence, head) for the output, the T x T
 * probabilities kept. The CPU ranks' numbers are this composition's, unchanged. */
#include "attention_tile.h"
#include "compute/compute.h"
#include "sh/ops.h"
#include "world/world.h"

static bool fused(const sh_dev_ops *d, int C, int H)
{
    return d->attention && k_attn_width(C / H) != 0;
}

static int check(const char *what, int B, int T, int C, int H, ck_err *err)
{
    if (B < 0 || T < 1 || H < 1 || C < H || C % H)
        return ck_err_set(err, -EINVAL, "%s: %d sequences of %d, %d channels in %d heads "
                          "(channels must be a positive multiple of heads)", what, B, T, C, H);
    return 0;
}

void sh_attention_sizes(sh_world *w, int T, int C, int H, size_t *saved, size_t *scratch)
{
    bool f = H > 0 && fused(sh_dev(w), C, H);
    *saved = f ? (size_t)H : (size_t)H * (size_t)T;
    *scratch = f ? (size_t)H : (size_t)T;
}

static int composed_fwd(sh_world *w, float *out, float *att, const float *qkv, int B, int T,
                        int C, int H)
{
    const sh_dev_ops *d = sh_dev(w);
    int hs = C / H, C3 = 3 * C, rc = 0;
    float scale = 1.0f / sqrtf((float)hs);
    /* Scores for every pair, then the mask: the upper triangle costs as much again in
     * the GEMM but keeps this one GEMM per head. */
    for (int b = 0; !rc && b < B; b++)
        for (int h = 0; !rc && h < H; h++) {
            const float *q = qkv + (size_t)b * T * C3 + h * hs;
            rc = d->gemm(w->blas, CK_F32, false, true, T, T, hs, scale, q, C3, q + C, C3, 0.0f,
                         att + ((size_t)b * H + h) * T * T, T);
        }
    if (!rc)
        rc = d->softmax_causal(att, (size_t)B * H * T, T);
    for (int b = 0; !rc && b < B; b++)
        for (int h = 0; !rc && h < H; h++) {
            const float *q = qkv + (size_t)b * T * C3 + h * hs;
            rc = d->gemm(w->blas, CK_F32, false, false, T, hs, T, 1.0f,
                         att + ((size_t)b * H + h) * T * T, T, q + 2 * C, C3, 0.0f,
                         out + (size_t)b * T * C + h * hs, C);
        }
    return rc;
}

static int composed_bwd(sh_world *w, float *dqkv, float *dp, const float *dout,
                        const float *qkv, const float *att, int B, int T, int C, int H)
{
    const sh_dev_ops *d = sh_dev(w);
    int hs = C / H, C3 = 3 * C, rc = 0;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; !rc && b < B; b++)
        for (int h = 0; !rc && h < H; h++) {
            const float *q = qkv + (size_t)b * T * C3 + h * hs;
            const float *a = att + ((size_t)b * H + h) * T * T;
            const float *dO = dout + (size_t)b * T * C + h * hs;
            float *dq = dqkv + (size_t)b * T * C3 + h * hs;
            /* dv = a^T dO;  dp = dO v^T;  ds = softmax backward (times scale);
             * dq = ds k;  dk = ds^T q */
            rc = d->gemm(w->blas, CK_F32, true, false, T, hs, T, 1.0f, a, T, dO, C, 0.0f,
                         dq + 2 * C, C3);
            if (!rc)
                rc = d->gemm(w->blas, CK_F32, false, true, T, T, hs, 1.0f, dO, C, q + 2 * C,
                             C3, 0.0f, dp, T);
            if (!rc)
                rc = d->softmax_causal_bwd(dp, a, (size_t)T, T, scale);
            if (!rc)
                rc = d->gemm(w->blas, CK_F32, false, false, T, hs, T, 1.0f, dp, T, q + C, C3,
                             0.0f, dq, C3);
            if (!rc)
                rc = d->gemm(w->blas, CK_F32, true, false, T, hs, T, 1.0f, dp, T, q, C3, 0.0f,
                             dq + C, C3);
        }
    return rc;
}

int sh_attention(sh_world *w, float *out, float *saved, const float *qkv, int B, int T, int C,
                 int H, ck_err *err)
{
    int rc = check("attention", B, T, C, H, err);
    if (rc)
        return rc;
    const sh_dev_ops *d = sh_dev(w);
    rc = fused(d, C, H) ? d->attention(out, saved, qkv, B, T, C, H)
                        : composed_fwd(w, out, saved, qkv, B, T, C, H);
    return sh_ops_done(w, rc, "attention", err);
}

int sh_attention_bwd(sh_world *w, float *dqkv, float *scratch, const float *dout,
                     const float *qkv, const float *out, const float *saved, int B, int T,
                     int C, int H, ck_err *err)
{
    int rc = check("attention backward", B, T, C, H, err);
    if (rc)
        return rc;
    const sh_dev_ops *d = sh_dev(w);
    rc = fused(d, C, H) ? d->attention_bwd(dqkv, scratch, dout, qkv, out, saved, B, T, C, H)
                        : composed_bwd(w, dqkv, scratch, dout, qkv, saved, B, T, C, H);
    return sh_ops_done(w, rc, "attention backward", err);
}
