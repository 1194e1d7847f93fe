/* comm/comm.h - the collectives' private structures: the backend table, the
 * communicator and its handles, and what the communicators of one job share.
 *
 * The backend is a table of operations (sh_comm_ops) so that the NCCL backend for
 * CUDA tensors slots in beside the MPI one without touching the FSDP code, which only
 * calls the sh_* collectives (sh/comm.h) and the kernels/ functions.
 *
 * The box knows no world: what its backends need of the job (this rank's place for
 * messages, MPI's reductions of the dtypes it has none for, the peer watchdog, how
 * NCCL links are made) is an sh_comm_job, which sh_init makes and every communicator
 * split from the world's points to.
 */
#ifndef SH_COMM_COMM_H
#define SH_COMM_COMM_H

#include <mpi.h>
#include <stddef.h>

#include "ck/error.h"
#include "ck/types.h"
#include "sh/comm.h"

typedef struct sh_comm_ops {
    int (*all_gather)(sh_comm *c, const void *send, void *recv, size_t count, ck_dtype dt,
                      sh_work *w, ck_err *err);
    int (*reduce_scatter)(sh_comm *c, const void *send, void *recv, size_t count,
                          ck_dtype dt, sh_reduce_op op, sh_work *w, ck_err *err);
    int (*all_reduce)(sh_comm *c, const void *send, void *recv, size_t count, ck_dtype dt,
                      sh_reduce_op op, sh_work *w, ck_err *err);
    int (*broadcast)(sh_comm *c, void *buf, size_t count, ck_dtype dt, int root,
                     sh_work *w, ck_err *err);
    int (*gather)(sh_comm *c, const void *send, void *recv, size_t count, ck_dtype dt,
                  int root, sh_work *w, ck_err *err);
    int (*barrier)(sh_comm *c, sh_work *w, ck_err *err);
    int (*wait)(sh_work *w, ck_err *err);
    /* A sub-communicator of the ranks with the same color, ordered by key. */
    int (*split)(sh_comm *c, int color, int key, const char *name, sh_comm **out,
                 ck_err *err);
    void (*destroy)(sh_comm *c);
} sh_comm_ops;

typedef struct sh_peers sh_peers;

/* What the communicators of one job share. */
typedef struct sh_comm_job {
    int rank, size;        /* this process in the world, for messages */
    /* Each dtype's reductions (dtypes.h): MPI's own, or ones made for the job. */
    MPI_Op op_sum[CK_DTYPE_MAX + 1], op_max[CK_DTYPE_MAX + 1];
    sh_peers *peers;       /* the other ranks of this host, watched while waiting */
    /* How NCCL communicators are made (nccl.c); tests replace it to run the
     * bootstrap on machines without a GPU. NULL in a build without CUDA. */
    const struct sh_nccl_seam *nccl_seam;
} sh_comm_job;

struct sh_comm {
    const sh_comm_ops *ops;
    sh_comm_job *job;
    int rank, size;
    char name[64];
    MPI_Comm mpi;          /* MPI's handle; the NCCL backend keeps it for its bootstrap
                              and for collectives on host buffers */
    struct sh_nccl_link *nccl;   /* the NCCL backend's communicator and stream */
};

struct sh_work {
    sh_comm *comm;
    const char *what;      /* "all-gather", ... for error messages */
    MPI_Request req;
    void *event;           /* NCCL backend: the CUDA event recorded after the collective;
                              NULL when the collective went through MPI */
};

/* The job of rank `rank` of `size`, whose ranks on this host (local_size of them)
 * form `local`: collective over it, as the peer watchdog learns their pids. */
int sh_comm_job_new(int rank, int size, MPI_Comm local, int local_size, sh_comm_job **out,
                    ck_err *err);
void sh_comm_job_free(sh_comm_job *j);

/* An MPI communicator of the job over mpi (which it then owns); -ENOMEM, with no
 * message, when there is no memory for it. */
int sh_comm_mpi_new(sh_comm_job *job, MPI_Comm mpi, const char *name, sh_comm **out);

extern const sh_comm_ops sh_mpi_ops;

int sh_comm_split(sh_comm *c, int color, int key, const char *name, sh_comm **out,
                  ck_err *err);
void sh_comm_free(sh_comm *c);

#endif
