/* world/attach_cuda.c - a rank on its CUDA device: choosing the device and its cuBLAS
 * handle, then making the world's communicator a NCCL one (or a host-staged one). */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/nccl.h"
#include "kernels_cuda.h"
#include "world/attach.h"
#include "world/world.h"

int sh_cuda_attach(sh_world *w, ck_err *err)
{
    int n = 0;
    cudaError_t ce = cudaGetDeviceCount(&n);
    if (ce != cudaSuccess || n == 0) {
        cudaGetLastError();
        return ck_err_set(err, -ENODEV, "rank %d: no CUDA device: %s", w->rank,
                          ce != cudaSuccess ? cudaGetErrorString(ce) : "the driver sees none");
    }
    /* torchrun's cudaSetDevice(LOCAL_RANK); ranks beyond the host's devices share them
     * round-robin (NCCL then refuses two of them in one communicator, and says so). */
    int dev = w->local_rank % n;
    ce = cudaSetDevice(dev);
    if (ce != cudaSuccess)
        return ck_err_set(err, -ENODEV, "rank %d: cudaSetDevice(%d): %s", w->rank, dev,
                          cudaGetErrorString(ce));
    /* The pool keeps what FSDP frees each step instead of returning it to the driver
     * at every synchronization. */
    cudaMemPool_t pool;
    uint64_t keep = UINT64_MAX;
    if (cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess)
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    if (k_cuda_blas_new(&w->blas))
        return ck_err_set(err, -EIO, "rank %d: cublasCreate on device %d failed", w->rank, dev);
    w->cuda_ordinal = dev;
    return 0;
}

void sh_cuda_detach(sh_world *w)
{
    k_cuda_blas_free(w->blas);
    w->blas = NULL;
}

int sh_cuda_attach_comm(sh_world *w, ck_err *err)
{
    /* Ranks sharing one GPU cannot be ranks of one NCCL communicator; they can still
     * run the same program, with MPI moving host copies of the device buffers. */
    const char *how = getenv("SH_DEVICE_COMM");
    if (how && *how && strcmp(how, "nccl") && strcmp(how, "mpi"))
        return ck_err_set(err, -EINVAL, "rank %d: SH_DEVICE_COMM=%s: nccl or mpi", w->rank,
                          how);
    bool staged = how && !strcmp(how, "mpi");
    return sh_nccl_attach_world(w->comm, staged ? &sh_nccl_staged_seam : &sh_nccl_cuda_seam,
                                err);
}
