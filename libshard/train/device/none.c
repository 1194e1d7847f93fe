/* device/none.c - the device box in a build without CUDA: only the CPU's table, and
 * no pinned memory nor device staging (-ENOTSUP; the world says how to get CUDA). */
#include "device/device.h"
#include "device/stage.h"

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
