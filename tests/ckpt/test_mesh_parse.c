/* Mesh specs: good shapes and names parse and format back; bad ones ("0x4", "2x",
 * "x2", "", non-digits, too many ranks or dims, bad or miscounted names) are
 * refused with -EINVAL and a message that quotes them. */
#include "layout_testlib.h"

static int good(const char *shape, const char *names, int ndim, const uint32_t *size,
                uint64_t world, const char *const *want_names)
{
    ck_mesh m;
    ck_err err = {0};
    int rc = ck_mesh_parse(shape, names, &m, &err);
    LT_CHECK(rc == 0, "mesh \"%s\" names \"%s\": rejected: %s", shape,
             names ? names : "(null)", ck_err_msg(&err));
    LT_CHECK(m.ndim == ndim, "mesh \"%s\": ndim %d, want %d", shape, m.ndim, ndim);
    for (int d = 0; d < ndim; d++) {
        LT_CHECK(m.size[d] == size[d], "mesh \"%s\": dim %d size %u, want %u", shape, d,
                 m.size[d], size[d]);
        const char *wn = want_names ? want_names[d] : "";
        LT_CHECK(strcmp(m.name[d], wn) == 0, "mesh \"%s\": dim %d name \"%s\", want "
                 "\"%s\"", shape, d, m.name[d], wn);
    }
    LT_CHECK(ck_mesh_world(&m) == world, "mesh \"%s\": world %llu, want %llu", shape,
             (unsigned long long)ck_mesh_world(&m), (unsigned long long)world);
    char buf[64];
    int n = ck_mesh_format(&m, buf, sizeof buf);
    LT_CHECK(n == (int)strlen(buf) && strcmp(buf, shape) == 0,
             "mesh \"%s\" formats as \"%s\" (returned %d)", shape, buf, n);
    /* Truncated output still reports the full length, like snprintf. */
    char small[2];
    LT_CHECK(ck_mesh_format(&m, small, sizeof small) == n && small[1] == '\0',
             "mesh \"%s\": formatting into 2 bytes does not behave like snprintf", shape);
    LT_CHECK(ck_mesh_format(&m, NULL, 0) == n, "mesh \"%s\": sizing call returns a "
             "different length", shape);
    return 0;
}

static int bad(const char *shape, const char *names, const char *needle)
{
    ck_mesh m = {.ndim = 99};
    ck_err err = {0};
    char what[128];
    snprintf(what, sizeof what, "mesh \"%s\" names \"%s\"", shape ? shape : "(null)",
             names ? names : "(null)");
    if (lt_expect_einval(ck_mesh_parse(shape, names, &m, &err), &err, what, needle))
        return 1;
    LT_CHECK(m.ndim == 99, "%s: rejected but wrote the output", what);
    return 0;
}

static int check_equal(void)
{
    ck_mesh a, b;
    ck_mesh_parse("2x4", "dp,tp", &a, NULL);
    ck_mesh_parse("2x4", "dp,tp", &b, NULL);
    LT_CHECK(ck_mesh_equal(&a, &b), "2x4 dp,tp differs from itself");
    ck_mesh_parse("2x4", "dp,sp", &b, NULL);
    LT_CHECK(!ck_mesh_equal(&a, &b), "meshes with different names compare equal");
    ck_mesh_parse("4x2", "dp,tp", &b, NULL);
    LT_CHECK(!ck_mesh_equal(&a, &b), "2x4 equals 4x2");
    ck_mesh_parse("2x4x1", NULL, &b, NULL);
    ck_mesh_parse("2x4", NULL, &a, NULL);
    LT_CHECK(!ck_mesh_equal(&a, &b), "2x4 equals 2x4x1");
    return 0;
}

int main(void)
{
    int f = 0;
    f |= good("4", NULL, 1, (uint32_t[]){4}, 4, NULL);
    f |= good("1", NULL, 1, (uint32_t[]){1}, 1, NULL);
    f |= good("2x8", "replicate,shard", 2, (uint32_t[]){2, 8}, 16,
              (const char *[]){"replicate", "shard"});
    f |= good("2x2x2", "dp,tp,pp", 3, (uint32_t[]){2, 2, 2}, 8,
              (const char *[]){"dp", "tp", "pp"});
    f |= good("1x2x3x4", "a_1,B-2,c,D", 4, (uint32_t[]){1, 2, 3, 4}, 24,
              (const char *[]){"a_1", "B-2", "c", "D"});
    f |= good("1048576", NULL, 1, (uint32_t[]){1u << 20}, 1u << 20, NULL);
    f |= good("1024x1024", NULL, 2, (uint32_t[]){1024, 1024}, 1u << 20, NULL);
    f |= good("2x4", "abcdefghijklmnopqrstuvwxyz01234,x", 2, (uint32_t[]){2, 4}, 8,
              (const char *[]){"abcdefghijklmnopqrstuvwxyz01234", "x"});

    f |= bad("0x4", NULL, "0x4");
    f |= bad("4x0", NULL, "4x0");
    f |= bad("2x", NULL, "2x");
    f |= bad("x2", NULL, "x2");
    f |= bad("", NULL, "\"\"");
    f |= bad(NULL, NULL, "\"\"");
    f |= bad("2*4", NULL, "2*4");
    f |= bad("2X4", NULL, "2X4");
    f |= bad("a", NULL, "\"a\"");
    f |= bad(" 2", NULL, " 2");
    f |= bad("2x4 ", NULL, "2x4 ");
    f |= bad("-2", NULL, "-2");
    f |= bad("+2", NULL, "+2");
    f |= bad("2x-4", NULL, "2x-4");
    f |= bad("2xx4", NULL, "2xx4");
    f |= bad("1048577", NULL, "1048577");
    f |= bad("2x524289", NULL, "2x524289");
    f |= bad("1024x1024x2", NULL, "1024x1024x2");
    f |= bad("99999999999999999999999", NULL, "99999999999999999999999");
    f |= bad("1x1x1x1x1", NULL, "1x1x1x1x1");
    f |= bad("2x2", "dp", "\"dp\"");
    f |= bad("2x2", "dp,tp,pp", "dp,tp,pp");
    f |= bad("2x2", "", "\"\"");
    f |= bad("2x2", "dp,", "dp,");
    f |= bad("2x2", ",tp", ",tp");
    f |= bad("2x2", "dp,t p", "dp,t p");
    f |= bad("2x2", "dp,t.p", "dp,t.p");
    f |= bad("2x2", "dp,dp", "dp,dp");
    f |= bad("2x4", "abcdefghijklmnopqrstuvwxyz012345,x", "abcdefghijklmnopqrstuvwxyz012345");
    f |= check_equal();
    return f;
}
