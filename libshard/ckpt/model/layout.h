/* model/layout.h - the layout rules only the core uses (private to the core): the
 * checks of a layout, box intersection and the contiguous runs of a box inside two
 * others, which the reader and the copy reshard walk. The rules callers use (the
 * chunk rule, a rank's box, box lists) are ck/layout.h's. */
#ifndef CK_MODEL_LAYOUT_H
#define CK_MODEL_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ck/layout.h"

/* Checks that placements fit the tensor (S(d) with d < ndim) and the mesh, that the
 * shape is sane (numel * itemsize fits in 63 bits), and names the tensor in errors. */
int ck__layout_check(const char *tensor, int ndim, const uint64_t *shape, size_t itemsize,
                     const ck_mesh *mesh, const ck_placement *pl, ck_err *err);

/* true and *out when a and b share at least one element; false otherwise. */
bool ck__box_intersect(const ck_box *a, const ck_box *b, ck_box *out);

/* Contiguous runs: the elements of `sub` (which lies inside both `src` and `dst`)
 * as maximal runs that are contiguous in the row-major storage of src and of dst.
 * Each run gives the element offset inside src's storage, inside dst's storage,
 * and the number of elements. Trailing dims that both boxes cover fully are merged
 * so that e.g. a dim-0 slice of a row-major tensor is a single run.
 *
 *   ck__runs it;
 *   ck__runs_init(&it, &sub, &src, &dst);
 *   uint64_t s, d, n;
 *   while (ck__runs_next(&it, &s, &d, &n)) copy(n elements from s to d);
 */
typedef struct ck__runs {
    int ndim;                    /* dims after merging; the last is the run dim */
    uint64_t count[CK_MAX_NDIM]; /* iteration extent per outer dim */
    uint64_t idx[CK_MAX_NDIM];
    uint64_t src_stride[CK_MAX_NDIM], dst_stride[CK_MAX_NDIM];
    uint64_t src_base, dst_base;
    uint64_t run;                /* elements per run */
    bool done;
} ck__runs;

void ck__runs_init(ck__runs *it, const ck_box *sub, const ck_box *src, const ck_box *dst);
bool ck__runs_next(ck__runs *it, uint64_t *src_off, uint64_t *dst_off, uint64_t *n);

#endif
