/* device_none.c - the device hooks of a build without CUDA: asking for one is an
 * error that says how to get it. */
#include "dev.h"
#include "stage.h"

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

int sh_pinned_alloc(void **p, size_t bytes, bool zero)
{
    (void)bytes, (void)zero;
    *p = NULL;
    return -ENOTSUP;
}

void sh_pinned_free(void *p)
{
    (void)p;
}

const sh_dev_ops *sh_dev_for(sh_device d)
{
    return d == SH_CPU ? &sh_dev_cpu : NULL;
}

int sh_stage_cuda_new(sh_stage_ops **out)
{
    *out = NULL;
    return -ENOTSUP;
}

void sh_stage_cuda_free(sh_stage_ops *ops)
{
    (void)ops;
}
