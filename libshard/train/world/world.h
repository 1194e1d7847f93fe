/* world/world.h - the process's place in the job (sh_world) and the library's
 * counted memory.
 *
 * The world holds the job's communicator, this rank's device and the memory
 * counters; everything above this box allocates parameters, gradients, optimizer
 * state and collective buffers through sh_alloc / sh_alloc_state, so that the
 * counters (sh_mem_get) are exact, and finds its device's table through sh_dev.
 */
#ifndef SH_WORLD_WORLD_H
#define SH_WORLD_WORLD_H

#include <stdbool.h>
#include <stddef.h>

#include "device/device.h"
#include "sh/world.h"

struct sh_world {
    int rank, size, local_rank, local_size;
    bool owns_mpi;
    sh_comm *comm;
    struct sh_comm_job *job;   /* what its communicators share (comm/comm.h) */
    sh_mem_stats mem;
    sh_device device;      /* SH_CPU until sh_world_set_device(SH_CUDA) */
    int cuda_ordinal;      /* the CUDA device this rank drives */
    void *blas;            /* its cuBLAS handle */
    long host_waits;       /* times the host waited for the device (sh_host_wait) */
};

/* The world's device table. */
static inline const sh_dev_ops *sh_dev(const sh_world *w) { return sh_dev_for(w->device); }

/* Counted allocations on the world's device. */
void *sh_alloc(sh_world *w, sh_mem_kind kind, size_t bytes, bool zero);
void sh_free(sh_world *w, sh_mem_kind kind, void *p, size_t bytes);
/* The same for a parameter's sharded state (shard, sharded gradient, optimizer
 * state): pinned host memory when `host` (its host_state: CPU offload on a CUDA
 * rank), else the world's device. */
void *sh_alloc_state(sh_world *w, bool host, sh_mem_kind kind, size_t bytes, bool zero);
void sh_free_state(sh_world *w, bool host, sh_mem_kind kind, void *ptr, size_t bytes);

#endif
