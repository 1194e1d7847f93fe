/* ck__runs on hand-worked boxes: the exact runs, merging of fully covered trailing
 * dims (a dim-0 slice is one run), 0-D tensors as one run of one element, no runs
 * for an empty sub box, and no runs again once the iterator is done. */
#include "layout_testlib.h"
#include "model/layout.h"

typedef struct run {
    uint64_t s, d, n;
} run;

static ck_box mkbox(int ndim, const uint64_t *off, const uint64_t *len)
{
    ck_box b;
    memset(&b, 0, sizeof b);
    b.ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        b.off[d] = off[d];
        b.len[d] = len[d];
    }
    return b;
}

static int expect_runs(const char *what, const ck_box *sub, const ck_box *src,
                       const ck_box *dst, const run *want, int nwant)
{
    ck__runs it;
    ck__runs_init(&it, sub, src, dst);
    uint64_t s, d, n;
    int i = 0;
    while (ck__runs_next(&it, &s, &d, &n)) {
        LT_CHECK(i < nwant, "%s: more than the %d expected runs", what, nwant);
        LT_CHECK(s == want[i].s && d == want[i].d && n == want[i].n,
                 "%s: run %d is (src %llu, dst %llu, n %llu), want (%llu, %llu, %llu)",
                 what, i, (unsigned long long)s, (unsigned long long)d,
                 (unsigned long long)n, (unsigned long long)want[i].s,
                 (unsigned long long)want[i].d, (unsigned long long)want[i].n);
        i++;
    }
    LT_CHECK(i == nwant, "%s: %d runs, want %d", what, i, nwant);
    LT_CHECK(!ck__runs_next(&it, &s, &d, &n), "%s: a run after the iterator ended", what);
    return 0;
}

int main(void)
{
    const uint64_t z[4] = {0, 0, 0, 0};
    int fails = 0;

    uint64_t s456[] = {4, 5, 6};
    ck_box full456 = mkbox(3, z, s456);
    fails |= expect_runs("whole [4,5,6] tensor", &full456, &full456, &full456,
                         (run[]){{0, 0, 120}}, 1);

    /* Rows 1..2 of a [4,5,6] tensor into a shard that holds just those rows. */
    uint64_t o1[] = {1, 0, 0}, l2[] = {2, 5, 6};
    ck_box rows = mkbox(3, o1, l2);
    fails |= expect_runs("dim-0 slice into its own shard", &rows, &full456, &rows,
                         (run[]){{30, 0, 60}}, 1);

    /* Columns 3..5 of a [4,6] tensor: one run per row in both storages. */
    uint64_t s46[] = {4, 6}, oc[] = {0, 3}, lc[] = {4, 3};
    ck_box full46 = mkbox(2, z, s46), cols = mkbox(2, oc, lc);
    fails |= expect_runs("dim-1 slice of [4,6]", &cols, &full46, &cols,
                         (run[]){{3, 0, 3}, {9, 3, 3}, {15, 6, 3}, {21, 9, 3}}, 4);

    /* The source shard covers its rows fully but the target does not: runs stay
     * per row even though they are adjacent in the source. */
    uint64_t lh[] = {4, 3};
    ck_box left = mkbox(2, z, lh);
    fails |= expect_runs("S(1) shard into full [4,6]", &left, &left, &full46,
                         (run[]){{0, 0, 3}, {3, 6, 3}, {6, 12, 3}, {9, 18, 3}}, 4);

    /* An inner block of both: rows 1..2, columns 2..4. */
    uint64_t ob[] = {1, 2}, lb[] = {2, 3};
    ck_box block = mkbox(2, ob, lb);
    fails |= expect_runs("inner block of [4,6]", &block, &full46, &block,
                         (run[]){{8, 0, 3}, {14, 3, 3}}, 2);

    /* Fully covered dims 2..3 merge with the partial dim 1. */
    uint64_t s2345[] = {2, 3, 4, 5}, om[] = {0, 1, 0, 0}, lm[] = {2, 1, 4, 5};
    ck_box full2345 = mkbox(4, z, s2345), mid = mkbox(4, om, lm);
    fails |= expect_runs("dim-1 slice of [2,3,4,5]", &mid, &full2345, &full2345,
                         (run[]){{20, 20, 20}, {80, 80, 20}}, 2);

    ck_box scalar = mkbox(0, z, z);
    fails |= expect_runs("0-D tensor", &scalar, &scalar, &scalar, (run[]){{0, 0, 1}}, 1);

    uint64_t one[] = {1};
    ck_box single = mkbox(1, z, one);
    fails |= expect_runs("1-element tensor", &single, &single, &single,
                         (run[]){{0, 0, 1}}, 1);

    uint64_t s304[] = {3, 0, 4};
    ck_box empty = mkbox(3, z, s304);
    fails |= expect_runs("sub box with a 0-length dim", &empty, &empty, &empty, NULL, 0);
    return fails;
}
