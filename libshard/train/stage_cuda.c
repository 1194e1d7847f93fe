/* stage_cuda.c - stage.h's operations on CUDA: cudaHostRegister of the staging pages
 * and device-to-host copies on a side stream.
 *
 * The side stream is a blocking one, so the legacy default stream (where the library
 * computes and NCCL's work is ordered) and it are mutually ordered: the copies start
 * after the optimizer step queued before the save, and the step queued after the
 * save waits for the copies. That is the rule a device save needs (no kernel may
 * write a parameter or optimizer state while its copy reads it), kept by the streams
 * rather than by the caller. */
#include <cuda_runtime_api.h>
#include <stdlib.h>

#include "internal.h"
#include "stage.h"

static int pin(void *arg, void *base, size_t len)
{
    (void)arg;
    cudaError_t e = cudaHostRegister(base, len, cudaHostRegisterDefault);
    if (e == cudaErrorHostMemoryAlreadyRegistered) {
        cudaGetLastError();
        return -EEXIST;
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        return -EIO;
    }
    return 0;
}

static void unpin(void *arg, void *base)
{
    (void)arg;
    cudaHostUnregister(base);
}

static int copy(void *arg, void *dst, const void *src, size_t len)
{
    return cudaMemcpyAsync(dst, src, len, cudaMemcpyDeviceToHost, (cudaStream_t)arg) ==
                   cudaSuccess ? 0 : -EIO;
}

static int wait(void *arg)
{
    return cudaStreamSynchronize((cudaStream_t)arg) == cudaSuccess ? 0 : -EIO;
}

int sh_stage_cuda_new(sh_stage_ops **out)
{
    sh_stage_ops *o = calloc(1, sizeof *o);
    cudaStream_t s;
    if (!o)
        return -ENOMEM;
    if (cudaStreamCreate(&s) != cudaSuccess) {
        free(o);
        return -EIO;
    }
    *o = (sh_stage_ops){pin, unpin, copy, wait, s};
    *out = o;
    return 0;
}

void sh_stage_cuda_free(sh_stage_ops *o)
{
    if (!o)
        return;
    cudaStreamDestroy((cudaStream_t)o->arg);
    free(o);
}
