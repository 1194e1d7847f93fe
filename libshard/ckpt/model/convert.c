/* convert.c - converting elements from one dtype to another (see ck/types.h).
 *
 * A load into a tensor of another dtype, and an export in another dtype, convert the
 * values; nothing ever reinterprets the bits of one dtype as another. The rules are
 * torch's Tensor.to() where torch defines the result, and a refusal where it does not:
 *
 *   - to a float: rounded to nearest, ties to even. A narrow float (bf16, f16, the f8s)
 *     is made from the value as an f32 first, as torch's c10 types are (so an f64 or an
 *     i64 rounds twice, exactly as in torch). Overflow gives infinity, or for
 *     f8e4m3fn, which has none, its largest value with the sign (torch saturates it,
 *     infinities included); NaN stays NaN.
 *   - to an integer: a float is truncated toward zero. A value the integer cannot hold
 *     (NaN, an infinity, out of range, a negative one into an unsigned type) is refused,
 *     naming the element: torch leaves those undefined (C's cast) or wraps them, and a
 *     load must return the saved value or an error.
 *   - to bool: nonzero is true (NaN too); bool is 0 or 1 in any dtype.
 *   - complex: a real value becomes the real part, with a zero imaginary part; c64 and
 *     c128 convert part by part; complex to a real dtype is refused (torch drops the
 *     imaginary part with a warning).
 *
 * The float formats are decoded and encoded from the dtype table's layout (exp_bits,
 * man_bits, finite), so a new float dtype is a row of the table, not code here. The
 * conversions a load meets every day (f32 <-> bf16, f32 <-> f16, f32 <-> f64) have
 * loops of their own that the compiler vectorizes.
 */
#include "ck/types.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* One element on its way between dtypes. A float source keeps its value in d (exact
 * for every float dtype of the table); integers keep theirs whole, since an i64 or a
 * u64 does not fit a double. im: the imaginary part of a complex source. */
typedef struct val {
    enum { V_FLOAT, V_INT, V_UINT } kind;
    double d, im;
    int64_t i;
    uint64_t u;
} val;

static uint64_t load_le(const unsigned char *p, size_t n)
{
    uint64_t v = 0;
    for (size_t k = 0; k < n; k++)
        v |= (uint64_t)p[k] << (8 * k);
    return v;
}

static void store_le(unsigned char *p, size_t n, uint64_t v)
{
    for (size_t k = 0; k < n; k++)
        p[k] = (unsigned char)(v >> (8 * k));
}

static float f32_of_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static uint32_t bits_of_f32(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

static double f64_of_bits(uint64_t b)
{
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}

static uint64_t bits_of_f64(double d)
{
    uint64_t b;
    memcpy(&b, &d, sizeof b);
    return b;
}

/* The value of a float of layout fi held in the low bits of b (not f32 or f64, which
 * are read as the machine's own). */
static double small_float_decode(const ck_dtype_info *fi, uint64_t b)
{
    int e = fi->exp_bits, m = fi->man_bits;
    int bias = (1 << (e - 1)) - 1;
    bool neg = (b >> (e + m)) & 1;
    uint64_t exp = (b >> m) & ((1u << e) - 1), man = b & ((1u << m) - 1);
    double v;
    if (exp == (1u << e) - 1 && !fi->finite)
        v = man ? NAN : INFINITY;
    else if (fi->finite && exp == (1u << e) - 1 && man == (1u << m) - 1)
        v = NAN;
    else if (exp == 0)
        v = ldexp((double)man, 1 - bias - m);
    else
        v = ldexp((double)(man | (1u << m)), (int)exp - bias - m);
    return neg ? -v : v;
}

/* A float of layout fi nearest to f, ties to even; overflow is infinity, or the
 * largest value where the layout has no infinity. */
static uint64_t small_float_encode(const ck_dtype_info *fi, float f)
{
    int e = fi->exp_bits, m = fi->man_bits;
    int bias = (1 << (e - 1)) - 1, emin = 1 - bias;
    uint64_t sign = (uint64_t)(signbit(f) != 0) << (e + m);
    uint64_t all_exp = ((1u << e) - 1u) << m;
    uint64_t nan = fi->finite ? all_exp | ((1u << m) - 1u) : all_exp | (1u << (m - 1));
    if (isnan(f))
        return nan;
    /* The largest finite value: the top exponent is infinity's and NaN's in an IEEE
     * layout; a finite-only layout uses it for numbers and keeps all ones for NaN. */
    double max = fi->finite ? ldexp((double)((2u << m) - 2u), (1 << e) - 1 - bias - m)
                            : ldexp((double)((2u << m) - 1u), bias - m);
    double a = fabs((double)f);
    /* Past the largest value: infinity, or in a layout without one the largest
     * value itself, with its sign (torch saturates float8_e4m3fn). */
    uint64_t over = sign | (fi->finite ? all_exp | ((1u << m) - 2u) : all_exp);
    if (isinf(f))
        return over;
    int ex;
    (void)frexp(a, &ex);                     /* a = [0.5, 1) * 2^ex */
    int q = (ex - 1 < emin ? emin : ex - 1) - m;   /* the exponent of one unit */
    double r = ldexp(rint(ldexp(a, -q)), q);       /* exact: a has 24 bits at most */
    if (r > max)
        return over;
    if (r == 0)
        return sign;
    (void)frexp(r, &ex);
    if (ex - 1 < emin)
        return sign | (uint64_t)ldexp(r, m - emin);          /* subnormal */
    return sign | ((uint64_t)(ex - 1 + bias) << m) |
           ((uint64_t)ldexp(r, m - (ex - 1)) & ((1u << m) - 1u));
}

static val decode(const ck_dtype_info *fi, const unsigned char *p)
{
    val v = {.kind = V_FLOAT};
    uint64_t b = load_le(p, fi->size < 8 ? fi->size : 8);   /* a c128: its real part */
    switch (fi->kind) {
    case CK_KIND_FLOAT:
        v.d = fi->code == CK_F32   ? (double)f32_of_bits((uint32_t)b)
              : fi->code == CK_F64 ? f64_of_bits(b)
                                   : small_float_decode(fi, b);
        break;
    case CK_KIND_COMPLEX:
        if (fi->size == 8) {
            v.d = f32_of_bits((uint32_t)b);
            v.im = f32_of_bits((uint32_t)(b >> 32));
        } else {
            v.d = f64_of_bits(b);
            v.im = f64_of_bits(load_le(p + 8, 8));
        }
        break;
    case CK_KIND_INT:
        v.kind = V_INT;
        /* sign-extend the low size*8 bits */
        v.i = fi->size == 8 ? (int64_t)b
                            : (int64_t)(b ^ (1ull << (8 * fi->size - 1))) -
                                  (int64_t)(1ull << (8 * fi->size - 1));
        break;
    case CK_KIND_UINT:
        v.kind = V_UINT;
        v.u = b;
        break;
    case CK_KIND_BOOL:
        v.kind = V_UINT;
        v.u = b != 0;
        break;
    }
    return v;
}

/* The value as torch makes an f32 of it: straight from an integer, since a double
 * on the way would round twice. */
static float as_f32(const val *v)
{
    return v->kind == V_INT ? (float)v->i : v->kind == V_UINT ? (float)v->u : (float)v->d;
}

static double as_f64(const val *v)
{
    return v->kind == V_INT ? (double)v->i : v->kind == V_UINT ? (double)v->u : v->d;
}

/* Encodes v as an integer of fi into *out, or returns -ERANGE if it holds no such
 * integer. */
static int int_encode(const ck_dtype_info *fi, const val *v, uint64_t *out)
{
    int bits = (int)fi->size * 8;
    bool sign = fi->kind == CK_KIND_INT;
    if (v->kind == V_FLOAT) {
        double t = trunc(v->d);
        /* The bounds are powers of two, exact in a double: [-2^(b-1), 2^(b-1)) or
         * [0, 2^b). */
        double lo = sign ? -ldexp(1, bits - 1) : 0, hi = ldexp(1, sign ? bits - 1 : bits);
        if (!(t >= lo && t < hi))   /* NaN fails both */
            return -ERANGE;
        *out = sign ? (uint64_t)(int64_t)t : (uint64_t)t;
        return 0;
    }
    if (sign) {
        int64_t lo = bits == 64 ? INT64_MIN : -(INT64_C(1) << (bits - 1));
        int64_t hi = bits == 64 ? INT64_MAX : (INT64_C(1) << (bits - 1)) - 1;
        if (v->kind == V_INT ? (v->i < lo || v->i > hi) : v->u > (uint64_t)hi)
            return -ERANGE;
        *out = v->kind == V_INT ? (uint64_t)v->i : v->u;
        return 0;
    }
    uint64_t hi = bits == 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1;
    if (v->kind == V_INT ? (v->i < 0 || (uint64_t)v->i > hi) : v->u > hi)
        return -ERANGE;
    *out = v->kind == V_INT ? (uint64_t)v->i : v->u;
    return 0;
}

static int encode(const ck_dtype_info *fi, const val *v, unsigned char *p)
{
    uint64_t b;
    switch (fi->kind) {
    case CK_KIND_FLOAT:
        if (fi->code == CK_F64)
            b = bits_of_f64(as_f64(v));
        else if (fi->code == CK_F32)
            b = bits_of_f32(as_f32(v));
        else
            b = small_float_encode(fi, as_f32(v));
        break;
    case CK_KIND_COMPLEX:
        if (fi->size == 16) {
            store_le(p, 8, bits_of_f64(as_f64(v)));
            store_le(p + 8, 8, bits_of_f64(v->im));
            return 0;
        }
        b = bits_of_f32(as_f32(v)) | (uint64_t)bits_of_f32((float)v->im) << 32;
        break;
    case CK_KIND_BOOL:
        b = v->kind == V_INT ? v->i != 0 : v->kind == V_UINT ? v->u != 0 : v->d != 0 || isnan(v->d);
        break;
    default: {
        int r = int_encode(fi, v, &b);
        if (r < 0)
            return r;
    }
    }
    store_le(p, fi->size, b);
    return 0;
}

int ck_dtype_convertible(ck_dtype from, ck_dtype to, ck_err *err)
{
    const ck_dtype_info *f = ck_dtype_info_of(from), *t = ck_dtype_info_of(to);
    if (!f || !t)
        return ck_err_set(err, -EINVAL, "no conversion from dtype code %d to %d: not a dtype",
                          (int)from, (int)to);
    if (f->kind == CK_KIND_COMPLEX && t->kind != CK_KIND_COMPLEX)
        return ck_err_set(err, -EINVAL,
                          "%s cannot become %s: it would drop the imaginary part", f->name,
                          t->name);
    return 0;
}

/* The everyday conversions, as loops the compiler vectorizes. bf16 is the top half of
 * an f32, rounded to nearest even, and NaN kept NaN (a carry could make it infinity). */
static void f32_to_bf16(uint16_t *d, const float *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t b = bits_of_f32(s[i]);
        uint32_t r = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
        d[i] = (uint16_t)(s[i] != s[i] ? 0x7fc0u | ((b >> 16) & 0x8000u) : r);
    }
}

static void bf16_to_f32(float *d, const uint16_t *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] = f32_of_bits((uint32_t)s[i] << 16);
}

static bool fast_path(void *dst, ck_dtype to, const void *src, ck_dtype from, size_t n)
{
    if (from == CK_F32 && to == CK_BF16)
        f32_to_bf16(dst, src, n);
    else if (from == CK_BF16 && to == CK_F32)
        bf16_to_f32(dst, src, n);
    else if (from == CK_F32 && to == CK_F64)
        for (size_t i = 0; i < n; i++)
            ((double *)dst)[i] = ((const float *)src)[i];
    else if (from == CK_F64 && to == CK_F32)
        for (size_t i = 0; i < n; i++)
            ((float *)dst)[i] = (float)((const double *)src)[i];
#ifdef __FLT16_MAX__
    else if (from == CK_F32 && to == CK_F16)
        for (size_t i = 0; i < n; i++)
            ((_Float16 *)dst)[i] = (_Float16)((const float *)src)[i];
    else if (from == CK_F16 && to == CK_F32)
        for (size_t i = 0; i < n; i++)
            ((float *)dst)[i] = (float)((const _Float16 *)src)[i];
#endif
    else
        return false;
    return true;
}

int ck_dtype_convert(void *dst, ck_dtype to, const void *src, ck_dtype from, size_t n,
                     ck_err *err)
{
    int r = ck_dtype_convertible(from, to, err);
    if (r < 0)
        return r;
    const ck_dtype_info *f = ck_dtype_info_of(from), *t = ck_dtype_info_of(to);
    if (from == to) {
        memmove(dst, src, n * f->size);
        return 0;
    }
    /* The fast loops read and write whole elements through typed pointers. */
    if ((uintptr_t)dst % t->size == 0 && (uintptr_t)src % f->size == 0 &&
        fast_path(dst, to, src, from, n))
        return 0;
    const unsigned char *s = src;
    unsigned char *d = dst;
    for (size_t i = 0; i < n; i++) {
        val v = decode(f, s + i * f->size);
        if (encode(t, &v, d + i * t->size) < 0) {
            char what[64];
            if (v.kind == V_INT)
                snprintf(what, sizeof what, "%" PRId64, v.i);
            else if (v.kind == V_UINT)
                snprintf(what, sizeof what, "%" PRIu64, v.u);
            else
                snprintf(what, sizeof what, "%.17g", v.d);
            return ck_err_set(err, -ERANGE,
                              "element %zu is %s, which %s cannot hold (converting from %s)",
                              i, what, t->name, f->name);
        }
    }
    return 0;
}
