/* ck_boxes_check agrees with counting every element: on random grids of tiles (1-D to
 * 3-D, some empty, shuffled) it accepts; after one random change (a tile grown,
 * shrunk, moved, duplicated, dropped, pushed outside) it accepts exactly when every
 * element is still covered once and every box lies inside, as a per-element count
 * says; a refusal names the tensor. Counts past the limit and element counts that
 * overflow are refused before any box is read. */
#include "ck/error.h"
#include "layout_testlib.h"

#define MAXB 64

/* A grid of tiles over shape: random cuts per dim (repeats make empty tiles). */
static uint32_t grid(uint64_t *rng, int ndim, const uint64_t *shape, ck_box *b)
{
    uint64_t cuts[3][5], nc[3];
    uint32_t n = 1;
    for (int d = 0; d < ndim; d++) {
        nc[d] = lt_range(rng, 1, 4);
        cuts[d][0] = 0;
        cuts[d][nc[d]] = shape[d];
        for (uint64_t k = 1; k < nc[d]; k++)
            cuts[d][k] = lt_range(rng, 0, shape[d]);
        for (uint64_t a = 1; a < nc[d]; a++)
            for (uint64_t c = a; c > 1 && cuts[d][c - 1] > cuts[d][c]; c--) {
                uint64_t t = cuts[d][c];
                cuts[d][c] = cuts[d][c - 1], cuts[d][c - 1] = t;
            }
        n *= (uint32_t)nc[d];
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t rem = i;
        b[i] = (ck_box){ .ndim = ndim };
        for (int d = ndim - 1; d >= 0; d--) {
            uint64_t k = rem % nc[d];
            rem /= (uint32_t)nc[d];
            b[i].off[d] = cuts[d][k];
            b[i].len[d] = cuts[d][k + 1] - cuts[d][k];
        }
    }
    for (uint32_t i = n; i > 1; i--) {       /* the order of a list is the caller's */
        uint32_t j = (uint32_t)lt_range(rng, 0, i - 1);
        ck_box t = b[i - 1];
        b[i - 1] = b[j], b[j] = t;
    }
    return n;
}

int main(void)
{
    uint64_t rng = 2026;
    int accepted = 0, refused = 0;
    for (int trial = 0; trial < 3000; trial++) {
        int ndim = (int)lt_range(&rng, 0, 3);
        uint64_t shape[3];
        for (int d = 0; d < ndim; d++)
            shape[d] = lt_range(&rng, trial % 7 ? 1 : 0, 9);
        ck_box b[MAXB];
        uint32_t n = grid(&rng, ndim, shape, b);
        ck_err err = { 0 };
        LT_CHECK(ck_boxes_check("w", ndim, shape, n, b, &err) == 0,
                 "trial %d: a grid of %u tiles refused: %s", trial, n, ck_err_msg(&err));
        /* One change, then the two judges must agree. */
        uint32_t i = (uint32_t)lt_range(&rng, 0, n - 1);
        int d = ndim ? (int)lt_range(&rng, 0, (uint64_t)ndim - 1) : 0;
        switch (lt_range(&rng, 0, 5)) {
        case 0: if (ndim) b[i].len[d]++; break;
        case 1: if (ndim && b[i].len[d]) b[i].len[d]--; break;
        case 2: if (ndim) b[i].off[d] = lt_range(&rng, 0, shape[d]); break;
        case 3: if (n < MAXB) b[n++] = b[i]; break;
        case 4: b[i] = b[--n]; break;
        case 5: if (ndim) b[i].off[d] += shape[d] + 1; break;
        }
        bool want = lt_tiles_by_count(ndim, shape, n, b);
        int rc = ck_boxes_check("w", ndim, shape, n, b, &err);
        LT_CHECK((rc == 0) == want, "trial %d: ck_boxes_check says %d (%s), counting says %s",
                 trial, rc, ck_err_msg(&err), want ? "a tiling" : "not a tiling");
        LT_CHECK(rc == 0 || strstr(ck_err_msg(&err), "tensor w"), "trial %d: '%s' does not "
                 "name the tensor", trial, ck_err_msg(&err));
        want ? accepted++ : refused++;
    }
    LT_CHECK(accepted > 300 && refused > 300, "the changes were too kind or too harsh: %d "
             "accepted, %d refused", accepted, refused);
    ck_box one = { .ndim = 1, .len = { 4 } };
    uint64_t four = 4;
    ck_err err = { 0 };
    LT_CHECK(ck_boxes_check("w", 1, &four, CK_MAX_BOXES + 1, &one, &err) == -E2BIG,
             "a count past CK_MAX_BOXES was not refused before reading the list");
    uint64_t huge[3] = { 1ull << 40, 1ull << 40, 0 };
    ck_box none[1] = { { .ndim = 3 } };
    LT_CHECK(ck_boxes_check("w", 3, huge, 0, none, &err) == 0,
             "an empty tensor of huge dims: no boxes needed: %s", ck_err_msg(&err));
    LT_CHECK(ck_boxes_check("w", 2, huge, 1, none, &err) == -EINVAL &&
             strstr(ck_err_msg(&err), "overflows"), "2^80 elements: '%s'", ck_err_msg(&err));
    return 0;
}
