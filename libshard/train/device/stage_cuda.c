/* stage_cuda.c - stage.h's operations on CUDA: cudaHostRegister of the staging pages
 * and device-to-host copies on a side stream.
 *
 * The side stream is a blocking one, so the legacy default stream (where the library
 * computes and NCCL's work is ordered) and it are mutually ordered: the copies start
 * after the optimizer step queued before the save, and the step queued after the
 * save waits for the copies. That is the rule a device save needs (no kernel may
 * write a parameter or optimizer state while its copy reads it), kept by the streams
 * rather than by the caller.
 *
 * A lazy save fills from a thread of the checkpoint or the client: the current device
 * is per thread, so each fill selects the rank's device first. sh_checkpoint also pins
 * whole staging areas when they are mapped (the client's reserver thread, the
 * embedded image), so the fills usually find their pages registered (-EEXIST). */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdlib.h>

#include "device/stage.h"

typedef struct side {
    cudaStream_t stream;
    int device;
} side;

/* First in every fill (stage.c), on whatever thread fills. */
static int pin(void *arg, void *base, size_t len)
{
    const side *sd = arg;
    if (cudaSetDevice(sd->device) != cudaSuccess) {
        cudaGetLastError();
        return -EIO;
    }
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
    /* A failure here must not linger as the runtime's last error, which the next
     * kernel launch's check would report as its own. */
    if (cudaHostUnregister(base) != cudaSuccess)
        cudaGetLastError();
}

static int copy(void *arg, void *dst, const void *src, size_t len)
{
    return cudaMemcpyAsync(dst, src, len, cudaMemcpyDeviceToHost,
                           ((const side *)arg)->stream) == cudaSuccess ? 0 : -EIO;
}

static int wait(void *arg)
{
    return cudaStreamSynchronize(((const side *)arg)->stream) == cudaSuccess ? 0 : -EIO;
}

int sh_stage_cuda_new(sh_stage_ops **out)
{
    sh_stage_ops *o = calloc(1, sizeof *o);
    side *sd = calloc(1, sizeof *sd);
    if (!o || !sd || cudaGetDevice(&sd->device) != cudaSuccess ||
        cudaStreamCreate(&sd->stream) != cudaSuccess) {
        free(o);
        free(sd);
        return o && sd ? -EIO : -ENOMEM;
    }
    *o = (sh_stage_ops){pin, unpin, copy, wait, sd};
    *out = o;
    return 0;
}

void sh_stage_cuda_free(sh_stage_ops *o)
{
    if (!o)
        return;
    side *sd = o->arg;
    cudaStreamDestroy(sd->stream);
    free(sd);
    free(o);
}
