/* world/attach.h - a rank on its device (attach_cuda.c, or attach_none.c in a build
 * without CUDA): what sh_world_set_device and sh_finalize call. */
#ifndef SH_WORLD_ATTACH_H
#define SH_WORLD_ATTACH_H

#include "ck/error.h"
#include "sh/world.h"

/* Selects this rank's CUDA device and makes its cuBLAS handle. */
int sh_cuda_attach(sh_world *w, ck_err *err);
/* Then makes the world's communicator a NCCL one. */
int sh_cuda_attach_comm(sh_world *w, ck_err *err);
void sh_cuda_detach(sh_world *w);

#endif
