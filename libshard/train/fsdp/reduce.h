/* fsdp/reduce.h - a group's gradients reduced (reduce.c). */
#ifndef SH_FSDP_REDUCE_H
#define SH_FSDP_REDUCE_H

#include "fsdp/group.h"

/* start_reduce cuts the unsharded f32 gradients into slots, casts them to the reduce
 * dtype and starts the reduce-scatter; finish_backward, at the end of the root's
 * backward, completes every group's reduction into the sharded gradients and
 * reshards the groups that ran forward but not backward. */
int sh_group_start_reduce(sh_group *g, ck_err *err);
int sh_fsdp_finish_backward(sh_group *root, ck_err *err);

#endif
