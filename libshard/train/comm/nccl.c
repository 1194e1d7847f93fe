/* comm/nccl.c - the GPU backend: NCCL collectives on a stream per communicator.
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

#include "comm/dtypes.h"
#include "comm/nccl.h"

#define NCCL_ROW(dt, type, sum, max, nccl) [dt] = { true, nccl },
static const struct {
    bool ok;
    ncclDataType_t type;
} nccl_types[CK_DTYPE_MAX + 1] = { SH_COMM_DTYPES(NCCL_ROW) };
#undef NCCL_ROW

static int nccl_type(ck_dtype dt, ncclDataType_t *out)
{
    if (dt < 1 || dt > CK_DTYPE_MAX || !nccl_types[dt].ok)
        return -EINVAL;
    *out = nccl_types[dt].type;
    return 0;
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

enum { VIA_MPI, VIA_NCCL, VIA_HOST };

/* Which way a collective goes, or a negative errno when its buffers disagree or no
 * way exists. */
static int route(sh_comm *c, const void *a, const void *b, sh_work *w, ck_err *err)
{
    bool da = on_device(a), db = b ? on_device(b) : da;
    if (a && b && da != db)
        return ck_err_set(err, -EINVAL, "%s on %s: one buffer is in device memory and the "
                          "other in host memory; both must be on the same side", w->what,
                          c->name);
    if (!da)
        return VIA_MPI;
    if (c->nccl && c->nccl->host_staged)
        return VIA_HOST;
    if (!c->nccl || !c->nccl->comm)
        return ck_err_set(err, -ENODEV, "%s on %s: device buffers but no NCCL "
                          "communicator", w->what, c->name);
    return VIA_NCCL;
}

/* The host-staged way (ranks sharing a GPU): device buffers are copied to host
 * memory, MPI runs the collective to completion, the result is copied back. b may
 * be a (in place) or NULL (nothing received here). */
static int stage_in(sh_comm *c, sh_work *w, const void *a, size_t ab, const void *b,
                    size_t bb, void **ha, void **hb, ck_err *err)
{
    *ha = malloc(ab ? ab : 1);
    *hb = b == a ? *ha : b ? malloc(bb ? bb : 1) : NULL;
    if (!*ha || (b && !*hb))
        return ck_err_set(err, -ENOMEM, "%s on %s: no host memory to stage %zu bytes",
                          w->what, c->name, ab + bb);
    cudaError_t e = ab ? cudaMemcpy(*ha, a, ab, cudaMemcpyDeviceToHost) : cudaSuccess;
    return e == cudaSuccess ? 0 : ck_err_set(err, -EIO, "%s on %s: staging to the host: %s",
                                             w->what, c->name, cudaGetErrorString(e));
}

static int stage_out(sh_comm *c, sh_work *w, void *b, size_t bb, void *ha, void *hb, int rc,
                     ck_err *err)
{
    if (!rc && b && bb) {
        cudaError_t e = cudaMemcpy(b, hb, bb, cudaMemcpyHostToDevice);
        if (e != cudaSuccess)
            rc = ck_err_set(err, -EIO, "%s on %s: staging back to the device: %s", w->what,
                            c->name, cudaGetErrorString(e));
    }
    if (hb != ha)
        free(hb);
    free(ha);
    return rc;
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

/* Sends the collective on its way: MPI on host buffers A and B, MPI on host copies
 * of them (VIA_HOST), or falls through to NCCL with t set and the stream ordered.
 * mpi_call names its buffers S and R. */
#define ROUTE(a, ab, b, bb, mpi_call)                                                   \
    ncclDataType_t t;                                                                   \
    do {                                                                                \
        int r_ = route(c, a, b, w, err);                                                \
        if (r_ < 0)                                                                     \
            return r_;                                                                  \
        if (r_ == VIA_MPI) {                                                            \
            void *S = (void *)(a), *R = (void *)(b);                                    \
            (void)S, (void)R;                                                           \
            return mpi_call;                                                            \
        }                                                                               \
        if (r_ == VIA_HOST) {                                                           \
            void *S, *R;                                                                \
            int s_ = stage_in(c, w, a, ab, b, bb, &S, &R, err);                         \
            if (!s_)                                                                    \
                s_ = mpi_call;                                                          \
            if (!s_)                                                                    \
                s_ = sh_mpi_ops.wait(w, err);                                           \
            return stage_out(c, w, (void *)(b), bb, S, R, s_, err);                     \
        }                                                                               \
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
    size_t sz = ck_dtype_size(dt);
    ROUTE(send, count * sz, recv, count * sz * (size_t)c->size,
          sh_mpi_ops.all_gather(c, S, R, count, dt, w, err));
    return after(c, w, ncclAllGather(send, recv, count, t, c->nccl->comm, c->nccl->stream),
                 err);
}

static int n_reduce_scatter(sh_comm *c, const void *send, void *recv, size_t count,
                            ck_dtype dt, sh_reduce_op op, sh_work *w, ck_err *err)
{
    size_t sz = ck_dtype_size(dt);
    ROUTE(send, count * sz * (size_t)c->size, recv, count * sz,
          sh_mpi_ops.reduce_scatter(c, S, R, count, dt, op, w, err));
    return after(c, w, ncclReduceScatter(send, recv, count, t, red(op), c->nccl->comm,
                                         c->nccl->stream), err);
}

static int n_all_reduce(sh_comm *c, const void *send, void *recv, size_t count, ck_dtype dt,
                        sh_reduce_op op, sh_work *w, ck_err *err)
{
    size_t bytes = count * ck_dtype_size(dt);
    ROUTE(send, bytes, recv, bytes, sh_mpi_ops.all_reduce(c, S, R, count, dt, op, w, err));
    return after(c, w, ncclAllReduce(send, recv, count, t, red(op), c->nccl->comm,
                                     c->nccl->stream), err);
}

static int n_broadcast(sh_comm *c, void *buf, size_t count, ck_dtype dt, int root,
                       sh_work *w, ck_err *err)
{
    size_t bytes = count * ck_dtype_size(dt);
    ROUTE(buf, bytes, buf, bytes, sh_mpi_ops.broadcast(c, S, count, dt, root, w, err));
    return after(c, w, ncclBroadcast(buf, buf, count, t, root, c->nccl->comm,
                                     c->nccl->stream), err);
}

/* NCCL has no gather: the root receives from every rank in one group, and copies
 * its own block. recv is only significant (and only classified) at the root. */
static int n_gather(sh_comm *c, const void *send, void *recv, size_t count, ck_dtype dt,
                    int root, sh_work *w, ck_err *err)
{
    size_t bytes = count * ck_dtype_size(dt);
    ROUTE(send, bytes, c->rank == root ? recv : NULL, bytes * (size_t)c->size,
          sh_mpi_ops.gather(c, S, R, count, dt, root, w, err));
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
    const sh_nccl_seam *seam = c->job->nccl_seam;
    if (c->nccl)
        seam->close(seam->arg, c->nccl);
    c->nccl = NULL;
    sh_mpi_ops.destroy(c);
}

int sh_nccl_attach_world(sh_comm *world, const sh_nccl_seam *seam, ck_err *err)
{
    world->job->nccl_seam = seam;
    return sh_nccl_attach(world, err);
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
