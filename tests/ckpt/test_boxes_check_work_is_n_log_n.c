/* ck_boxes_check takes O(n log n) steps whatever the list, counted (model/boxes.h), not
 * timed: on the lists that made the old sweep quadratic (boxes sharing the sweep dim's
 * range: a staircase tiling of 2 x n boxes, full-width rows and columns, nested
 * boxes) and on lists whose fault hides in the last dim of 8, at n up to 65536 boxes,
 * every check stays under 4 (d + 1)^2 (n + 1) + 2 d (n + 1) log2(2n + 2) steps, and
 * gives the right verdict and the element or boxes at fault. The times are printed. */
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "ck/error.h"
#include "layout_testlib.h"
#include "model/boxes.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double bound(uint32_t n, int d)
{
    double m = (double)n + 1;
    return 4.0 * (d + 1) * (d + 1) * m + 2.0 * d * m * log2(2.0 * m);
}

static ck_box box2(uint64_t r0, uint64_t r1, uint64_t c0, uint64_t c1)
{
    return (ck_box){ .ndim = 2, .off = { r0, c0 }, .len = { r1 - r0, c1 - c0 } };
}

/* Row i of an n x (n + 1) tensor in two boxes, cut after column i: every left box
 * starts at column 0, so a sweep along the columns compared each with all. */
static uint32_t staircase(uint32_t n, uint64_t *shape, ck_box *b)
{
    shape[0] = n, shape[1] = (uint64_t)n + 1;
    for (uint32_t i = 0; i < n; i++) {
        b[2 * i] = box2(i, i + 1, 0, i + 1);
        b[2 * i + 1] = box2(i, i + 1, i + 1, (uint64_t)n + 1);
    }
    return 2 * n;
}

/* Full-height columns, then one full-width row on top of them: every box shares the
 * range of both dims with the others. */
static uint32_t columns_and_a_row(uint32_t n, uint64_t *shape, ck_box *b)
{
    shape[0] = 4, shape[1] = n;
    for (uint32_t i = 0; i < n; i++)
        b[i] = box2(0, 4, i, i + 1);
    b[n] = box2(3, 4, 0, n);
    return n + 1;
}

/* Box i is [i, 2n - i) along both dims: each inside the one before. */
static uint32_t nested(uint32_t n, uint64_t *shape, ck_box *b)
{
    shape[0] = shape[1] = 2ull * n;
    for (uint32_t i = 0; i < n; i++)
        b[i] = box2(i, 2ull * n - i, i, 2ull * n - i);
    return n;
}

/* 8 dims, every box full along the first 7, a slab of the last; slab 3 is missing:
 * the narrowing keeps every box down to the last dim. */
static uint32_t deep_gap(uint32_t n, uint64_t *shape, ck_box *b)
{
    for (int d = 0; d < 7; d++)
        shape[d] = 2;
    shape[7] = n;
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (i == 3)
            continue;
        b[m] = (ck_box){ .ndim = 8 };
        for (int d = 0; d < 7; d++)
            b[m].len[d] = 2;
        b[m].off[7] = i;
        b[m].len[7] = 1;
        m++;
    }
    return m;
}

typedef struct family {
    const char *name;
    uint32_t (*make)(uint32_t n, uint64_t *shape, ck_box *b);
    int ndim;
    const char *want;            /* NULL: a tiling; else in the error */
} family;

int main(void)
{
    static const family fams[] = {
        { "staircase tiling (2 x n boxes)", staircase, 2, NULL },
        { "columns and a full-width row", columns_and_a_row, 2, "overlap" },
        { "nested boxes", nested, 2, "overlap" },
        { "8-D slabs, one missing", deep_gap, 8, "element [0, 0, 0, 0, 0, 0, 0, 3]" },
    };
    ck_box *b = malloc(2 * 65536 * sizeof *b + sizeof *b);
    LT_CHECK(b != NULL, "out of memory");
    for (size_t f = 0; f < sizeof fams / sizeof *fams; f++) {
        for (uint32_t n = 1024; n <= 65536; n *= 4) {
            uint64_t shape[CK_MAX_NDIM] = { 0 }, work = 0;
            uint32_t count = fams[f].make(n, shape, b);
            ck_err err = { 0 };
            double t0 = now_s();
            int rc = ck__boxes_check_work("w", fams[f].ndim, shape, count, b, &work, &err);
            double secs = now_s() - t0;
            double lim = bound(count, fams[f].ndim);
            printf("%-32s %6u boxes: %10llu steps (bound %.0f), %.3f s%s%s\n", fams[f].name,
                   count, (unsigned long long)work, lim, secs, rc ? ": " : "",
                   rc ? ck_err_msg(&err) : "");
            LT_CHECK((double)work <= lim, "%s, %u boxes: %llu steps, over the bound %.0f",
                     fams[f].name, count, (unsigned long long)work, lim);
            if (!fams[f].want)
                LT_CHECK(rc == 0, "%s, %u boxes: refused: %s", fams[f].name, count,
                         ck_err_msg(&err));
            else
                LT_CHECK(rc == -EINVAL && strstr(ck_err_msg(&err), fams[f].want),
                         "%s, %u boxes: %d '%s', expected '%s'", fams[f].name, count, rc,
                         ck_err_msg(&err), fams[f].want);
        }
    }
    free(b);
    return 0;
}
