/* comm/nccl.h - the NCCL backend's private pieces: its link (communicator + stream), the
 * seam through which links are made, and the bootstrap over MPI.
 *
 * Only the CUDA build compiles this backend (nccl.c, nccl_boot.c, nccl_seams.c). The
 * seam exists because making a real communicator needs a GPU: tests on CPU machines
 * put a recorder in its place and check everything around it (one unique id per
 * communicator, shared by exactly its ranks; host buffers still on MPI).
 */
#ifndef SH_COMM_NCCL_H
#define SH_COMM_NCCL_H

#include <nccl.h>
#include <stdbool.h>

#include "comm/comm.h"

/* What the backend holds per communicator. */
typedef struct sh_nccl_link {
    ncclComm_t comm;         /* NULL under a test seam */
    void *stream;            /* cudaStream_t the collectives run on; NULL under a seam */
    void *ready;             /* cudaEvent_t: the compute stream's work before a collective */
    /* No NCCL: device buffers go through MPI on host copies. For ranks that share a
     * GPU, which NCCL refuses in one communicator ($SH_DEVICE_COMM=mpi). */
    bool host_staged;
} sh_nccl_link;

typedef struct sh_nccl_seam {
    /* Makes rank `rank` of `nranks` of the communicator with this id (collective:
     * every rank of it calls this with the same id). */
    int (*open)(void *arg, const ncclUniqueId *id, int nranks, int rank, const char *name,
                sh_nccl_link **out, ck_err *err);
    void (*close)(void *arg, sh_nccl_link *l);
    void *arg;
} sh_nccl_seam;

/* The real seam: ncclCommInitRank on the current device and a non-blocking stream
 * (nccl_seams.c). */
extern const sh_nccl_seam sh_nccl_cuda_seam;
/* Host-staged links, no NCCL communicator. */
extern const sh_nccl_seam sh_nccl_staged_seam;

/* Rank 0 of c's MPI communicator makes a unique id and broadcasts it over MPI; every
 * rank then opens its link through the job's seam. Every rank returns the same
 * verdict: a rank that failed makes every rank fail (and close what it opened). */
int sh_nccl_bootstrap(sh_comm *c, sh_nccl_link **out, ck_err *err);

/* Turns an MPI communicator into a NCCL one (bootstrap, then the NCCL ops table). */
int sh_nccl_attach(sh_comm *c, ck_err *err);

/* The world's communicator becomes a NCCL one made through `seam` (the world's device
 * chosen first, or none selected in tests); communicators split from it afterwards,
 * the meshes', use the same seam. */
int sh_nccl_attach_world(sh_comm *world, const sh_nccl_seam *seam, ck_err *err);

extern const sh_comm_ops sh_nccl_ops;

#endif
