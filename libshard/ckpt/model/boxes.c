/* boxes.c - whether a list of boxes tiles a tensor (see ck/layout.h and model/boxes.h).
 *
 * A box list comes from outside (a DCP planner, a manifest, a client's message), so
 * it is checked before anything trusts it: a gap would leave bytes of a load
 * unwritten, an overlap would let two ranks disagree about an element. The check
 * must cost O(n log n) whatever the list: it runs on every BEGIN ckptd takes, and a
 * sweep that compares boxes sharing a dim's range costs n^2 for lists made so
 * (docs/decisions/0124-boxes-fingerprint.md).
 *
 * The boxes tile the tensor T exactly when their cover count f(x) (how many boxes hold
 * element x) is 1 on all of T. Write each box as the signed sum of its 2^d corners
 * (+ at its low corner, a sign flip per upper coordinate): f is the prefix sum of the
 * corners' weights, so f = 1 on T exactly when the weights of the corners inside T
 * (every coordinate below the shape; corners on the upper faces only count outside T)
 * are those of T itself, a single +1 at the origin. Those weights are the
 * coefficients of a polynomial of degree d with one variable per (dim, coordinate):
 *   G = sum over boxes of prod over dims (x[k][off] - x[k][end]) - prod over dims x[k][0]
 * with x[k][shape[k]] = 0. G is evaluated at pseudo-random points (SipHash of the
 * coordinate under a key drawn for the call): O(n d), no sorting. G = 0 is a
 * tiling; a nonzero value proves there is none; a zero value where G is not zero (a
 * wrong "tiles") has probability at most d / (2^61 - 1) per point, and two points are
 * taken.
 *
 * A list found not to tile is named by an element covered twice or never: the
 * lexicographically first corner of nonzero weight is such an element (every corner
 * below it weighs 0, so its count is 1 + its weight). It is found one dim at a time:
 * the corners of the current group are sorted on that dim's coordinate and the first
 * coordinate whose slice evaluates nonzero is kept, so each dim costs one sort of at
 * most n + 1 entries. The element is then confirmed by counting the boxes that hold
 * it, so every error names a real overlap or gap.
 */
#include "model/boxes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define PRIME ((1ull << 61) - 1)
#define POINTS 2               /* evaluations of G */

typedef struct tiling {
    int ndim;
    const uint64_t *shape;
    uint64_t key[POINTS][2];
    uint64_t *work;            /* steps taken, for model/boxes.h */
} tiling;

/* ---- arithmetic modulo 2^61 - 1 ---- */

static uint64_t mod_add(uint64_t a, uint64_t b)
{
    uint64_t s = a + b;
    return s >= PRIME ? s - PRIME : s;
}

static uint64_t mod_sub(uint64_t a, uint64_t b)
{
    return a >= b ? a - b : a + PRIME - b;
}

static uint64_t mod_mul(uint64_t a, uint64_t b)
{
    unsigned __int128 p = (unsigned __int128)a * b;
    uint64_t s = ((uint64_t)p & PRIME) + (uint64_t)(p >> 61);
    return s >= PRIME ? s - PRIME : s;
}

/* ---- the points: SipHash-2-4 of (coordinate, dim) ---- */

#define ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))

static void sip_round(uint64_t v[4])
{
    v[0] += v[1], v[1] = ROTL(v[1], 13), v[1] ^= v[0], v[0] = ROTL(v[0], 32);
    v[2] += v[3], v[3] = ROTL(v[3], 16), v[3] ^= v[2];
    v[0] += v[3], v[3] = ROTL(v[3], 21), v[3] ^= v[0];
    v[2] += v[1], v[1] = ROTL(v[1], 17), v[1] ^= v[2], v[2] = ROTL(v[2], 32);
}

static uint64_t siphash16(const uint64_t key[2], uint64_t m0, uint64_t m1)
{
    uint64_t v[4] = { 0x736f6d6570736575ull ^ key[0], 0x646f72616e646f6dull ^ key[1],
                      0x6c7967656e657261ull ^ key[0], 0x7465646279746573ull ^ key[1] };
    const uint64_t m[3] = { m0, m1, 16ull << 56 };
    for (int i = 0; i < 3; i++) {
        v[3] ^= m[i];
        sip_round(v);
        sip_round(v);
        v[0] ^= m[i];
    }
    v[2] ^= 0xff;
    for (int i = 0; i < 4; i++)
        sip_round(v);
    return v[0] ^ v[1] ^ v[2] ^ v[3];
}

/* x[k][v] at point pt; 0 on the upper face, whose corners lie outside the tensor. */
static uint64_t coord(const tiling *t, int pt, int k, uint64_t v)
{
    (*t->work)++;
    return v == t->shape[k] ? 0 : siphash16(t->key[pt], v, (uint64_t)k) % PRIME;
}

/* A box's term at point pt over dims from..ndim-1; box NULL: the tensor's, negated. */
static uint64_t term(const tiling *t, int pt, const ck_box *b, int from)
{
    uint64_t p = 1;
    for (int k = from; k < t->ndim; k++)
        p = mod_mul(p, b ? mod_sub(coord(t, pt, k, b->off[k]),
                                   coord(t, pt, k, b->off[k] + b->len[k]))
                         : coord(t, pt, k, 0));
    return b ? p : mod_sub(0, p);
}

/* ---- naming what is wrong ---- */

/* "[0:4, 2:8)": each dim's start and end. */
static const char *box_str(const ck_box *b, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int d = 0; d < b->ndim && at < len; d++)
        at += (size_t)snprintf(buf + at, len - at, "%s%llu:%llu", d ? ", " : "[",
                               (unsigned long long)b->off[d],
                               (unsigned long long)(b->off[d] + b->len[d]));
    if (at < len)
        snprintf(buf + at, len - at, "%s", b->ndim ? ")" : "[]");
    return buf;
}

static const char *point_str(int ndim, const uint64_t *x, char *buf, size_t len)
{
    size_t at = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && at < len; d++)
        at += (size_t)snprintf(buf + at, len - at, "%s%llu", d ? ", " : "",
                               (unsigned long long)x[d]);
    if (at < len)
        snprintf(buf + at, len - at, "]");
    return buf;
}

/* One corner of the group being narrowed: a box (or the tensor, box UINT32_MAX), its
 * sign, its coordinate along the current dim, and its part of G at each point (the
 * sign times the box's term over the dims still to come). */
typedef struct corner {
    uint64_t at;
    uint32_t box;
    int32_t sign;
    uint64_t val[POINTS];
} corner;

static int corner_cmp(const void *a, const void *b, void *arg)
{
    const corner *x = a, *y = b;
    (**(uint64_t **)arg)++;
    return x->at < y->at ? -1 : x->at > y->at ? 1 : (x->box > y->box) - (x->box < y->box);
}

/* The corners of the group g (m members) along dim k into next: each member has one at
 * its start and, unless its end is the upper face, one of the other sign at its end.
 * Returns how many. */
static uint32_t spread(const tiling *t, const ck_box *boxes, const corner *g, uint32_t m,
                       int k, corner *next)
{
    uint32_t c = 0;
    for (uint32_t i = 0; i < m; i++) {
        const ck_box *b = g[i].box == UINT32_MAX ? NULL : &boxes[g[i].box];
        corner lo = { .at = b ? b->off[k] : 0, .box = g[i].box, .sign = g[i].sign };
        corner hi = { .at = b ? b->off[k] + b->len[k] : 0, .box = g[i].box,
                      .sign = -g[i].sign };
        for (int pt = 0; pt < POINTS; pt++) {
            /* term() carries the tensor's minus sign itself. */
            uint64_t v = term(t, pt, b, k + 1);
            lo.val[pt] = g[i].sign > 0 || !b ? v : mod_sub(0, v);
            hi.val[pt] = mod_sub(0, lo.val[pt]);
        }
        next[c++] = lo;
        if (b && hi.at < t->shape[k])
            next[c++] = hi;
    }
    return c;
}

/* The lexicographically first corner of nonzero weight into x, narrowing the group g
 * (n + 1 entries of room; next 2n + 2) one dim at a time; false when no slice
 * evaluates to nonzero (G vanished at both points, which the caller ruled out). */
static bool first_corner(const tiling *t, uint32_t n, const ck_box *boxes, corner *g,
                         corner *next, uint64_t *x)
{
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++)
        if (ck_box_numel(&boxes[i]))
            g[m++] = (corner){ .box = i, .sign = 1 };
    g[m++] = (corner){ .box = UINT32_MAX, .sign = -1 };
    for (int k = 0; k < t->ndim; k++) {
        uint32_t c = spread(t, boxes, g, m, k, next);
        uint64_t *w = t->work;
        qsort_r(next, c, sizeof *next, corner_cmp, &w);
        bool found = false;
        /* A member has at most one corner per coordinate (its start and end differ), so
         * the slice kept is never larger than the group. */
        for (uint32_t a = 0, e; a < c && !found; a = e) {
            uint64_t sum[POINTS] = { 0 };
            for (e = a; e < c && next[e].at == next[a].at; e++)
                for (int pt = 0; pt < POINTS; pt++)
                    sum[pt] = mod_add(sum[pt], next[e].val[pt]);
            for (int pt = 0; pt < POINTS; pt++)
                found |= sum[pt] != 0;
            if (found) {
                x[k] = next[a].at;
                m = 0;
                for (uint32_t i = a; i < e; i++)
                    g[m++] = (corner){ .box = next[i].box, .sign = next[i].sign };
            }
        }
        if (!found)
            return false;
    }
    return true;
}

static bool holds(const ck_box *b, const uint64_t *x)
{
    for (int d = 0; d < b->ndim; d++)
        if (x[d] < b->off[d] || x[d] - b->off[d] >= b->len[d])
            return false;
    return true;
}

/* The boxes do not tile the tensor: names an element covered twice or never. */
static int name_fault(const tiling *t, const char *tensor, uint32_t n, const ck_box *boxes,
                      uint64_t covered, uint64_t total, ck_err *err)
{
    corner *g = malloc(((size_t)n + 1) * sizeof *g);
    corner *next = malloc(2 * ((size_t)n + 1) * sizeof *next);
    uint64_t x[CK_MAX_NDIM] = { 0 };
    bool found = g && next && first_corner(t, n, boxes, g, next, x);
    free(g);
    free(next);
    if (!g || !next)
        return ck_err_set(err, -ENOMEM, "tensor %s: out of memory checking %u boxes", tensor, n);
    uint32_t hit[2] = { 0 }, count = 0;
    for (uint32_t i = 0; found && i < n && count < 2; i++)
        if (ck_box_numel(&boxes[i]) && holds(&boxes[i], x))
            hit[count++] = i;
    char a[200], b[200], p[200];
    if (found && count == 2)
        return ck_err_set(err, -EINVAL, "tensor %s: boxes %u %s and %u %s overlap", tensor,
                          hit[0], box_str(&boxes[hit[0]], a, sizeof a), hit[1],
                          box_str(&boxes[hit[1]], b, sizeof b));
    if (found && count == 0 && covered < total)
        return ck_err_set(err, -EINVAL, "tensor %s: its %u boxes cover %llu of its %llu "
                          "elements (a gap): element %s is in none of them", tensor, n,
                          (unsigned long long)covered, (unsigned long long)total,
                          point_str(t->ndim, x, p, sizeof p));
    if (found && count == 0)
        return ck_err_set(err, -EINVAL, "tensor %s: element %s is in none of its %u boxes (a "
                          "gap; others overlap)", tensor, point_str(t->ndim, x, p, sizeof p), n);
    /* Only where the evaluation was unlucky on a slice: the list still does not tile. */
    return ck_err_set(err, -EINVAL, "tensor %s: its %u boxes do not tile its shape (an "
                      "overlap or a gap)", tensor, n);
}

/* ---- the check ---- */

int ck__boxes_check_work(const char *tensor, int ndim, const uint64_t *shape, uint32_t n,
                         const ck_box *boxes, uint64_t *work, ck_err *err)
{
    char buf[200];
    *work = 0;
    if (n > CK_MAX_BOXES)
        return ck_err_set(err, -E2BIG, "tensor %s: %u boxes (at most %u)", tensor, n,
                          CK_MAX_BOXES);
    uint64_t total = 1;
    for (int d = 0; d < ndim; d++)
        total = shape[d] ? total : 0;
    for (int d = 0; d < ndim && total; d++) {
        if (total > UINT64_MAX / shape[d])
            return ck_err_set(err, -EINVAL, "tensor %s: its element count overflows", tensor);
        total *= shape[d];
    }
    uint64_t covered = 0;        /* saturating: overlapping boxes may count past total */
    for (uint32_t i = 0; i < n; i++) {
        const ck_box *b = &boxes[i];
        if (b->ndim != ndim)
            return ck_err_set(err, -EINVAL, "tensor %s: box %u has %d dims, the tensor %d",
                              tensor, i, b->ndim, ndim);
        for (int d = 0; d < ndim; d++)
            if (b->off[d] > shape[d] || b->len[d] > shape[d] - b->off[d])
                return ck_err_set(err, -EINVAL, "tensor %s: box %u %s lies outside its shape "
                                  "along dim %d (size %llu)", tensor, i,
                                  box_str(b, buf, sizeof buf), d,
                                  (unsigned long long)shape[d]);
        uint64_t m = ck_box_numel(b);
        covered = covered > UINT64_MAX - m ? UINT64_MAX : covered + m;
    }
    (*work) += n;
    if (!total)
        return 0;                /* every box inside an empty shape is empty */
    tiling t = { .ndim = ndim, .shape = shape, .work = work };
    if (getrandom(t.key, sizeof t.key, 0) != (ssize_t)sizeof t.key)
        return ck_err_set(err, -errno, "tensor %s: no random key for checking its boxes: %s",
                          tensor, strerror(errno));
    bool tiles = true;
    for (int pt = 0; pt < POINTS; pt++) {
        uint64_t g = term(&t, pt, NULL, 0);
        for (uint32_t i = 0; i < n; i++)
            if (ck_box_numel(&boxes[i]))
                g = mod_add(g, term(&t, pt, &boxes[i], 0));
        tiles &= g == 0;
    }
    return tiles ? 0 : name_fault(&t, tensor, n, boxes, covered, total, err);
}

int ck_boxes_check(const char *tensor, int ndim, const uint64_t *shape, uint32_t n,
                   const ck_box *boxes, ck_err *err)
{
    uint64_t work;
    return ck__boxes_check_work(tensor, ndim, shape, n, boxes, &work, err);
}
