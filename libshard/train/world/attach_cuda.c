/* device_cuda.c - a rank on its CUDA device: choosing the device, and the real NCCL
 * links (communicator, stream, event) made on it. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels_cuda.h"
#include "nccl_int.h"

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

int sh_pinned_alloc(void **p, size_t bytes, bool zero)
{
    /* Under unified addressing pinned memory is mapped: kernels read and write it in
     * place, so offloaded state needs no copies around the optimizer step. */
    if (cudaHostAlloc(p, bytes, cudaHostAllocDefault) != cudaSuccess) {
        cudaGetLastError();
        *p = NULL;
        return -ENOMEM;
    }
    if (zero)
        memset(*p, 0, bytes);
    return 0;
}

void sh_pinned_free(void *p)
{
    cudaFreeHost(p);
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
    return sh_nccl_attach_world(w, staged ? &sh_nccl_staged_seam : &sh_nccl_cuda_seam, err);
}
