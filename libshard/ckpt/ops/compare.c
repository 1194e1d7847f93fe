/* compare.c - element-wise comparison of two checkpoints (see ck/compare.h). */
#include "ck/compare.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck/load.h"
#include "format/enc.h"
#include "model/grow.h"
#include "model/say.h"
#include "ops/compare.h"

typedef struct names {
    ck_tensor *t;
    size_t n, cap;
} names;

static int collect(const ck_tensor *t, void *arg)
{
    names *v = arg;
    if (ck__grow(&v->t, &v->cap, v->n + 1, sizeof *v->t) < 0)
        return -ENOMEM;
    v->t[v->n++] = *t;
    return 0;
}

/* The value of a float of the table's layout (ck_dtype_info: exp_bits, man_bits,
 * finite), exactly, as a double: every format the table holds fits. */
static double float_value(uint64_t bits, const ck_dtype_info *i)
{
    unsigned eb = i->exp_bits, mb = i->man_bits;
    uint64_t e = bits >> mb & ((1ull << eb) - 1), m = bits & ((1ull << mb) - 1);
    uint64_t top = (1ull << eb) - 1;
    int bias = (1 << (eb - 1)) - 1;
    double v;
    if (e == top && !i->finite)
        v = m ? NAN : INFINITY;
    else if (e == top && m == (1ull << mb) - 1)
        v = NAN;
    else if (e == 0)
        v = ldexp((double)m, 1 - bias - (int)mb);
    else
        v = ldexp((double)(m | 1ull << mb), (int)e - bias - (int)mb);
    return bits >> (eb + mb) & 1 ? -v : v;
}

/* Decimal digits that tell any two values of a float with man_bits apart
 * (max_digits10: 9 for f32, 17 for f64, 4 for bf16, 5 for f16). */
static int float_digits(const ck_dtype_info *i)
{
    return 2 + (i->man_bits + 1) * 30103 / 100000;
}

static uint64_t load_le(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t u = 0;
    for (size_t k = 0; k < n && k < 8; k++)
        u |= (uint64_t)b[k] << (8 * k);
    return u;
}

void ck__elem_format(ck_dtype dtype, const void *p, char *buf, size_t len)
{
    const ck_dtype_info *i = ck_dtype_info_of(dtype);
    if (!i) {
        snprintf(buf, len, "?");
        return;
    }
    /* Little-endian, as the format. */
    uint64_t u = load_le(p, i->size);
    unsigned bits = (unsigned)i->size * 8;
    size_t half = i->size / 2;
    switch (i->kind) {
    case CK_KIND_FLOAT:
        snprintf(buf, len, "%.*g", float_digits(i), float_value(u, i));
        break;
    case CK_KIND_COMPLEX:
        snprintf(buf, len, "%.*g%+.*gj", float_digits(i), float_value(load_le(p, half), i),
                 float_digits(i), float_value(load_le((const uint8_t *)p + half, half), i));
        break;
    case CK_KIND_INT:
        snprintf(buf, len, "%" PRId64,
                 bits < 64 ? (int64_t)(u << (64 - bits)) >> (64 - bits) : (int64_t)u);
        break;
    case CK_KIND_UINT: snprintf(buf, len, "%" PRIu64, u); break;
    case CK_KIND_BOOL: snprintf(buf, len, u ? "true" : "false"); break;
    }
}

static void report(const ck_compare_opts *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void report(const ck_compare_opts *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ck__vsay(o->diff, o->cb_arg, fmt, ap);
    va_end(ap);
}

static bool same_header(const ck_compare_opts *o, const ck_tensor *x, const ck_tensor *y)
{
    char sx[160] = "", sy[160] = "";
    bool same = x->dtype == y->dtype && x->ndim == y->ndim;
    for (int d = 0; same && d < x->ndim; d++)
        same = x->shape[d] == y->shape[d];
    if (same)
        return true;
    const ck_tensor *t[2] = { x, y };
    char *s[2] = { sx, sy };
    for (int k = 0; k < 2; k++) {
        size_t n = (size_t)snprintf(s[k], 160, "%s [", ck_dtype_name(t[k]->dtype));
        for (int d = 0; d < t[k]->ndim && n < 150; d++)
            n += (size_t)snprintf(s[k] + n, 160 - n, "%s%llu", d ? ", " : "",
                                  (unsigned long long)t[k]->shape[d]);
        snprintf(s[k] + n, 160 - n, "]");
    }
    report(o, "tensor %s: %s vs %s", x->name, sx, sy);
    return false;
}

/* Streams tensor t from both sides; reports its first differing element. */
static int compare_tensor(ck_ckpt *a, ck_ckpt *b, const ck_tensor *t, uint8_t *ba, uint8_t *bb,
                          uint64_t chunk, const ck_compare_opts *o, ck_compare_result *res,
                          uint64_t *done, uint64_t total, ck_err *err)
{
    ck_reader *ra = NULL, *rb = NULL;
    int r = ck_reader_open(a, t->name, CK_AS_SAVED, &ra, err);
    if (r == 0)
        r = ck_reader_open(b, t->name, CK_AS_SAVED, &rb, err);
    size_t is = ck_dtype_size(t->dtype);
    ck_box full;
    ck_box_full(t->ndim, t->shape, &full);
    uint64_t bytes = ck_box_numel(&full) * is;
    chunk -= chunk % is;
    for (uint64_t off = 0; r == 0 && off < bytes; off += chunk) {
        uint64_t len = bytes - off < chunk ? bytes - off : chunk;
        if ((r = ck_reader_read(ra, &full, off, len, ba, err)) < 0 ||
            (r = ck_reader_read(rb, &full, off, len, bb, err)) < 0)
            break;
        res->bytes_compared += len;
        *done += len;
        if (o->progress)
            o->progress(o->cb_arg, *done, total);
        if (!memcmp(ba, bb, len))
            continue;
        uint64_t i = 0;
        while (!memcmp(ba + i * is, bb + i * is, is))
            i++;
        uint64_t k = off / is + i, rem = k;
        char coord[CK_MAX_NDIM * 21 + 4] = "", va[64], vb[64];
        uint64_t c[CK_MAX_NDIM];
        for (int d = t->ndim - 1; d >= 0; d--) {
            c[d] = rem % t->shape[d];
            rem /= t->shape[d];
        }
        size_t n = 0;
        for (int d = 0; d < t->ndim; d++)
            n += (size_t)snprintf(coord + n, sizeof coord - n, "%s%llu", d ? ", " : "",
                                  (unsigned long long)c[d]);
        ck__elem_format(t->dtype, ba + i * is, va, sizeof va);
        ck__elem_format(t->dtype, bb + i * is, vb, sizeof vb);
        report(o, "tensor %s: first difference at element %llu [%s]: %s vs %s", t->name,
               (unsigned long long)k, coord, va, vb);
        res->differing++;
        *done += bytes - off - len;
        break;
    }
    ck_reader_close(ra);
    ck_reader_close(rb);
    return r;
}

int ck_compare(ck_ckpt *a, ck_ckpt *b, const ck_compare_opts *o, ck_compare_result *res,
               ck_err *err)
{
    ck_compare_opts none = { 0 };
    if (!o)
        o = &none;
    *res = (ck_compare_result){ 0 };
    names na = { 0 }, nb = { 0 };
    uint8_t *ba = NULL, *bb = NULL;
    uint64_t chunk = (o->mem_limit ? o->mem_limit : 64u << 20) / 2;
    if (chunk < 4096)
        chunk = 4096;
    chunk &= ~(uint64_t)4095;   /* whole pages, so the reader can read O_DIRECT */
    int r = ck_tensors_each(a, collect, &na, err);
    if (r == 0)
        r = ck_tensors_each(b, collect, &nb, err);
    if (r == 0 && (posix_memalign((void **)&ba, 4096, chunk) ||
                   posix_memalign((void **)&bb, 4096, chunk)))
        r = -ENOMEM;
    if (r == -ENOMEM)
        ck_err_set(err, r, "out of memory for %llu-byte compare buffers",
                   (unsigned long long)chunk);
    uint64_t total = 0, done = 0;
    for (uint64_t i = 0; r == 0 && i < na.n; i++) {
        ck_box full;
        ck_box_full(na.t[i].ndim, na.t[i].shape, &full);
        total += ck_box_numel(&full) * ck_dtype_size(na.t[i].dtype);
    }
    const char *an = ck_get_info(a)->name, *bn = ck_get_info(b)->name;
    /* Both lists are in name order: walk them as a merge. */
    for (uint64_t i = 0, j = 0; r == 0 && (i < na.n || j < nb.n);) {
        int c = i == na.n ? 1 : j == nb.n ? -1 : strcmp(na.t[i].name, nb.t[j].name);
        res->tensors++;
        if (c != 0) {
            const ck_tensor *t = c < 0 ? &na.t[i++] : &nb.t[j++];
            report(o, "tensor %s: only in %s", t->name, c < 0 ? an : bn);
            res->differing++;
            continue;
        }
        if (same_header(o, &na.t[i], &nb.t[j]))
            r = compare_tensor(a, b, &na.t[i], ba, bb, chunk, o, res, &done, total, err);
        else
            res->differing++;
        i++;
        j++;
    }
    free(na.t);
    free(nb.t);
    free(ba);
    free(bb);
    return r;
}
