/* world/mesh.h - the device mesh (sh/comm.h's sh_mesh): its shape as the checkpoint
 * core describes it, this rank's coordinate, and a communicator per dim. FSDP reads
 * it to shard a group, the state dicts to describe where a shard lies. */
#ifndef SH_WORLD_MESH_H
#define SH_WORLD_MESH_H

#include <stdint.h>

#include "ck/types.h"
#include "sh/comm.h"

struct sh_mesh {
    sh_world *world;
    ck_mesh desc;
    uint32_t coord[CK_MAX_MESH_DIMS];
    sh_comm *comm[CK_MAX_MESH_DIMS];
};

#endif
