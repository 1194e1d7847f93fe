/* Every dtype of the core's table (ck_dtype_info) is whole and round-trips through
 * every spelling the project reads it in:
 *   - its row is at its code, with the size and name the rest of the core reports;
 *   - its name and its torch name parse back to its code (ck_dtype_parse);
 *   - its safetensors name, where it has one, is what the export library writes and
 *     parses back to its code; no two dtypes share one; one without (complex) is
 *     refused by the export library;
 *   - its float layout fills its element exactly (each part's, for a complex);
 *   - compare prints the values one and minus two of it, built from that layout, as
 *     "1" and "-2" ("true"/"1+0j" and the like for bool and complex; an unsigned
 *     dtype has no minus two).
 * So a new dtype that misses a column fails here, named. */
#include "export/safetensors.h"
#include "ck/compare.h"
#include "layout_testlib.h"
#include "ops/compare.h"

/* The bits of value v (1 or -2) in a float of the row's layout. */
static uint64_t float_bits(const ck_dtype_info *i, int v)
{
    uint64_t bias = (1ull << (i->exp_bits - 1)) - 1;
    uint64_t e = bias + (v == -2 ? 1 : 0);
    return (v < 0 ? 1ull << (i->exp_bits + i->man_bits) : 0) | e << i->man_bits;
}

static void store_le(uint8_t *p, uint64_t u, size_t n)
{
    for (size_t k = 0; k < n; k++)
        p[k] = (uint8_t)(u >> (8 * (k % 8)));
}

/* Element bytes of value v in the row's dtype. */
static void element(const ck_dtype_info *i, int v, uint8_t *p)
{
    memset(p, 0, 16);
    switch (i->kind) {
    case CK_KIND_FLOAT: store_le(p, float_bits(i, v), i->size); break;
    case CK_KIND_COMPLEX: store_le(p, float_bits(i, v), i->size / 2); break;
    case CK_KIND_INT: store_le(p, (uint64_t)(int64_t)v, i->size); break;
    case CK_KIND_UINT:
    case CK_KIND_BOOL: store_le(p, (uint64_t)v, i->size); break;
    }
}

static const char *expected(const ck_dtype_info *i, int v)
{
    if (i->kind == CK_KIND_BOOL)
        return "true";
    if (i->kind == CK_KIND_COMPLEX)
        return v == 1 ? "1+0j" : "-2+0j";
    return v == 1 ? "1" : "-2";
}

int main(void)
{
    const char *st_seen[CK_DTYPE_MAX + 1] = { 0 };
    int with_st = 0;
    for (int d = 1; d <= CK_DTYPE_MAX; d++) {
        const ck_dtype_info *i = ck_dtype_info_of(d);
        LT_CHECK(i, "code %d has no row in the dtype table", d);
        LT_CHECK((int)i->code == d && i->name && i->torch && i->size > 0,
                 "code %d: its row is incomplete or holds code %d", d, (int)i->code);
        LT_CHECK(ck_dtype_size(d) == i->size && !strcmp(ck_dtype_name(d), i->name),
                 "%s: ck_dtype_size/ck_dtype_name disagree with the table", i->name);
        ck_dtype back = 0;
        LT_CHECK(ck_dtype_parse(i->name, &back, NULL) == 0 && (int)back == d,
                 "%s: its name does not parse back", i->name);
        LT_CHECK(ck_dtype_parse(i->torch, &back, NULL) == 0 && (int)back == d,
                 "%s: its torch name %s does not parse back", i->name, i->torch);

        LT_CHECK(ck_st_dtype_name(i->code) == i->safetensors ||
                 (ck_st_dtype_name(i->code) && i->safetensors &&
                  !strcmp(ck_st_dtype_name(i->code), i->safetensors)),
                 "%s: the export library writes %s, the table says %s", i->name,
                 ck_st_dtype_name(i->code) ? ck_st_dtype_name(i->code) : "none",
                 i->safetensors ? i->safetensors : "none");
        if (i->safetensors) {
            with_st++;
            LT_CHECK(ck_st_dtype_parse(i->safetensors, &back) == 0 && (int)back == d,
                     "%s: safetensors %s does not parse back", i->name, i->safetensors);
            for (int e = 1; e < d; e++)
                LT_CHECK(!st_seen[e] || strcmp(st_seen[e], i->safetensors),
                         "%s: safetensors name %s is also code %d's", i->name,
                         i->safetensors, e);
            st_seen[d] = i->safetensors;
        } else {
            LT_CHECK(i->kind == CK_KIND_COMPLEX, "%s: no safetensors name, but safetensors "
                     "has every real dtype of the table", i->name);
        }

        unsigned bits = 1u + i->exp_bits + i->man_bits;
        if (i->kind == CK_KIND_FLOAT || i->kind == CK_KIND_COMPLEX)
            LT_CHECK(bits * (i->kind == CK_KIND_COMPLEX ? 2 : 1) == 8 * i->size &&
                     i->exp_bits >= 2, "%s: a float layout of %u bits in %zu bytes", i->name,
                     bits, i->size);
        else
            LT_CHECK(i->exp_bits == 0 && i->man_bits == 0 && !i->finite,
                     "%s: an integer with a float layout", i->name);

        for (int v = 1; v >= -2; v -= 3) {
            if (v < 0 && (i->kind == CK_KIND_UINT || i->kind == CK_KIND_BOOL))
                continue;
            uint8_t p[16];
            char got[96];
            element(i, v, p);
            ck__elem_format(i->code, p, got, sizeof got);
            LT_CHECK(!strcmp(got, expected(i, v)), "%s: %d is printed \"%s\", want \"%s\"",
                     i->name, v, got, expected(i, v));
        }
    }
    LT_CHECK(ck_dtype_info_of(0) == NULL && ck_dtype_info_of(CK_DTYPE_MAX + 1) == NULL &&
             ck_dtype_info_of(-1) == NULL, "a code outside 1..%d has a row", CK_DTYPE_MAX);
    ck_dtype back = 0;
    LT_CHECK(ck_st_dtype_parse("C64", &back) == -EINVAL && ck_st_dtype_parse("", &back) < 0,
             "the export library parses a safetensors dtype the table lacks");
    printf("ok: %d dtypes, %d with a safetensors name\n", CK_DTYPE_MAX, with_st);
    return 0;
}
