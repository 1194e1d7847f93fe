/* layout_testlib.h - helpers shared by the layout & types tests.
 *
 * The expectations here are computed the slow, obvious way (walking index lists,
 * nested loops) so that the tests do not restate the formulas under test.
 * Tests return 0 on pass, 1 on failure (after saying what broke), 77 to skip.
 */
#ifndef LAYOUT_TESTLIB_H
#define LAYOUT_TESTLIB_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "ck/layout.h"
#include "ck/types.h"

#define LT_FAIL(...)                                                    \
    do {                                                                \
        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);            \
        fprintf(stderr, __VA_ARGS__);                                   \
        fputc('\n', stderr);                                            \
        return 1;                                                       \
    } while (0)

#define LT_CHECK(cond, ...)                                             \
    do {                                                                \
        if (!(cond))                                                    \
            LT_FAIL(__VA_ARGS__);                                       \
    } while (0)

/* Whether n boxes tile shape, the slow way: every box inside, every element counted
 * and covered exactly once (a byte per element: for small shapes). */
static inline bool lt_tiles_by_count(int ndim, const uint64_t *shape, uint32_t n, const ck_box *b)
{
    uint64_t total = 1;
    for (int d = 0; d < ndim; d++)
        total *= shape[d];
    uint8_t *cnt = calloc(total ? total : 1, 1);
    bool ok = true;
    for (uint32_t i = 0; i < n && ok; i++) {
        for (int d = 0; d < ndim; d++)
            ok &= b[i].ndim == ndim && b[i].off[d] + b[i].len[d] <= shape[d];
        uint64_t m = ck_box_numel(&b[i]);
        for (uint64_t e = 0; e < m && ok; e++) {
            uint64_t rem = e, k = 0, stride = 1;
            for (int d = ndim - 1; d >= 0; d--) {
                k += (b[i].off[d] + rem % b[i].len[d]) * stride;
                rem /= b[i].len[d];
                stride *= shape[d];
            }
            ok &= ++cnt[k] == 1;
        }
    }
    for (uint64_t k = 0; k < total && ok; k++)
        ok = cnt[k] == 1;
    free(cnt);
    return ok;
}

/* Fixed-seed generator (splitmix64) so a failure reproduces exactly. */
static inline uint64_t lt_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi]. */
static inline uint64_t lt_range(uint64_t *state, uint64_t lo, uint64_t hi)
{
    return lo + lt_rand(state) % (hi - lo + 1);
}

/* torch.chunk(arange(n), parts) as torch does it: the chunk size is the smallest c
 * with c * parts >= n (found by counting up, not by a ceil formula), then
 * tensor.split(c) walks from 0 taking min(c, rest); DTensor pads the missing
 * trailing parts with empty ones at the end of the range. */
static inline void lt_torch_chunk(uint64_t n, uint64_t parts, uint64_t *off, uint64_t *len)
{
    uint64_t c = 0;
    while (c * parts < n)
        c++;
    uint64_t start = 0, i = 0;
    while (start < n && c > 0) {
        uint64_t take = n - start < c ? n - start : c;
        off[i] = start;
        len[i] = take;
        start += take;
        i++;
    }
    for (; i < parts; i++) {
        off[i] = n;
        len[i] = 0;
    }
}

/* Advances sizes[0..*ndim) like an odometer over all meshes of 1..max_ndim dims with
 * sizes 1..max_size. Start with *ndim = 0; returns false when all were visited. */
static inline bool lt_next_mesh(ck_mesh *m, int max_ndim, uint32_t max_size)
{
    if (m->ndim == 0) {
        memset(m, 0, sizeof *m);
        m->ndim = 1;
        m->size[0] = 1;
        return true;
    }
    for (int d = m->ndim - 1; d >= 0; d--) {
        if (++m->size[d] <= max_size)
            return true;
        m->size[d] = 1;
    }
    if (m->ndim == max_ndim)
        return false;
    m->ndim++;
    for (int d = 0; d < m->ndim; d++)
        m->size[d] = 1;
    return true;
}

/* Placement choice c: 0 is R, c >= 1 is S(c - 1). */
static inline ck_placement lt_placement(int c)
{
    ck_placement p = {.kind = c == 0 ? CK_REPLICATE : CK_SHARD,
                      .dim = (uint8_t)(c == 0 ? 0 : c - 1)};
    return p;
}

/* Advances choice[0..mesh_ndim) over 0..nchoice-1 and fills pl. Start with all
 * choices at -1 (lt_placements_reset); returns false when all were visited. */
static inline bool lt_next_placements(int *choice, int mesh_ndim, int nchoice,
                                      ck_placement *pl)
{
    int d;
    if (choice[0] < 0) {
        for (d = 0; d < mesh_ndim; d++)
            choice[d] = 0;
    } else {
        for (d = mesh_ndim - 1; d >= 0; d--) {
            if (++choice[d] < nchoice)
                break;
            choice[d] = 0;
        }
        if (d < 0)
            return false;
    }
    for (d = 0; d < mesh_ndim; d++)
        pl[d] = lt_placement(choice[d]);
    return true;
}

static inline void lt_placements_reset(int *choice)
{
    choice[0] = -1;
}

/* Row-major linear index of global coordinate g in a tensor of the given shape. */
static inline uint64_t lt_linear(int ndim, const uint64_t *shape, const uint64_t *g)
{
    uint64_t i = 0;
    for (int d = 0; d < ndim; d++)
        i = i * shape[d] + g[d];
    return i;
}

/* Steps the coordinate g over box b in row-major order, starting from b's offset
 * (lt_box_first). Returns false when past the last element. */
static inline bool lt_box_step(const ck_box *b, uint64_t *g)
{
    for (int d = b->ndim - 1; d >= 0; d--) {
        if (++g[d] < b->off[d] + b->len[d])
            return true;
        g[d] = b->off[d];
    }
    return false;
}

/* Sets g to the first element of b; false when b has no elements. */
static inline bool lt_box_first(const ck_box *b, uint64_t *g)
{
    for (int d = 0; d < b->ndim; d++) {
        g[d] = b->off[d];
        if (b->len[d] == 0)
            return false;
    }
    return true;
}

static inline const char *lt_fmt_shape(char *buf, size_t len, int ndim, const uint64_t *shape)
{
    size_t pos = 0;
    pos += (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && pos < len; d++)
        pos += (size_t)snprintf(buf + pos, len - pos, d ? ",%llu" : "%llu",
                                (unsigned long long)shape[d]);
    if (pos < len)
        snprintf(buf + pos, len - pos, "]");
    return buf;
}

/* "mesh 2x3 R,S(0) shape [4,5]" for failure messages. */
static inline const char *lt_describe(char *buf, size_t len, const ck_mesh *m,
                                      const ck_placement *pl, int ndim, const uint64_t *shape)
{
    char ms[64], ps[64], ss[128];
    ck_mesh_format(m, ms, sizeof ms);
    ck_placements_format(pl, m->ndim, ps, sizeof ps);
    snprintf(buf, len, "mesh %s %s shape %s", ms, ps, lt_fmt_shape(ss, sizeof ss, ndim, shape));
    return buf;
}

/* Checks that rc is -EINVAL and that the message quotes `needle`. */
static inline int lt_expect_einval(int rc, const ck_err *err, const char *what,
                                   const char *needle)
{
    LT_CHECK(rc == -EINVAL, "%s: returned %d, want -EINVAL", what, rc);
    LT_CHECK(err->code == -EINVAL, "%s: err.code %d, want -EINVAL", what, err->code);
    LT_CHECK(strstr(ck_err_msg(err), needle) != NULL,
             "%s: message \"%s\" does not quote \"%s\"", what, ck_err_msg(err), needle);
    return 0;
}

#endif
