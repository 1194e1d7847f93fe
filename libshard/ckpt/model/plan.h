/* model/plan.h - who writes what: the save plan shared by every rank.
 *
 * For each tensor, the distinct shard boxes of the mesh (replicas deduplicated) and
 * the one rank that writes each. Among the replicas of a box, the writer is the one
 * with the fewest bytes assigned so far (lowest rank on ties), so the bytes spread
 * evenly over the replicas. The plan is a pure function of the mesh and the tensors
 * in declaration order: every rank computes the same plan without talking.
 */
#ifndef CK_MODEL_PLAN_H
#define CK_MODEL_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "ck/error.h"
#include "ck/layout.h"
#include "ck/types.h"

typedef struct ck__plan_shard {
    uint32_t tensor;     /* index in declaration order */
    uint64_t writer;     /* rank */
    ck_box box;
    uint64_t bytes;
    uint64_t file_off;   /* offset in the writer's data file, CK_ALIGN-aligned */
} ck__plan_shard;

typedef struct ck__plan ck__plan;

int ck__plan_new(const ck_mesh *mesh, ck__plan **out);
void ck__plan_free(ck__plan *p);
/* Adds a tensor; its shards get indices [*first, *first + *count). */
int ck__plan_add(ck__plan *p, const char *name, int ndim, const uint64_t *shape, size_t itemsize,
                const ck_placement *pl, uint32_t *first, uint32_t *count, ck_err *err);
/* Adds a tensor stored as a box list: shard first + i is boxes[i], written by
 * writers[i] (checked: ranks inside the mesh, boxes that tile the tensor). */
int ck__plan_add_boxes(ck__plan *p, const char *name, int ndim, const uint64_t *shape,
                       size_t itemsize, uint32_t nboxes, const ck_box *boxes,
                       const uint64_t *writers, uint32_t *first, uint32_t *count, ck_err *err);
/* Whether tensor t (declaration index) is a box list; its shards' range. */
bool ck__plan_is_boxes(const ck__plan *p, uint32_t t);
void ck__plan_range(const ck__plan *p, uint32_t t, uint32_t *first, uint32_t *count);
uint32_t ck__plan_nshards(const ck__plan *p);
const ck__plan_shard *ck__plan_shard_at(const ck__plan *p, uint32_t i);
/* Index of the shard that rank holds of tensor t (declaration index): the shard it
 * writes, or the replica that another rank writes. Placed tensors only: a rank holds
 * any number of a box list's shards (their writer says which). */
uint32_t ck__plan_shard_of(const ck__plan *p, uint32_t t, uint64_t rank);
uint32_t ck__plan_ntensors(const ck__plan *p);
/* Bytes of rank's data file (0: it writes none). */
uint64_t ck__plan_file_size(const ck__plan *p, uint64_t rank);
const ck_mesh *ck__plan_mesh(const ck__plan *p);

#endif
