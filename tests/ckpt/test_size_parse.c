/* Byte sizes: plain numbers, K/M/G/T and KiB..TiB as powers of 1024, KB..TB as
 * powers of 1000, up to 2^64-1 exactly; negative, fractional, overflowing, empty
 * or unknown-unit input is refused with -EINVAL and quoted. */
#include "layout_testlib.h"

static int good(const char *s, uint64_t want)
{
    uint64_t v = 0;
    ck_err err = {0};
    int rc = ck_size_parse(s, &v, &err);
    LT_CHECK(rc == 0 && v == want, "size \"%s\": rc %d value %llu, want %llu (%s)", s, rc,
             (unsigned long long)v, (unsigned long long)want, ck_err_msg(&err));
    return 0;
}

static int bad(const char *s, const char *needle)
{
    uint64_t v = 12345;
    ck_err err = {0};
    char what[96];
    snprintf(what, sizeof what, "size \"%s\"", s ? s : "(null)");
    if (lt_expect_einval(ck_size_parse(s, &v, &err), &err, what, needle))
        return 1;
    LT_CHECK(v == 12345, "%s: rejected but wrote the output", what);
    return 0;
}

int main(void)
{
    const uint64_t Ki = 1024, Mi = Ki * Ki, Gi = Mi * Ki, Ti = Gi * Ki;
    int f = 0;
    f |= good("0", 0);
    f |= good("4096", 4096);
    f |= good("007", 7);
    f |= good("64K", 64 * Ki);
    f |= good("64KiB", 64 * Ki);
    f |= good("64KB", 64000);
    f |= good("1M", Mi);
    f |= good("1MiB", Mi);
    f |= good("1MB", 1000000);
    f |= good("2G", 2 * Gi);
    f |= good("2GiB", 2 * Gi);
    f |= good("1GB", 1000000000);
    f |= good("3T", 3 * Ti);
    f |= good("3TiB", 3 * Ti);
    f |= good("3TB", 3000000000000ull);
    f |= good("18446744073709551615", UINT64_MAX);
    f |= good("16777215T", 16777215ull * Ti);
    f |= good("18014398509481983K", 18014398509481983ull * Ki);
    f |= good("18446744073709551KB", 18446744073709551000ull);

    f |= bad("", "\"\"");
    f |= bad(NULL, "\"\"");
    f |= bad("-1", "-1");
    f |= bad("-0", "-0");
    f |= bad("1.5G", "1.5G");
    f |= bad("0.5", "0.5");
    f |= bad("1,5M", "1,5M");
    f |= bad("18446744073709551616", "18446744073709551616");
    f |= bad("99999999999999999999999", "99999999999999999999999");
    f |= bad("16777216T", "16777216T");
    f |= bad("18014398509481984K", "18014398509481984K");
    f |= bad("18446744073709552KB", "18446744073709552KB");
    f |= bad("K", "\"K\"");
    f |= bad("KiB", "KiB");
    f |= bad("12Q", "12Q");
    f |= bad("1PB", "1PB");
    f |= bad("1k", "1k");
    f |= bad("1Kib", "1Kib");
    f |= bad("1 K", "1 K");
    f |= bad(" 1", " 1");
    f |= bad("1 ", "1 ");
    f |= bad("+1", "+1");
    f |= bad("0x10", "0x10");
    f |= bad("1e9", "1e9");
    return f;
}
