/* ops.c - sh/ops.h: the device table's compute for module callbacks, with messages. */
#include "dev.h"
#include "sh/ops.h"

static int done(const sh_world *w, int rc, const char *what, ck_err *err)
{
    return rc ? ck_err_set(err, rc, "%s on %s (rank %d) failed", what, sh_dev(w)->name,
                           w->rank)
              : 0;
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
    return done(w, sh_dev(w)->gemm(w->blas, in, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta,
                                   c, ldc), "gemm", err);
}

int sh_gelu(sh_world *w, float *y, const float *x, size_t n, ck_err *err)
{
    return done(w, sh_dev(w)->gelu(y, x, n), "gelu", err);
}

int sh_gelu_bwd(sh_world *w, float *dx, const float *x, const float *dy, size_t n,
                ck_err *err)
{
    return done(w, sh_dev(w)->gelu_bwd(dx, x, dy, n), "gelu backward", err);
}

int sh_scale(sh_world *w, float *x, float s, size_t n, ck_err *err)
{
    return done(w, sh_dev(w)->scale(x, s, n), "scale", err);
}

int sh_scale_add(sh_world *w, float *dst, const float *src, float s, size_t n, ck_err *err)
{
    return done(w, sh_dev(w)->scale_add(dst, src, s, n), "scale-add", err);
}

int sh_sumsq(sh_world *w, const float *x, size_t n, double *out, ck_err *err)
{
    return done(w, sh_dev(w)->sumsq(x, n, out), "sum of squares", err);
}

int sh_copy(sh_world *w, void *dst, const void *src, size_t bytes, ck_err *err)
{
    return done(w, sh_dev(w)->copy(dst, src, bytes), "copy", err);
}

int sh_copy_to_host(sh_world *w, void *dst, const void *src, size_t bytes, ck_err *err)
{
    int rc = sh_dev(w)->copy(dst, src, bytes);
    if (!rc)
        rc = sh_dev(w)->sync();
    return done(w, rc, "copy to the host", err);
}

int sh_zero(sh_world *w, void *dst, size_t bytes, ck_err *err)
{
    return done(w, sh_dev(w)->zero(dst, bytes), "zeroing", err);
}

int sh_convert(sh_world *w, void *dst, ck_dtype dst_dtype, const void *src,
               ck_dtype src_dtype, size_t n, ck_err *err)
{
    return sh_dev_cast(sh_dev(w), dst, dst_dtype, src, src_dtype, n, err);
}
