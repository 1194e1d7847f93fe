/* ck_chunk must reproduce torch.chunk + DTensor's empty padding for every n and
 * part count a mesh can produce, and stay exact near 2^64 where ceil(n/p) via
 * n + p - 1 would wrap. */
#include "layout_testlib.h"

/* Sizes of the pieces torch.chunk(torch.arange(n), parts) returns, with the missing
 * trailing parts padded with 0 as DTensor does: a readable anchor for the table. */
static const struct {
    uint64_t n, parts;
    uint64_t len[9];
} torch_rows[] = {
    {5, 4, {2, 2, 1, 0}},
    {6, 4, {2, 2, 2, 0}},
    {10, 3, {4, 4, 2}},
    {1, 9, {1, 0, 0, 0, 0, 0, 0, 0, 0}},
    {0, 3, {0, 0, 0}},
    {7, 7, {1, 1, 1, 1, 1, 1, 1}},
    {17, 5, {4, 4, 4, 4, 1}},
    {9, 6, {2, 2, 2, 2, 1, 0}},
};

static int check_literal_rows(void)
{
    for (size_t r = 0; r < sizeof torch_rows / sizeof torch_rows[0]; r++) {
        uint64_t start = 0;
        for (uint64_t i = 0; i < torch_rows[r].parts; i++) {
            uint64_t off, len;
            ck_chunk(torch_rows[r].n, torch_rows[r].parts, i, &off, &len);
            LT_CHECK(len == torch_rows[r].len[i] && (len == 0 || off == start),
                     "torch.chunk(%llu, %llu) part %llu: got [%llu,+%llu), torch gives "
                     "%llu elements at %llu", (unsigned long long)torch_rows[r].n,
                     (unsigned long long)torch_rows[r].parts, (unsigned long long)i,
                     (unsigned long long)off, (unsigned long long)len,
                     (unsigned long long)torch_rows[r].len[i], (unsigned long long)start);
            start += len;
        }
    }
    return 0;
}

static int check_table(void)
{
    for (uint64_t n = 0; n <= 40; n++) {
        for (uint64_t parts = 1; parts <= 9; parts++) {
            uint64_t want_off[9], want_len[9];
            lt_torch_chunk(n, parts, want_off, want_len);
            for (uint64_t i = 0; i < parts; i++) {
                uint64_t off, len;
                ck_chunk(n, parts, i, &off, &len);
                LT_CHECK(off == want_off[i] && len == want_len[i],
                         "ck_chunk(n=%llu, parts=%llu, idx=%llu) = [%llu,+%llu), "
                         "torch.chunk gives [%llu,+%llu)", (unsigned long long)n,
                         (unsigned long long)parts, (unsigned long long)i,
                         (unsigned long long)off, (unsigned long long)len,
                         (unsigned long long)want_off[i], (unsigned long long)want_len[i]);
            }
        }
    }
    return 0;
}

/* Near 2^64 the parts must still tile [0, n) in order with no wrap-around. */
static int check_huge(void)
{
    const uint64_t ns[] = {UINT64_MAX, UINT64_MAX - 1, INT64_MAX, (1ull << 63) + 7};
    const uint64_t ps[] = {1, 2, 3, 7, 1u << 20};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
        for (size_t b = 0; b < sizeof ps / sizeof ps[0]; b++) {
            uint64_t n = ns[a], parts = ps[b], next = 0, prev = 0;
            bool have_prev = false;
            /* Parts at the start, around the middle and at the end. */
            uint64_t idx[] = {0, 1, parts / 2, parts - 2, parts - 1};
            for (size_t k = 0; k < sizeof idx / sizeof idx[0]; k++) {
                uint64_t i = idx[k], off, len;
                if (i >= parts)
                    continue;
                ck_chunk(n, parts, i, &off, &len);
                LT_CHECK(off <= n && len <= n - off,
                         "ck_chunk(n=%llu, parts=%llu, idx=%llu) = [%llu,+%llu) "
                         "leaves [0,n)", (unsigned long long)n, (unsigned long long)parts,
                         (unsigned long long)i, (unsigned long long)off,
                         (unsigned long long)len);
                if (have_prev && i == prev + 1)
                    LT_CHECK(off == next, "ck_chunk(n=%llu, parts=%llu): part %llu starts "
                             "at %llu, previous ended at %llu", (unsigned long long)n,
                             (unsigned long long)parts, (unsigned long long)i,
                             (unsigned long long)off, (unsigned long long)next);
                next = off + len;
                prev = i;
                have_prev = true;
            }
            uint64_t off, len;
            ck_chunk(n, parts, parts - 1, &off, &len);
            LT_CHECK(off + len == n, "ck_chunk(n=%llu, parts=%llu): last part ends at "
                     "%llu", (unsigned long long)n, (unsigned long long)parts,
                     (unsigned long long)(off + len));
        }
    }
    return 0;
}

int main(void)
{
    if (check_literal_rows() || check_table() || check_huge())
        return 1;
    return 0;
}
