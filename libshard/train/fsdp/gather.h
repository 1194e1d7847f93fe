/* fsdp/gather.h - a group's parameters gathered and given back (gather.c). */
#ifndef SH_FSDP_GATHER_H
#define SH_FSDP_GATHER_H

#include "fsdp/group.h"

/* unshard starts the all-gather that rebuilds g's parameters (a no-op when unsharded
 * or already gathering); wait_unshard ends it. */
int sh_group_unshard(sh_group *g, ck_err *err);
int sh_group_wait_unshard(sh_group *g, ck_err *err);
/* Back to SHARDED from any state. */
int sh_group_reshard(sh_group *g, ck_err *err);
/* reshard_after_forward=int: keep this rank's part of the smaller world's sharding. */
int sh_group_reshard_post_forward(sh_group *g, ck_err *err);

#endif
