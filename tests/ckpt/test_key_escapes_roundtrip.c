/* Tensor and blob names (format 1.1): any byte string of a state dict's keys encodes
 * to a name ck_key_check accepts and decodes back to the same bytes; names of plain
 * [A-Za-z0-9._-] are their own encoding; malformed escapes and names ck_name_check
 * refuses for checkpoints are refused; a key too long once escaped is refused. */
#include <errno.h>

#include "ck/ckpt.h"
#include "layout_testlib.h"

static int roundtrip(const char *raw, size_t n, const char *want)
{
    char enc[CK_NAME_MAX], dec[CK_NAME_MAX];
    size_t dl = 0;
    ck_err err = { 0 };
    LT_CHECK(ck_key_encode(raw, n, enc, sizeof enc) == 0, "encoding '%.*s'", (int)n, raw);
    LT_CHECK(!want || !strcmp(enc, want), "'%.*s' encodes to '%s', want '%s'", (int)n, raw,
             enc, want);
    LT_CHECK(ck_key_check("tensor", enc, &err) == 0, "'%s' refused: %s", enc, ck_err_msg(&err));
    LT_CHECK(ck_key_decode(enc, dec, sizeof dec, &dl) == 0 && dl == n && !memcmp(dec, raw, n),
             "'%s' does not decode back", enc);
    return 0;
}

int main(void)
{
    if (roundtrip("layers.0.attention.wq.weight", 28, "layers.0.attention.wq.weight") ||
        roundtrip("a/b c", 5, "a%2Fb%20c") || roundtrip("50%", 3, "50%25") ||
        roundtrip(".hidden", 7, "%2Ehidden") || roundtrip("x.", 2, "x.") ||
        roundtrip("caf\xc3\xa9", 5, "caf%C3%A9") || roundtrip("a\0b", 3, "a%00b"))
        return 1;
    uint64_t rng = 5;
    for (int t = 0; t < 2000; t++) {       /* random bytes, every value */
        char raw[80];
        size_t n = (size_t)lt_range(&rng, 1, sizeof raw);
        for (size_t i = 0; i < n; i++)
            raw[i] = (char)lt_rand(&rng);
        if (roundtrip(raw, n, NULL))
            return 1;
    }
    const char *bad[] = { "%", "%4", "%4g", "%2f", "a%zz", "a b", "a/b", ".x", "" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_err err = { 0 };
        char dec[CK_NAME_MAX];
        LT_CHECK(ck_key_check("tensor", bad[i], &err) == -EINVAL && strstr(ck_err_msg(&err),
                 "tensor name"), "'%s' accepted as a tensor name", bad[i]);
        LT_CHECK(i >= 5 || ck_key_decode(bad[i], dec, sizeof dec, NULL) == -EINVAL,
                 "'%s' decoded", bad[i]);
    }
    ck_err err = { 0 };
    LT_CHECK(ck_name_check("checkpoint", "a%2Fb", &err) == -EINVAL,
             "an escape accepted in a checkpoint name");
    char big[200], enc[CK_NAME_MAX];
    memset(big, '/', sizeof big);
    LT_CHECK(ck_key_encode(big, sizeof big, enc, sizeof enc) == -ENAMETOOLONG,
             "200 bytes that escape to 600 accepted");
    LT_CHECK(ck_key_encode("", 0, enc, sizeof enc) == -EINVAL, "an empty key accepted");
    return 0;
}
