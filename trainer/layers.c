/* layers.c - see layers.h. The layers that are one op (LayerNorm, GELU, attention, the
 * encoder, cross-entropy) are called from model.c and step.c directly through sh/ops.h. */
#include "layers.h"

#include <stdint.h>

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
                  const float *x, void *x16, const tr_weight *W, int N, int K, int O,
                  bool accumulate, ck_err *err)
{
    const void *a = dy, *b = x;
    int rc = 0;
    if (W->dtype != CK_F32) {
        /* dy then x, rounded, the second 16-byte aligned for the tensor cores. */
        size_t ny = (size_t)N * (size_t)O, at = (ny + 7) / 8 * 8;
        uint16_t *dy16 = x16, *xx16 = dy16 + at;
        rc = sh_convert(w, dy16, W->dtype, dy, CK_F32, ny, err);
        if (!rc)
            rc = sh_convert(w, xx16, W->dtype, x, CK_F32, (size_t)N * (size_t)K, err);
        a = dy16;
        b = xx16;
    }
    if (!rc)
        rc = sh_gemm(w, W->dtype, true, false, O, K, N, 1.0f, a, O, b, K, 1.0f, dW, K, err);
    if (!rc && db)
        rc = sh_bias_grad(w, db, dy, N, O, err);
    if (!rc && dx)
        rc = sh_gemm(w, W->dtype, false, false, N, K, O, 1.0f, a, O, W->raw, K,
                     accumulate ? 1.0f : 0.0f, dx, K, err);
    return rc;
}
