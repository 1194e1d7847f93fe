/* format/decl.h - a declaration's insides (private to the core; the declaration is
 * ck/decl.h's): its tensors as the manifest records them, its box lists, its names
 * indexed, and the plan the seal computes. The saves read them here; nothing copies
 * them. */
#ifndef CK_FORMAT_DECL_H
#define CK_FORMAT_DECL_H

#include <stdbool.h>
#include <stdint.h>

#include "ck/ckpt.h"
#include "ck/decl.h"
#include "model/plan.h"

uint32_t ck__decl_ntensors(const ck_decl *d);
/* The tensors in declaration order, as the manifest records them (n_shards once
 * sealed). */
const ck_tensor *ck__decl_tensors(const ck_decl *d);
/* Tensor i's box list (n 0 and NULLs for a tensor by placements). */
void ck__decl_boxes(const ck_decl *d, uint32_t i, uint32_t *n, const ck_box **boxes,
                    const uint64_t **writers);
/* The index of the tensor named name, or -1. */
int64_t ck__decl_find(const ck_decl *d, const char *name);
/* Shard records the plan holds (known as tensors are declared: a bound on what sealing
 * costs), and the boxes of all box lists. */
uint64_t ck__decl_shards(const ck_decl *d);
uint64_t ck__decl_nboxes(const ck_decl *d);
/* Sealed: the plan, and the first plan shard of tensor i. */
const ck__plan *ck__decl_plan(const ck_decl *d);
uint32_t ck__decl_first(const ck_decl *d, uint32_t i);
/* NULL when a and b declare the same tensors on the same mesh, else what differs
 * ("mesh", "tensor count", or of tensor *tensor: "name", "dtype", "shape", ...). */
const char *ck__decl_diff(const ck_decl *a, const ck_decl *b, uint32_t *tensor);

#endif
