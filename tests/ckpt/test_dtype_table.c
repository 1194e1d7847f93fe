/* The dtype codes are on-disk format: each code keeps its size and name, names and
 * torch aliases parse back to the code, and unknown codes or names are refused. */
#include "layout_testlib.h"

static const struct {
    int code;
    size_t size;
    const char *name, *alias;
} want[] = {
    {1, 4, "f32", "float32"},  {2, 2, "bf16", "bfloat16"}, {3, 2, "f16", "float16"},
    {4, 8, "f64", "float64"},  {5, 8, "i64", "int64"},     {6, 4, "i32", "int32"},
    {7, 2, "i16", "int16"},    {8, 1, "i8", "int8"},       {9, 1, "u8", "uint8"},
    {10, 1, "bool", NULL},
    /* format 1.1 */
    {11, 2, "u16", "uint16"},  {12, 4, "u32", "uint32"},   {13, 8, "u64", "uint64"},
    {14, 1, "f8e4m3", "float8_e4m3fn"}, {15, 1, "f8e5m2", "float8_e5m2"},
    {16, 8, "c64", "complex64"}, {17, 16, "c128", "complex128"},
};

static int check_parses_to(const char *s, int code)
{
    ck_dtype t = 0;
    ck_err err = {0};
    int rc = ck_dtype_parse(s, &t, &err);
    LT_CHECK(rc == 0 && (int)t == code, "ck_dtype_parse(\"%s\") = %d (code %d), want "
             "code %d: %s", s, rc, (int)t, code, ck_err_msg(&err));
    return 0;
}

int main(void)
{
    LT_CHECK(CK_DTYPE_MAX == 17, "CK_DTYPE_MAX is %d, the table here has 17",
             CK_DTYPE_MAX);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int c = want[i].code;
        LT_CHECK(ck_dtype_size(c) == want[i].size, "code %d: size %zu, want %zu", c,
                 ck_dtype_size(c), want[i].size);
        LT_CHECK(ck_dtype_name(c) && strcmp(ck_dtype_name(c), want[i].name) == 0,
                 "code %d: name \"%s\", want \"%s\"", c,
                 ck_dtype_name(c) ? ck_dtype_name(c) : "(null)", want[i].name);
        if (check_parses_to(want[i].name, c) ||
            (want[i].alias && check_parses_to(want[i].alias, c)))
            return 1;
    }
    const int bad_codes[] = {0, -1, 18, 255, 1 << 20};
    for (size_t i = 0; i < sizeof bad_codes / sizeof bad_codes[0]; i++)
        LT_CHECK(ck_dtype_size(bad_codes[i]) == 0 && ck_dtype_name(bad_codes[i]) == NULL,
                 "code %d is not a dtype but has a size or a name", bad_codes[i]);

    const char *bad[] = {"", "F32", "f32 ", "float", "fp8", "int", "f3", "bfloat"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_dtype t = CK_F32;
        ck_err err = {0};
        char what[64];
        snprintf(what, sizeof what, "dtype \"%s\"", bad[i]);
        if (lt_expect_einval(ck_dtype_parse(bad[i], &t, &err), &err, what, bad[i]))
            return 1;
        LT_CHECK(t == CK_F32, "%s: rejected but wrote the output", what);
    }
    return 0;
}
