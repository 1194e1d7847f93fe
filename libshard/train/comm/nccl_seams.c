/* comm/nccl_seams.c - how NCCL links are made (nccl.h's seams): the real one, a NCCL
 * communicator with its stream and event on the rank's current CUDA device, and the
 * host-staged one of ranks that share a GPU ($SH_DEVICE_COMM=mpi), which has no NCCL
 * communicator and moves device buffers through MPI. */
#include <cuda_runtime_api.h>
#include <stdlib.h>

#include "comm/nccl.h"

static int cuda_open(void *arg, const ncclUniqueId *id, int nranks, int rank,
                     const char *name, sh_nccl_link **out, ck_err *err)
{
    (void)arg;
    sh_nccl_link *l = calloc(1, sizeof *l);
    if (!l)
        return ck_err_set(err, -ENOMEM, "NCCL communicator for %s: out of memory", name);
    cudaStream_t s = NULL;
    cudaEvent_t e = NULL;
    /* Non-blocking: the legacy default stream, where the library computes, must not
     * serialize with the collectives (that is the overlap). */
    cudaError_t ce = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (ce == cudaSuccess)
        ce = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (ce != cudaSuccess) {
        if (s)
            cudaStreamDestroy(s);
        free(l);
        return ck_err_set(err, -EIO, "NCCL communicator for %s (rank %d of %d): %s", name,
                          rank, nranks, cudaGetErrorString(ce));
    }
    ncclResult_t r = ncclCommInitRank(&l->comm, nranks, *id, rank);
    if (r != ncclSuccess) {
        cudaEventDestroy(e);
        cudaStreamDestroy(s);
        free(l);
        /* The last error says why (two ranks on one GPU: "Duplicate GPU detected"). */
        return ck_err_set(err, -EIO, "ncclCommInitRank for %s (rank %d of %d): %s: %s",
                          name, rank, nranks, ncclGetErrorString(r), ncclGetLastError(NULL));
    }
    l->stream = s;
    l->ready = e;
    *out = l;
    return 0;
}

static void cuda_close(void *arg, sh_nccl_link *l)
{
    (void)arg;
    if (!l)
        return;
    ncclCommDestroy(l->comm);
    cudaEventDestroy((cudaEvent_t)l->ready);
    cudaStreamDestroy((cudaStream_t)l->stream);
    free(l);
}

const sh_nccl_seam sh_nccl_cuda_seam = {.open = cuda_open, .close = cuda_close};

static int staged_open(void *arg, const ncclUniqueId *id, int nranks, int rank,
                       const char *name, sh_nccl_link **out, ck_err *err)
{
    (void)arg, (void)id;
    sh_nccl_link *l = calloc(1, sizeof *l);
    if (!l)
        return ck_err_set(err, -ENOMEM, "communicator %s (rank %d of %d): out of memory",
                          name, rank, nranks);
    l->host_staged = true;
    *out = l;
    return 0;
}

static void staged_close(void *arg, sh_nccl_link *l)
{
    (void)arg;
    free(l);
}

const sh_nccl_seam sh_nccl_staged_seam = {.open = staged_open, .close = staged_close};
