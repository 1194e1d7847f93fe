/* comm/nccl_boot.c - a NCCL communicator per sh_comm, bootstrapped over its MPI twin:
 * rank 0 makes the unique id, MPI broadcasts it, every rank opens its link. */
#include <string.h>

#include "comm/nccl.h"

int sh_nccl_bootstrap(sh_comm *c, sh_nccl_link **out, ck_err *err)
{
    *out = NULL;
    const sh_nccl_seam *seam = c->job->nccl_seam;
    /* The id travels with rank 0's verdict, so that a rank 0 that could not make one
     * fails every rank here instead of leaving them waiting in the open. */
    struct {
        int32_t rc;
        ncclUniqueId id;
    } msg;
    memset(&msg, 0, sizeof msg);
    if (c->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&msg.id);
        if (r != ncclSuccess) {
            msg.rc = -EIO;
            ck_err_set(err, -EIO, "NCCL bootstrap of %s: ncclGetUniqueId: %s", c->name,
                       ncclGetErrorString(r));
        }
    }
    int mrc = MPI_Bcast(&msg, (int)sizeof msg, MPI_BYTE, 0, c->mpi);
    if (mrc != MPI_SUCCESS)
        return ck_err_set(err, -EIO, "NCCL bootstrap of %s (rank %d of %d): broadcasting "
                          "the unique id over MPI failed", c->name, c->rank, c->size);
    if (msg.rc) {
        if (c->rank != 0)
            ck_err_set(err, msg.rc, "NCCL bootstrap of %s: rank 0 could not make the "
                       "unique id", c->name);
        return msg.rc;
    }
    sh_nccl_link *link = NULL;
    int rc = seam->open(seam->arg, &msg.id, c->size, c->rank, c->name, &link, err);
    /* The verdict is shared: a communicator some ranks lack is one nobody may use. */
    int worst = rc;
    if (MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MIN, c->mpi) != MPI_SUCCESS && !rc)
        worst = -EIO;
    if (worst) {
        if (!rc) {
            seam->close(seam->arg, link);
            ck_err_set(err, worst, "NCCL bootstrap of %s (rank %d of %d): another rank "
                       "failed to join", c->name, c->rank, c->size);
        }
        return worst;
    }
    *out = link;
    return 0;
}
