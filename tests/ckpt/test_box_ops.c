/* Box algebra: full boxes and their element counts (1 for 0-D, 0 with an empty
 * dim), equality, and intersection checked against element-by-element membership
 * on random boxes, plus the edge cases (touching, empty, 0-D, aliasing). */
#include "layout_testlib.h"
#include "model/layout.h"

static bool in_box(const ck_box *b, const uint64_t *g)
{
    for (int d = 0; d < b->ndim; d++)
        if (g[d] < b->off[d] || g[d] >= b->off[d] + b->len[d])
            return false;
    return true;
}

static int check_full_and_numel(void)
{
    ck_box b;
    ck_box_full(0, NULL, &b);
    LT_CHECK(b.ndim == 0 && ck_box_numel(&b) == 1, "0-D full box: ndim %d numel %llu, "
             "want 0 and 1", b.ndim, (unsigned long long)ck_box_numel(&b));
    uint64_t s[] = {3, 4, 5};
    ck_box_full(3, s, &b);
    LT_CHECK(ck_box_numel(&b) == 60 && b.off[0] == 0 && b.off[2] == 0 && b.len[1] == 4,
             "full box of [3,4,5] is wrong (numel %llu)",
             (unsigned long long)ck_box_numel(&b));
    uint64_t e[] = {3, 0, 5};
    ck_box_full(3, e, &b);
    LT_CHECK(ck_box_numel(&b) == 0, "full box of [3,0,5] has %llu elements",
             (unsigned long long)ck_box_numel(&b));
    return 0;
}

static int check_edges(void)
{
    uint64_t s[] = {4, 4};
    ck_box a, b, out;
    ck_box_full(2, s, &a);
    b = a;
    LT_CHECK(ck_box_equal(&a, &b), "a box differs from its copy");
    b.off[1] = 4;
    b.len[1] = 2;
    LT_CHECK(!ck_box_equal(&a, &b), "boxes with different offsets compare equal");
    LT_CHECK(!ck__box_intersect(&a, &b, &out), "boxes that only touch at column 4 "
             "intersect");
    b.off[1] = 1;
    b.len[1] = 0;
    LT_CHECK(!ck__box_intersect(&a, &b, &out), "an empty box intersects");

    ck_box z0, z1;
    ck_box_full(0, NULL, &z0);
    ck_box_full(0, NULL, &z1);
    LT_CHECK(ck_box_equal(&z0, &z1), "two 0-D boxes differ");
    LT_CHECK(ck__box_intersect(&z0, &z1, &out) && out.ndim == 0 && ck_box_numel(&out) == 1,
             "two 0-D boxes must share their one element");
    LT_CHECK(!ck_box_equal(&z0, &a) && !ck__box_intersect(&z0, &a, &out),
             "boxes of different ndim compare equal or intersect");

    /* The result may overwrite an input. */
    b.off[0] = 2; b.len[0] = 5; b.off[1] = 1; b.len[1] = 2;
    LT_CHECK(ck__box_intersect(&a, &b, &a) && a.off[0] == 2 && a.len[0] == 2 &&
             a.off[1] == 1 && a.len[1] == 2, "intersecting into an input gives "
             "[%llu,+%llu)x[%llu,+%llu), want [2,+2)x[1,+2)", (unsigned long long)a.off[0],
             (unsigned long long)a.len[0], (unsigned long long)a.off[1],
             (unsigned long long)a.len[1]);
    return 0;
}

static void random_box(uint64_t *seed, ck_box *b)
{
    memset(b, 0, sizeof *b);
    b->ndim = 3;
    for (int d = 0; d < 3; d++) {
        b->off[d] = lt_range(seed, 0, 7);
        b->len[d] = lt_range(seed, 0, 8 - b->off[d]);
    }
}

static int check_random_intersections(void)
{
    uint64_t seed = 0x5eed0004;
    uint64_t s[] = {8, 8, 8};
    ck_box all;
    ck_box_full(3, s, &all);
    for (int iter = 0; iter < 20000; iter++) {
        ck_box a, b, out;
        random_box(&seed, &a);
        random_box(&seed, &b);
        bool hit = ck__box_intersect(&a, &b, &out);
        uint64_t both = 0, g[3];
        lt_box_first(&all, g);
        do {
            bool ia = in_box(&a, g) && in_box(&b, g);
            both += ia;
            LT_CHECK(!hit || ia == in_box(&out, g), "intersection of random boxes "
                     "(iteration %d) disagrees with membership at (%llu,%llu,%llu)",
                     iter, (unsigned long long)g[0], (unsigned long long)g[1],
                     (unsigned long long)g[2]);
        } while (lt_box_step(&all, g));
        LT_CHECK(hit == (both > 0), "iteration %d: intersect says %d but the boxes "
                 "share %llu elements", iter, hit, (unsigned long long)both);
        LT_CHECK(!hit || ck_box_numel(&out) == both, "iteration %d: intersection has "
                 "%llu elements, the boxes share %llu", iter,
                 (unsigned long long)ck_box_numel(&out), (unsigned long long)both);
    }
    return 0;
}

int main(void)
{
    if (check_full_and_numel() || check_edges() || check_random_intersections())
        return 1;
    return 0;
}
