/* comm/mpi.c - the CPU backend: MPI's nonblocking collectives. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/dtypes.h"
#include "comm/peers.h"

#define MPI_ROW(dt, type, sum, max, nccl) [dt] = { true, type },
static const struct {
    bool ok;
    MPI_Datatype type;
} mpi_types[CK_DTYPE_MAX + 1] = { SH_COMM_DTYPES(MPI_ROW) };
#undef MPI_ROW

static int mpi_type(ck_dtype dt, MPI_Datatype *out)
{
    if (dt < 1 || dt > CK_DTYPE_MAX || !mpi_types[dt].ok)
        return -EINVAL;
    *out = mpi_types[dt].type;
    return 0;
}

/* After mpi_type accepted dt. */
static void mpi_op(const sh_comm_job *j, ck_dtype dt, sh_reduce_op op, MPI_Op *out)
{
    *out = op == SH_SUM ? j->op_sum[dt] : j->op_max[dt];
}

static int mpi_fail(sh_comm *c, const char *what, int code, ck_err *err)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, msg, &len);
    return ck_err_set(err, -EIO, "%s on %s (rank %d of %d): %s", what, c->name, c->rank,
                      c->size, msg);
}

#define TYPE_OR_FAIL(dt, t, what)                                                       \
    do {                                                                                \
        if (mpi_type(dt, &t))                                                           \
            return ck_err_set(err, -EINVAL, "%s on %s: dtype %s is not supported",      \
                              what, c->name, ck_dtype_name(dt) ? ck_dtype_name(dt) : "?"); \
    } while (0)

static int m_all_gather(sh_comm *c, const void *send, void *recv, size_t count, ck_dtype dt,
                        sh_work *w, ck_err *err)
{
    MPI_Datatype t;
    TYPE_OR_FAIL(dt, t, w->what);
    int rc = MPI_Iallgather(send, (int)count, t, recv, (int)count, t, c->mpi, &w->req);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(c, w->what, rc, err);
}

static int m_reduce_scatter(sh_comm *c, const void *send, void *recv, size_t count,
                            ck_dtype dt, sh_reduce_op op, sh_work *w, ck_err *err)
{
    MPI_Datatype t;
    MPI_Op o;
    TYPE_OR_FAIL(dt, t, w->what);
    mpi_op(c->job, dt, op, &o);
    int rc = MPI_Ireduce_scatter_block(send, recv, (int)count, t, o, c->mpi, &w->req);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(c, w->what, rc, err);
}

static int m_all_reduce(sh_comm *c, const void *send, void *recv, size_t count, ck_dtype dt,
                        sh_reduce_op op, sh_work *w, ck_err *err)
{
    MPI_Datatype t;
    MPI_Op o;
    TYPE_OR_FAIL(dt, t, w->what);
    mpi_op(c->job, dt, op, &o);
    int rc = MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, t, o,
                            c->mpi, &w->req);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(c, w->what, rc, err);
}

static int m_broadcast(sh_comm *c, void *buf, size_t count, ck_dtype dt, int root,
                       sh_work *w, ck_err *err)
{
    MPI_Datatype t;
    TYPE_OR_FAIL(dt, t, w->what);
    int rc = MPI_Ibcast(buf, (int)count, t, root, c->mpi, &w->req);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(c, w->what, rc, err);
}

static int m_gather(sh_comm *c, const void *send, void *recv, size_t count, ck_dtype dt,
                    int root, sh_work *w, ck_err *err)
{
    MPI_Datatype t;
    TYPE_OR_FAIL(dt, t, w->what);
    int rc = MPI_Igather(send, (int)count, t, recv, (int)count, t, root, c->mpi, &w->req);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(c, w->what, rc, err);
}

static int m_barrier(sh_comm *c, sh_work *w, ck_err *err)
{
    int rc = MPI_Ibarrier(c->mpi, &w->req);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(c, w->what, rc, err);
}

/* MPI_Wait would wait forever for a dead peer: test, and let the watchdog look. The
 * request of a collective given up on stays with MPI; the caller is to end the job
 * (sh_abort), as MPI offers no way to cancel a collective. */
static int m_wait(sh_work *w, ck_err *err)
{
    double next = 0.0;
    for (;;) {
        int done = 0, rc = MPI_Test(&w->req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return mpi_fail(w->comm, w->what, rc, err);
        if (done)
            return 0;
        if ((rc = sh_peers_watch(w->comm->job, &next, w->what, w->comm->name, err)))
            return rc;
    }
}

static int m_split(sh_comm *c, int color, int key, const char *name, sh_comm **out,
                   ck_err *err)
{
    sh_comm *n = calloc(1, sizeof *n);
    if (!n)
        return ck_err_set(err, -ENOMEM, "splitting %s: out of memory", c->name);
    int rc = MPI_Comm_split(c->mpi, color, key, &n->mpi);
    if (rc != MPI_SUCCESS) {
        free(n);
        return mpi_fail(c, "split", rc, err);
    }
    MPI_Comm_set_errhandler(n->mpi, MPI_ERRORS_RETURN);
    n->ops = c->ops;
    n->job = c->job;
    MPI_Comm_rank(n->mpi, &n->rank);
    MPI_Comm_size(n->mpi, &n->size);
    snprintf(n->name, sizeof n->name, "%s", name);
    *out = n;
    return 0;
}

int sh_comm_mpi_new(sh_comm_job *job, MPI_Comm mpi, const char *name, sh_comm **out)
{
    sh_comm *c = calloc(1, sizeof *c);
    *out = c;
    if (!c)
        return -ENOMEM;
    c->ops = &sh_mpi_ops;
    c->job = job;
    c->mpi = mpi;
    MPI_Comm_rank(mpi, &c->rank);
    MPI_Comm_size(mpi, &c->size);
    snprintf(c->name, sizeof c->name, "%s", name);
    return 0;
}

static void m_destroy(sh_comm *c)
{
    MPI_Comm_free(&c->mpi);
    free(c);
}

const sh_comm_ops sh_mpi_ops = {
    .all_gather = m_all_gather,
    .reduce_scatter = m_reduce_scatter,
    .all_reduce = m_all_reduce,
    .broadcast = m_broadcast,
    .gather = m_gather,
    .barrier = m_barrier,
    .wait = m_wait,
    .split = m_split,
    .destroy = m_destroy,
};
