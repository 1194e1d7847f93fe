/* fsdp/reduce.h - a group's gradients reduced (reduce.c). */
#ifndef SH_FSDP_REDUCE_H
#define SH_FSDP_REDUCE_H

#include "fsdp/group.h"

/* sh_group_reduce, at g's post-backward: retires the reduce-scatter root r has in
 * flight (waits for it, frees its input, lands its result in the sharded gradients
 * or starts its all-reduce over replicas), then cuts g's unsharded f32 gradients
 * into slots, casts them to the reduce dtype and starts g's reduce-scatter, the one
 * in flight now. finish_backward, at the end of the root's backward, retires the last
 * one, lands the replica all-reduces and reshards the groups that ran forward but not
 * backward. */
int sh_group_reduce(sh_fsdp_root *r, sh_group *g, ck_err *err);
int sh_fsdp_finish_backward(sh_group *root, ck_err *err);

#endif
