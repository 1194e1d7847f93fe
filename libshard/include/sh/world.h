/* sh/world.h - the process's place in the job, and the library's memory counters.
 *
 * Errors follow the checkpoint core's convention (ck/error.h): functions return 0 or a
 * negative errno-style code, and fill a ck_err whose message names the module,
 * parameter, tensor or rank involved.
 *
 * There is no hidden global state: everything the library keeps lives in the sh_world
 * that sh_init returns, and in the objects made from it.
 */
#ifndef SH_WORLD_H
#define SH_WORLD_H

#include <stdint.h>

#include "ck/error.h"
#include "sh/tensor.h"

typedef struct sh_world sh_world;
typedef struct sh_comm sh_comm;

/* Joins the job: initializes MPI unless the program already did, and works under
 * shardrun, plain mpirun, or srun (a program started alone is a world of one).
 * Where RANK / WORLD_SIZE / LOCAL_RANK are set (shardrun, torchrun habits) they are
 * checked against MPI's view and a disagreement is an error that shows both. */
int sh_init(int *argc, char ***argv, sh_world **out, ck_err *err);

/* Frees the world; finalizes MPI only when sh_init initialized it. Every comm, mesh
 * and module made from the world must be freed first. */
void sh_finalize(sh_world *w);

/* Ends this rank at once and asks the launcher to end every other rank of the job
 * (MPI_Abort), with `status` as the job's exit status; does not return. For a rank
 * that cannot go on, above all after -EPIPE from a collective (a peer of this host
 * died, see below): sh_finalize would wait for ranks that never arrive. Saves in
 * flight are left as debris for the next recovery (their locks die with the process).
 *
 * A collective that waits for a rank of this host that has died (SIGKILL, a crash)
 * fails with -EPIPE naming that rank, within about a second of the death, whatever
 * the launcher does; ranks of other hosts hear of it through the sh_abort of a rank
 * of the dead one's host. */
void sh_abort(sh_world *w, int status) __attribute__((noreturn));

/* Puts this rank on a device, as a torchrun script's cudaSetDevice(LOCAL_RANK) and
 * init_process_group("nccl") do. SH_CPU: nothing changes (the default). SH_CUDA:
 * the rank drives CUDA device LOCAL_RANK (modulo the devices this host has) and the
 * world's communicator becomes a NCCL one, bootstrapped over MPI; meshes made
 * afterwards get one NCCL communicator per dim. Collectives on device buffers then
 * run on NCCL, on a stream of their own; collectives on host buffers (control words,
 * norms) still run on MPI. $SH_DEVICE_COMM=mpi instead moves device buffers through
 * MPI on host copies (ranks sharing one GPU, which NCCL refuses). Call it first, on
 * every rank, before making any mesh or module (-EBUSY once the library holds memory).
 * -ENOTSUP in a build without CUDA; -ENODEV when no device can be used (the message
 * says why: no driver, no device). */
int sh_world_set_device(sh_world *w, sh_device dev, ck_err *err);
sh_device sh_world_device(const sh_world *w);

int sh_world_rank(const sh_world *w);
int sh_world_size(const sh_world *w);
int sh_world_local_rank(const sh_world *w);   /* rank among the ranks of this host */
int sh_world_local_size(const sh_world *w);
sh_comm *sh_world_comm(sh_world *w);          /* all ranks */

/* Bytes the library holds, by kind. PARAM: sharded parameters, unsharded parameters
 * and post-forward shards; GRAD: sharded and unsharded gradients; OPTIM: optimizer
 * state; COMM: flat collective buffers (transient). */
typedef enum sh_mem_kind {
    SH_MEM_PARAM, SH_MEM_GRAD, SH_MEM_OPTIM, SH_MEM_COMM, SH_MEM_KINDS
} sh_mem_kind;

typedef struct sh_mem_stats {
    uint64_t cur[SH_MEM_KINDS];
    uint64_t peak[SH_MEM_KINDS];
    uint64_t state_cur;    /* PARAM + GRAD + OPTIM now */
    uint64_t state_peak;   /* the peak of that sum (not the sum of the peaks) */
} sh_mem_stats;

void sh_mem_get(const sh_world *w, sh_mem_stats *out);
/* Peaks restart from the current values. */
void sh_mem_reset_peak(sh_world *w);

#endif
