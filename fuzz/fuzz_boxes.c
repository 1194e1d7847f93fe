/* fuzz_boxes.c - the tiling check of box lists (ck_boxes_check, model/boxes.c) on lists
 * made from the input, up to 65535 boxes from a few bytes, so that a check that is
 * quadratic for some shape of list (boxes sharing a dim's range, staircases, nested
 * boxes) runs past scripts/fuzz's per-input time limit. Where the list is small enough,
 * its verdict is compared with a count of every element's boxes, and a disagreement
 * aborts.
 *
 * The input: u8 ndim (mod 9); u16 shape per dim; u16 n; then templates of 4 u16 per
 * dim (a, b, c, e), as many as the input holds (integers little-endian). Box i follows
 * template
 * t = i mod T in round j = i / T: along each dim its offset is (a + b j) mod (size + 1)
 * and its length (c + e j) mod (size + 1), cut at the shape's end. Two templates make
 * a staircase; one makes slabs or nested boxes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck/layout.h"
#include "layout_testlib.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define BRUTE_MAX (1u << 16)    /* elements counted, summed over the boxes */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int ndim = data[0] % (CK_MAX_NDIM + 1);
    size_t at = 1;
    if (size < at + 2 * (size_t)ndim + 2)
        return 0;
    uint64_t shape[CK_MAX_NDIM] = { 0 }, total = 1;
    for (int d = 0; d < ndim; d++, at += 2) {
        shape[d] = data[at] | (uint64_t)data[at + 1] << 8;
        total = total > BRUTE_MAX ? total : total * shape[d];
    }
    uint32_t n = data[at] | (uint32_t)data[at + 1] << 8;
    at += 2;
    size_t per = 8 * (size_t)(ndim ? ndim : 1), templates = (size - at) / per;
    if (!templates)
        n = 0;
    ck_box *b = malloc((n ? n : 1) * sizeof *b);
    if (!b)
        abort();
    uint64_t sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *t = data + at + (i % templates) * per;
        uint64_t j = i / templates;
        b[i] = (ck_box){ .ndim = ndim };
        for (int d = 0; d < ndim; d++, t += 8) {
            uint64_t a = t[0] | t[1] << 8, bb = t[2] | t[3] << 8, c = t[4] | t[5] << 8,
                     e = t[6] | t[7] << 8;
            uint64_t off = (a + bb * j) % (shape[d] + 1), len = (c + e * j) % (shape[d] + 1);
            b[i].off[d] = off;
            b[i].len[d] = len < shape[d] - off ? len : shape[d] - off;
        }
        uint64_t m = ck_box_numel(&b[i]);
        sum = sum > BRUTE_MAX ? sum : sum + m;
    }
    ck_err err = { 0 };
    int rc = ck_boxes_check("fz", ndim, shape, n, b, &err);
    if (rc != 0 && rc != -EINVAL)
        abort();                /* only "does not tile" is an answer about the list */
    if (sum <= BRUTE_MAX && total <= BRUTE_MAX && (rc == 0) != lt_tiles_by_count(ndim, shape, n, b)) {
        fprintf(stderr, "fuzz_boxes: ck_boxes_check says %d (%s) for %u boxes, the count "
                "disagrees\n", rc, ck_err_msg(&err), n);
        abort();
    }
    free(b);
    return 0;
}
