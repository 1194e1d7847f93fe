/* ck/layout.h - the layout algebra: which part of a tensor each rank holds.
 *
 * Sharding follows torch.chunk and DTensor: a dim of n elements cut into p parts has
 * chunks of c = ceil(n / p) elements; part i covers [min(i*c, n), min((i+1)*c, n)),
 * so trailing parts may be short or empty and nothing is padded. When several mesh
 * dims shard the same tensor dim, they apply in mesh-dim order, each cutting the
 * range that the previous ones left (DTensor's nested sharding).
 *
 * A box is the part of the global tensor a shard covers: an offset and a length per
 * tensor dim. All tensors are row-major, so a box is stored as a row-major array of
 * its own elements. A 0-D tensor has ndim 0 and one element.
 */
#ifndef CK_LAYOUT_H
#define CK_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "ck/types.h"

typedef struct ck_box {
    int ndim;
    uint64_t off[CK_MAX_NDIM];
    uint64_t len[CK_MAX_NDIM];
} ck_box;

/* torch.chunk of n elements into parts, part idx: its offset and length. */
CK_API void ck_chunk(uint64_t n, uint64_t parts, uint64_t idx, uint64_t *off, uint64_t *len);

/* The box that the rank at coord holds. */
CK_API void ck_shard_box(int ndim, const uint64_t *shape, const ck_mesh *mesh,
                         const ck_placement *pl, const uint32_t *coord, ck_box *out);

/* The box of the whole tensor. */
CK_API void ck_box_full(int ndim, const uint64_t *shape, ck_box *out);
CK_API uint64_t ck_box_numel(const ck_box *b);   /* 1 for ndim 0 */
CK_API bool ck_box_equal(const ck_box *a, const ck_box *b);

/* The bytes of a rank's data file that holds shards of these n sizes, in order, each
 * at the aligned offset the save plan gives it: what a staging area made for a part of
 * those shards must hold (before its blobs). */
CK_API uint64_t ck_file_bytes(const uint64_t *shard_bytes, size_t n);

/* At most this many boxes in a tensor's box list (format 1.1): a tensor is cut into
 * no more pieces than the largest world has ranks. */
#define CK_MAX_BOXES CK_MAX_WORLD

/* Checks that n boxes tile the tensor: each has the tensor's ndim and lies inside its
 * shape, no two share an element, and together they cover every element (empty
 * boxes are allowed and cover nothing). O(n ndim) for a list that tiles, O(n ndim
 * (ndim + log n)) for one that does not, whatever the list (model/boxes.c: a random
 * evaluation whose "tiles" is wrong with probability below 2^-100). Errors (-EINVAL)
 * name the tensor and the boxes or the element at fault, e.g. "tensor w: boxes 3
 * [0:4, 0:8) and 5 [2:6, 0:8) overlap". */
CK_API int ck_boxes_check(const char *tensor, int ndim, const uint64_t *shape, uint32_t n,
                          const ck_box *boxes, ck_err *err);

#endif
