/* ops/reshard.h - the reshard's own check of a target layout (private to the core). */
#ifndef CK_OPS_RESHARD_H
#define CK_OPS_RESHARD_H

#include "ck/reshard.h"

/* Checks that every tensor of src can take the target layout (mesh size, placements
 * S(d) with d < ndim), naming the first that cannot: -EINVAL. */
int ck__reshard_check(ck_ckpt *src, const ck_mesh *mesh, const ck_placement *pl, ck_err *err);

#endif
