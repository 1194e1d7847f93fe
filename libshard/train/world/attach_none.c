/* world/attach_none.c - a build without CUDA: asking for a device is an error that
 * says how to get one. */
#include "world/attach.h"
#include "world/world.h"

int sh_cuda_attach(sh_world *w, ck_err *err)
{
    return ck_err_set(err, -ENOTSUP, "rank %d: CUDA was asked for, but this build has no "
                      "CUDA (configure with -Dcuda=enabled where nvcc and NCCL are "
                      "installed)", w->rank);
}

int sh_cuda_attach_comm(sh_world *w, ck_err *err)
{
    return sh_cuda_attach(w, err);
}

void sh_cuda_detach(sh_world *w)
{
    (void)w;
}
