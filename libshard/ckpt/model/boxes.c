/* boxes.c - whether a list of boxes tiles a tensor (see ck/layout.h).
 *
 * A box list comes from outside (a DCP planner, a manifest, a client's message), so
 * it is checked before anything trusts it: a gap would leave bytes of a load
 * unwritten, an overlap would let two ranks disagree about an element. Boxes inside
 * the shape and pairwise disjoint tile the tensor exactly when their element counts
 * add up to the tensor's. Disjointness is a sweep along the dim with the most
 * distinct offsets: after sorting on it, a box is compared only with the boxes that
 * start before it ends along that dim, which for a grid of tiles is its own row. */
#include "ck/layout.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct sweep_key {
    uint64_t off;
    uint32_t idx;
} sweep_key;

static int key_cmp(const void *a, const void *b)
{
    const sweep_key *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off ? 1 : (x->idx > y->idx) - (x->idx < y->idx);
}

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

static int overlap(const char *tensor, const ck_box *boxes, uint32_t i, uint32_t j, ck_err *err)
{
    char a[200], b[200];
    if (i > j) {
        uint32_t t = i;
        i = j, j = t;
    }
    return ck_err_set(err, -EINVAL, "tensor %s: boxes %u %s and %u %s overlap", tensor, i,
                      box_str(&boxes[i], a, sizeof a), j, box_str(&boxes[j], b, sizeof b));
}

/* Sorts the non-empty boxes on dim d into keys; returns how many there are. */
static uint32_t sort_on(const ck_box *boxes, uint32_t n, int d, sweep_key *keys)
{
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++)
        if (ck_box_numel(&boxes[i]))
            keys[m++] = (sweep_key){ .off = boxes[i].ndim ? boxes[i].off[d] : 0, .idx = i };
    qsort(keys, m, sizeof *keys, key_cmp);
    return m;
}

static uint32_t distinct(const sweep_key *keys, uint32_t m)
{
    uint32_t c = m ? 1 : 0;
    for (uint32_t i = 1; i < m; i++)
        c += keys[i].off != keys[i - 1].off;
    return c;
}

static int disjoint(const char *tensor, int ndim, uint32_t n, const ck_box *boxes, ck_err *err)
{
    sweep_key *keys = malloc((n ? n : 1) * sizeof *keys);
    if (!keys)
        return ck_err_set(err, -ENOMEM, "tensor %s: out of memory checking %u boxes", tensor, n);
    int best = 0;
    uint32_t most = 0, m = 0;
    for (int d = 0; d < (ndim ? ndim : 1); d++) {
        m = sort_on(boxes, n, d, keys);
        uint32_t c = distinct(keys, m);
        if (c > most)
            most = c, best = d;
    }
    if (ndim > 1 && best != ndim - 1)
        m = sort_on(boxes, n, best, keys);
    int r = 0;
    ck_box common;
    for (uint32_t a = 0; a < m && r == 0; a++) {
        const ck_box *x = &boxes[keys[a].idx];
        uint64_t end = ndim ? x->off[best] + x->len[best] : 1;
        for (uint32_t b = a + 1; b < m && keys[b].off < end && r == 0; b++)
            if (ck_box_intersect(x, &boxes[keys[b].idx], &common))
                r = overlap(tensor, boxes, keys[a].idx, keys[b].idx, err);
    }
    free(keys);
    return r;
}

int ck_boxes_check(const char *tensor, int ndim, const uint64_t *shape, uint32_t n,
                   const ck_box *boxes, ck_err *err)
{
    char buf[200];
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
    uint64_t covered = 0;
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
    }
    int r = disjoint(tensor, ndim, n, boxes, err);
    if (r < 0)
        return r;
    /* Disjoint boxes inside the shape hold at most total elements: no overflow. */
    for (uint32_t i = 0; i < n; i++)
        covered += ck_box_numel(&boxes[i]);
    if (covered != total)
        return ck_err_set(err, -EINVAL, "tensor %s: its %u boxes cover %llu of its %llu "
                          "elements (a gap)", tensor, n, (unsigned long long)covered,
                          (unsigned long long)total);
    return 0;
}
