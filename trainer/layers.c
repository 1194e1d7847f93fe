/* layers.c - see layers.h. The layers that are one op (LayerNorm, GELU, the encoder,
 * cross-entropy) are called from model.c and step.c directly through sh/ops.h. */
#include "layers.h"

#include <math.h>

int tr_linear_fwd(sh_world *w, float *y, const float *x, void *x16, const tr_weight *W,
                  const float *b, int N, int K, int O, ck_err *err)
{
    const void *in = x;
    int rc = 0;
    if (W->dtype != CK_F32) {
        rc = sh_convert(w, x16, W->dtype, x, CK_F32, (size_t)N * (size_t)K, err);
        in = x16;
    }
    if (!rc)
        rc = sh_gemm(w, W->dtype, false, true, N, O, K, 1.0f, in, K, W->raw, K, 0.0f, y, O,
                     err);
    if (!rc && b)
        rc = sh_bias_add(w, y, b, N, O, err);
    return rc;
}

int tr_linear_bwd(sh_world *w, float *dx, float *dW, float *db, const float *dy,
                  const float *x, const float *W32, int N, int K, int O, bool accumulate,
                  ck_err *err)
{
    int rc = sh_gemm(w, CK_F32, true, false, O, K, N, 1.0f, dy, O, x, K, 1.0f, dW, K, err);
    if (!rc && db)
        rc = sh_bias_grad(w, db, dy, N, O, err);
    if (!rc && dx)
        rc = sh_gemm(w, CK_F32, false, false, N, K, O, 1.0f, dy, O, W32, K,
                     accumulate ? 1.0f : 0.0f, dx, K, err);
    return rc;
}

int tr_attention_fwd(sh_world *w, float *out, float *att, const float *qkv, int B, int T,
                     int C, int H, ck_err *err)
{
    int hs = C / H, C3 = 3 * C, rc = 0;
    float scale = 1.0f / sqrtf((float)hs);
    /* Scores for every pair, then the mask: the upper triangle costs as much again in
     * the GEMM but keeps this one GEMM per head. */
    for (int b = 0; !rc && b < B; b++)
        for (int h = 0; !rc && h < H; h++) {
            const float *q = qkv + (size_t)b * T * C3 + h * hs;
            rc = sh_gemm(w, CK_F32, false, true, T, T, hs, scale, q, C3, q + C, C3, 0.0f,
                         att + ((size_t)b * H + h) * T * T, T, err);
        }
    if (!rc)
        rc = sh_softmax_causal(w, att, (size_t)B * H * T, T, err);
    for (int b = 0; !rc && b < B; b++)
        for (int h = 0; !rc && h < H; h++) {
            const float *q = qkv + (size_t)b * T * C3 + h * hs;
            rc = sh_gemm(w, CK_F32, false, false, T, hs, T, 1.0f,
                         att + ((size_t)b * H + h) * T * T, T, q + 2 * C, C3, 0.0f,
                         out + (size_t)b * T * C + h * hs, C, err);
        }
    return rc;
}

int tr_attention_bwd(sh_world *w, float *dqkv, float *dp, const float *dout, const float *qkv,
                     const float *att, int B, int T, int C, int H, ck_err *err)
{
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
            rc = sh_gemm(w, CK_F32, true, false, T, hs, T, 1.0f, a, T, dO, C, 0.0f, dq + 2 * C,
                         C3, err);
            if (!rc)
                rc = sh_gemm(w, CK_F32, false, true, T, T, hs, 1.0f, dO, C, q + 2 * C, C3, 0.0f,
                             dp, T, err);
            if (!rc)
                rc = sh_softmax_causal_bwd(w, dp, a, (size_t)T, T, scale, err);
            if (!rc)
                rc = sh_gemm(w, CK_F32, false, false, T, hs, T, 1.0f, dp, T, q + C, C3, 0.0f,
                             dq, C3, err);
            if (!rc)
                rc = sh_gemm(w, CK_F32, true, false, T, hs, T, 1.0f, dp, T, q, C3, 0.0f,
                             dq + C, C3, err);
        }
    return rc;
}
