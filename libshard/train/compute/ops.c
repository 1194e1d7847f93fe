/* compute/ops.c - sh/ops.h: the device table's compute for module callbacks, with
 * messages. */
#include <stdlib.h>
#include <string.h>

#include "compute/compute.h"
#include "sh/ops.h"
#include "world/world.h"

int sh_ops_done(const sh_world *w, int rc, const char *what, ck_err *err)
{
    return rc ? ck_err_set(err, rc, "%s on %s (rank %d) failed", what, sh_dev(w)->name,
                           w->rank)
              : 0;
}

int sh_host_wait(sh_world *w)
{
    w->host_waits++;
    return sh_dev(w)->sync();
}

long sh_world_host_waits(const sh_world *w) { return w->host_waits; }

/* One double of device memory, zeroed (a sum the device accumulates), and its read. */
static int dev_double(sh_world *w, double **p, const char *what, ck_err *err)
{
    int rc = sh_dev(w)->alloc((void **)p, sizeof **p, true);
    return rc ? ck_err_set(err, rc, "%s on %s (rank %d): no memory for its sum", what,
                           sh_dev(w)->name, w->rank)
              : 0;
}

static int read_double(sh_world *w, double *out, double *d, const char *what, ck_err *err)
{
    int rc = sh_dev(w)->copy(out, d, sizeof *out);
    if (!rc)
        rc = sh_host_wait(w);
    sh_dev(w)->free(d);
    return sh_ops_done(w, rc, what, err);
}

int sh_gemm(sh_world *w, ck_dtype in, bool ta, bool tb, int m, int n, int k, float alpha,
            const void *a, int lda, const void *b, int ldb, float beta, float *c, int ldc,
            ck_err *err)
{
    if (in != CK_F32 && in != CK_BF16)
        return ck_err_set(err, -EINVAL, "gemm: inputs are f32 or bf16, not %s",
                          ck_dtype_name(in) ? ck_dtype_name(in) : "?");
    if (m < 0 || n < 0 || k < 0)
        return ck_err_set(err, -EINVAL, "gemm: negative shape %d x %d x %d", m, n, k);
    return sh_ops_done(w, sh_dev(w)->gemm(w->blas, in, ta, tb, m, n, k, alpha, a, lda, b, ldb,
                                          beta, c, ldc), "gemm", err);
}

int sh_gelu(sh_world *w, float *y, const float *x, size_t n, ck_err *err)
{
    return sh_ops_done(w, sh_dev(w)->gelu(y, x, n), "gelu", err);
}

int sh_gelu_bwd(sh_world *w, float *dx, const float *x, const float *dy, size_t n,
                ck_err *err)
{
    return sh_ops_done(w, sh_dev(w)->gelu_bwd(dx, x, dy, n), "gelu backward", err);
}

int sh_scale(sh_world *w, float *x, float s, size_t n, ck_err *err)
{
    return sh_ops_done(w, sh_dev(w)->scale(x, s, n), "scale", err);
}

int sh_scale_add(sh_world *w, float *dst, const float *src, float s, size_t n, ck_err *err)
{
    return sh_ops_done(w, sh_dev(w)->scale_add(dst, src, s, n), "scale-add", err);
}

int sh_sumsq(sh_world *w, const float *x, size_t n, double *out, ck_err *err)
{
    double *d;
    int rc = dev_double(w, &d, "sum of squares", err);
    if (rc)
        return rc;
    rc = sh_dev(w)->sumsq(x, n, d);
    if (rc) {
        sh_dev(w)->free(d);
        return sh_ops_done(w, rc, "sum of squares", err);
    }
    return read_double(w, out, d, "sum of squares", err);
}

int sh_copy(sh_world *w, void *dst, const void *src, size_t bytes, ck_err *err)
{
    return sh_ops_done(w, sh_dev(w)->copy(dst, src, bytes), "copy", err);
}

int sh_copy_to_host(sh_world *w, void *dst, const void *src, size_t bytes, ck_err *err)
{
    int rc = sh_dev(w)->copy(dst, src, bytes);
    if (!rc)
        rc = sh_host_wait(w);
    return sh_ops_done(w, rc, "copy to the host", err);
}

int sh_zero(sh_world *w, void *dst, size_t bytes, ck_err *err)
{
    return sh_ops_done(w, sh_dev(w)->zero(dst, bytes), "zeroing", err);
}

int sh_device_sync(sh_world *w, ck_err *err)
{
    return sh_ops_done(w, sh_host_wait(w), "waiting for the device", err);
}

int sh_convert(sh_world *w, void *dst, ck_dtype dst_dtype, const void *src,
               ck_dtype src_dtype, size_t n, ck_err *err)
{
    return sh_dev_cast(sh_dev(w), dst, dst_dtype, src, src_dtype, n, err);
}

int sh_buffer_alloc(sh_world *w, size_t bytes, void **out, ck_err *err)
{
    *out = NULL;
    int rc = bytes ? sh_dev(w)->alloc(out, bytes, false) : 0;
    return rc ? ck_err_set(err, rc, "%zu bytes of %s memory (rank %d): %s", bytes,
                           sh_dev(w)->name, w->rank, strerror(-rc))
              : 0;
}

void sh_buffer_free(sh_world *w, void *p)
{
    if (p)
        sh_dev(w)->free(p);
}

int sh_host_buffer_alloc(sh_world *w, size_t bytes, void **out, ck_err *err)
{
    *out = NULL;
    if (!bytes)
        return 0;
    int rc = 0;
    if (w->device == SH_CUDA)
        rc = sh_pinned_alloc(out, bytes, false);
    else if (!(*out = malloc(bytes)))
        rc = -ENOMEM;
    return rc ? ck_err_set(err, rc, "%zu bytes of %s host memory (rank %d): %s", bytes,
                           w->device == SH_CUDA ? "pinned" : "", w->rank, strerror(-rc))
              : 0;
}

void sh_host_buffer_free(sh_world *w, void *p)
{
    if (p && w->device == SH_CUDA)
        sh_pinned_free(p);
    else
        free(p);
}

static int shape_ok(const char *what, int a, int b, ck_err *err)
{
    return a < 0 || b < 0 ? ck_err_set(err, -EINVAL, "%s: negative shape %d x %d", what, a, b)
                          : 0;
}

int sh_layernorm(sh_world *w, float *y, float *mean, float *rstd, const float *x,
                 const float *wt, const float *b, int N, int C, ck_err *err)
{
    int rc = shape_ok("layernorm", N, C, err);
    return rc ? rc : sh_ops_done(w, sh_dev(w)->layernorm(y, mean, rstd, x, wt, b, N, C),
                                 "layernorm", err);
}

int sh_residual_layernorm(sh_world *w, float *x2, float *y, float *mean, float *rstd,
                          const float *x, const float *wt, const float *b, int N, int C,
                          ck_err *err)
{
    int rc = shape_ok("residual layernorm", N, C, err);
    return rc ? rc : sh_ops_done(w, sh_dev(w)->residual_layernorm(x2, y, mean, rstd, x, wt, b,
                                                                   N, C),
                                 "residual layernorm", err);
}

int sh_layernorm_bwd(sh_world *w, float *dx, float *dw, float *db, const float *dy,
                     const float *x, const float *mean, const float *rstd, const float *wt,
                     int N, int C, ck_err *err)
{
    int rc = shape_ok("layernorm backward", N, C, err);
    return rc ? rc : sh_ops_done(w, sh_dev(w)->layernorm_bwd(dx, dw, db, dy, x, mean, rstd, wt,
                                                              N, C),
                                 "layernorm backward", err);
}

int sh_softmax_causal(sh_world *w, float *a, size_t rows, int T, ck_err *err)
{
    if (T < 1 || rows % (size_t)T)
        return ck_err_set(err, -EINVAL, "causal softmax: %zu rows are not matrices of %d",
                          rows, T);
    return sh_ops_done(w, sh_dev(w)->softmax_causal(a, rows, T), "causal softmax", err);
}

int sh_softmax_causal_bwd(sh_world *w, float *dp, const float *a, size_t rows, int T,
                          float scale, ck_err *err)
{
    if (T < 1 || rows % (size_t)T)
        return ck_err_set(err, -EINVAL, "causal softmax backward: %zu rows are not "
                          "matrices of %d", rows, T);
    return sh_ops_done(w, sh_dev(w)->softmax_causal_bwd(dp, a, rows, T, scale),
                       "causal softmax backward", err);
}

int sh_embed(sh_world *w, float *out, const int *tok, const float *wte, const float *wpe,
             int N, int T, int C, ck_err *err)
{
    int rc = T < 1 ? ck_err_set(err, -EINVAL, "embedding: sequence length %d", T)
                   : shape_ok("embedding", N, C, err);
    return rc ? rc : sh_ops_done(w, sh_dev(w)->embed(out, tok, wte, wpe, N, T, C), "embedding",
                                 err);
}

int sh_embed_bwd(sh_world *w, float *dwte, float *dwpe, const float *dout, const int *tok,
                 int N, int T, int C, int V, ck_err *err)
{
    int rc = T < 1 ? ck_err_set(err, -EINVAL, "embedding backward: sequence length %d", T)
                   : shape_ok("embedding backward", N, C, err);
    return rc ? rc : sh_ops_done(w, sh_dev(w)->embed_bwd(dwte, dwpe, dout, tok, N, T, C, V),
                                 "embedding backward", err);
}

int sh_bias_add(sh_world *w, float *y, const float *b, int N, int O, ck_err *err)
{
    int rc = shape_ok("bias", N, O, err);
    return rc ? rc : sh_ops_done(w, sh_dev(w)->bias_add(y, b, N, O), "bias", err);
}

int sh_bias_grad(sh_world *w, float *db, const float *dy, int N, int O, ck_err *err)
{
    int rc = shape_ok("bias gradient", N, O, err);
    return rc ? rc : sh_ops_done(w, sh_dev(w)->bias_grad(db, dy, N, O), "bias gradient", err);
}

int sh_cross_entropy_add(sh_world *w, float *dlogits, const float *logits,
                         const int *targets, int N, int V, float scale, double *loss,
                         ck_err *err)
{
    int rc = V < 1 ? ck_err_set(err, -EINVAL, "cross-entropy: %d classes", V)
                   : shape_ok("cross-entropy", N, V, err);
    return rc ? rc : sh_ops_done(w, sh_dev(w)->xent(dlogits, logits, targets, N, V, scale,
                                                     loss),
                                 "cross-entropy", err);
}

int sh_cross_entropy(sh_world *w, float *dlogits, const float *logits, const int *targets,
                     int N, int V, float scale, double *loss, ck_err *err)
{
    double *d;
    int rc = dev_double(w, &d, "cross-entropy", err);
    if (rc)
        return rc;
    rc = sh_cross_entropy_add(w, dlogits, logits, targets, N, V, scale, d, err);
    if (rc) {
        sh_dev(w)->free(d);
        return rc;
    }
    return read_double(w, loss, d, "cross-entropy", err);
}
