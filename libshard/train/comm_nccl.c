/* comm_nccl.c - the GPU backend: NCCL collectives on a stream per communicator.
 *
 * Device buffers go through NCCL; host buffers (the control words and norms the
 * library and the checkpoint exchange) go through the communicator's MPI twin, so
 * the code above the ops table never asks which backend it runs on.
 *
 * Ordering follows torch's ProcessGroupNCCL: the library computes on the legacy
 * default stream; a collective first makes its own stream wait for the work queued
 * there so far, and sh_work_wait makes the default stream wait for the collective.
 * The host does not block in either: a host read of the result (cudaMemcpy) is
 * ordered behind it by the default stream.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "nccl_int.h"

static int nccl_type(ck_dtype dt, ncclDataType_t *out)
{
    switch (dt) {
    case CK_F32: *out = ncclFloat32; return 0;
    case CK_F64: *out = ncclFloat64; return 0;
    case CK_I32: *out = ncclInt32; return 0;
    case CK_I64: *out = ncclInt64; return 0;
    case CK_BF16: *out = ncclBfloat16; return 0;
    case CK_F16: *out = ncclFloat16; return 0;
    default: return -EINVAL;
    }
}

/* Device or managed memory; host memory (pinned or not) and pointers CUDA cannot
 * classify (no driver: a CPU machine) are host. */
static bool on_device(const void *p)
{
    struct cudaPointerAttributes a;
    if (!p)
        return false;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* 1: NCCL, 0: MPI, or a negative errno when the buffers disagree or NCCL is absent. */
static int route(sh_comm *c, const void *a, const void *b, sh_work *w, ck_err *err)
{
    bool da = on_device(a), db = b ? on_device(b) : da;
    if (a && b && da != db)
        return ck_err_set(err, -EINVAL, "%s on %s: one buffer is in device memory and the "
                          "other in host memory; both must be on the same side", w->what,
                          c->name);
    if (!da)
        return 0;
    if (!c->nccl || !c->nccl->comm)
        return ck_err_set(err, -ENODEV, "%s on %s: device buffers but no NCCL "
                          "communicator", w->what, c->name);
    return 1;
}

/* The collective's stream waits for the compute stream's work queued so far. */
static int before(sh_comm *c, sh_work *w, ck_err *err)
{
    cudaStream_t s = c->nccl->stream;
    if (cudaEventRecord(c->nccl->ready, NULL) != cudaSuccess ||
        cudaStreamWaitEvent(s, c->nccl->ready, 0) != cudaSuccess)
        return ck_err_set(err, -EIO, "%s on %s: ordering after the compute stream: %s",
                          w->what, c->name, cudaGetErrorString(cudaGetLastError()));
    return 0;
}

static int after(sh_comm *c, sh_work *w, ncclResult_t r, ck_err *err)
{
    if (r != ncclSuccess)
        return ck_err_set(err, -EIO, "%s on %s (rank %d of %d): %s (%s)", w->what, c->name,
                          c->rank, c->size, ncclGetErrorString(r),
                          ncclGetLastError(c->nccl->comm));
    cudaEvent_t ev;
    if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess)
        return ck_err_set(err, -EIO, "%s on %s: no CUDA event: %s", w->what, c->name,
                          cudaGetErrorString(cudaGetLastError()));
    if (cudaEventRecord(ev, c->nccl->stream) != cudaSuccess) {
        cudaEventDestroy(ev);
        return ck_err_set(err, -EIO, "%s on %s: recording its event: %s", w->what, c->name,
                          cudaGetErrorString(cudaGetLastError()));
    }
    w->event = ev;
    return 0;
}

#define ROUTE_OR_MPI(a, b, mpi_call)                                                    \
    ncclDataType_t t;                                                                   \
    do {                                                                                \
        int r_ = route(c, a, b, w, err);                                                \
        if (r_ < 0)                                                                     \
            return r_;                                                                  \
        if (r_ == 0)                                                                    \
            return mpi_call;                                                            \
        if (nccl_type(dt, &t))                                                          \
            return ck_err_set(err, -EINVAL, "%s on %s: dtype %s is not supported",      \
                              w->what, c->name, ck_dtype_name(dt) ? ck_dtype_name(dt) : "?"); \
        int b_ = before(c, w, err);                                                     \
        if (b_)                                                                         \
            return b_;                                                                  \
    } while (0)

static ncclRedOp_t red(sh_reduce_op op) { return op == SH_SUM ? ncclSum : ncclMax; }

static int n_all_gather(sh_comm *c, const void *send, void *recv, size_t count, ck_dtype dt,
                        sh_work *w, ck_err *err)
{
    ROUTE_OR_MPI(send, recv, sh_mpi_ops.all_gather(c, send, recv, count, dt, w, err));
    return after(c, w, ncclAllGather(send, recv, count, t, c->nccl->comm, c->nccl->stream),
                 err);
}

static int n_reduce_scatter(sh_comm *c, const void *send, void *recv, size_t count,
                            ck_dtype dt, sh_reduce_op op, sh_work *w, ck_err *err)
{
    ROUTE_OR_MPI(send, recv,
                 sh_mpi_ops.reduce_scatter(c, send, recv, count, dt, op, w, err));
    return after(c, w, ncclReduceScatter(send, recv, count, t, red(op), c->nccl->comm,
                                         c->nccl->stream), err);
}

static int n_all_reduce(sh_comm *c, const void *send, void *recv, size_t count, ck_dtype dt,
                        sh_reduce_op op, sh_work *w, ck_err *err)
{
    ROUTE_OR_MPI(send, recv, sh_mpi_ops.all_reduce(c, send, recv, count, dt, op, w, err));
    return after(c, w, ncclAllReduce(send, recv, count, t, red(op), c->nccl->comm,
                                     c->nccl->stream), err);
}

static int n_broadcast(sh_comm *c, void *buf, size_t count, ck_dtype dt, int root,
                       sh_work *w, ck_err *err)
{
    ROUTE_OR_MPI(buf, NULL, sh_mpi_ops.broadcast(c, buf, count, dt, root, w, err));
    return after(c, w, ncclBroadcast(buf, buf, count, t, root, c->nccl->comm,
                                     c->nccl->stream), err);
}

/* NCCL has no gather: the root receives from every rank in one group, and copies
 * its own block. recv is only significant (and only classified) at the root. */
static int n_gather(sh_comm *c, const void *send, void *recv, size_t count, ck_dtype dt,
                    int root, sh_work *w, ck_err *err)
{
    ROUTE_OR_MPI(send, c->rank == root ? recv : NULL,
                 sh_mpi_ops.gather(c, send, recv, count, dt, root, w, err));
    size_t bytes = count * ck_dtype_size(dt);
    cudaStream_t s = c->nccl->stream;
    ncclResult_t r = ncclGroupStart();
    if (r == ncclSuccess) {
        if (c->rank == root) {
            for (int i = 0; i < c->size && r == ncclSuccess; i++) {
                char *dst = (char *)recv + (size_t)i * bytes;
                if (i != root)
                    r = ncclRecv(dst, count, t, i, c->nccl->comm, s);
                else if (bytes &&
                         cudaMemcpyAsync(dst, send, bytes, cudaMemcpyDeviceToDevice, s) !=
                             cudaSuccess)
                    r = ncclUnhandledCudaError;
            }
        } else {
            r = ncclSend(send, count, t, root, c->nccl->comm, s);
        }
        ncclResult_t e = ncclGroupEnd();
        if (r == ncclSuccess)
            r = e;
    }
    return after(c, w, r, err);
}

/* A barrier joins the ranks' host threads; device work stays ordered by streams. */
static int n_barrier(sh_comm *c, sh_work *w, ck_err *err)
{
    return sh_mpi_ops.barrier(c, w, err);
}

static int n_wait(sh_work *w, ck_err *err)
{
    if (!w->event)
        return sh_mpi_ops.wait(w, err);
    sh_comm *c = w->comm;
    cudaError_t ce = cudaStreamWaitEvent(NULL, (cudaEvent_t)w->event, 0);
    cudaEventDestroy((cudaEvent_t)w->event);
    w->event = NULL;
    if (ce != cudaSuccess)
        return ck_err_set(err, -EIO, "%s on %s: waiting for it: %s", w->what, c->name,
                          cudaGetErrorString(ce));
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(c->nccl->comm, &async);
    if (async != ncclSuccess && async != ncclInProgress)
        return ck_err_set(err, -EIO, "%s on %s (rank %d of %d): %s", w->what, c->name,
                          c->rank, c->size, ncclGetErrorString(async));
    return 0;
}

int sh_nccl_attach(sh_comm *c, ck_err *err)
{
    int rc = sh_nccl_bootstrap(c, &c->nccl, err);
    if (rc)
        return rc;
    c->ops = &sh_nccl_ops;
    return 0;
}

static int n_split(sh_comm *c, int color, int key, const char *name, sh_comm **out,
                   ck_err *err)
{
    int rc = sh_mpi_ops.split(c, color, key, name, out, err);
    if (rc)
        return rc;
    rc = sh_nccl_attach(*out, err);
    if (rc) {
        sh_mpi_ops.destroy(*out);
        *out = NULL;
    }
    return rc;
}

static void n_destroy(sh_comm *c)
{
    const sh_nccl_seam *seam = c->world->nccl_seam;
    if (c->nccl)
        seam->close(seam->arg, c->nccl);
    c->nccl = NULL;
    sh_mpi_ops.destroy(c);
}

int sh_nccl_attach_world(sh_world *w, const sh_nccl_seam *seam, ck_err *err)
{
    w->nccl_seam = seam;
    return sh_nccl_attach(w->comm, err);
}

const sh_comm_ops sh_nccl_ops = {
    .all_gather = n_all_gather,
    .reduce_scatter = n_reduce_scatter,
    .all_reduce = n_all_reduce,
    .broadcast = n_broadcast,
    .gather = n_gather,
    .barrier = n_barrier,
    .wait = n_wait,
    .split = n_split,
    .destroy = n_destroy,
};
