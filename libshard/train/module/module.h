/* internal.h - the training library's private structures.
 *
 * The comm backend is a table of operations (sh_comm_ops) so that a NCCL backend for
 * CUDA tensors slots in beside the MPI one without touching the FSDP code, which only
 * calls the sh_* collectives and the kernels/ functions.
 */
#ifndef SH_INTERNAL_H
#define SH_INTERNAL_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>

#include "sh/sh.h"

/* ---- comm backend ---- */

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

struct sh_comm {
    const sh_comm_ops *ops;
    sh_world *world;
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

extern const sh_comm_ops sh_mpi_ops;

int sh_comm_split(sh_comm *c, int color, int key, const char *name, sh_comm **out,
                  ck_err *err);
void sh_comm_free(sh_comm *c);

/* ---- world ---- */

/* The peer watchdog (peers.c). */
typedef struct sh_peers sh_peers;
/* Learns the pids of the ranks of this host (collective over `local`). */
int sh_peers_new(sh_world *w, MPI_Comm local, sh_peers **out, ck_err *err);
void sh_peers_free(sh_peers *p);
/* Called in the loop of a blocking wait, *next zero at its start: -EPIPE, with a
 * message naming the collective, the comm and the dead rank, once a peer of this host
 * has exited; it looks at most once a second, and not in the first second. */
int sh_peers_watch(sh_world *w, double *next, const char *what, const char *comm,
                   ck_err *err);

struct sh_world {
    int rank, size, local_rank, local_size;
    bool owns_mpi;
    sh_comm *comm;
    /* Each dtype's reductions (comm_dtypes.h): MPI's own, or ones made at sh_init. */
    MPI_Op op_sum[CK_DTYPE_MAX + 1], op_max[CK_DTYPE_MAX + 1];
    sh_mem_stats mem;
    sh_peers *peers;       /* the other ranks of this host, watched while waiting */
    sh_device device;      /* SH_CPU until sh_world_set_device(SH_CUDA) */
    int cuda_ordinal;      /* the CUDA device this rank drives */
    void *blas;            /* its cuBLAS handle */
    long host_waits;       /* times the host waited for the device (sh_host_wait) */
    /* How NCCL communicators are made (comm_nccl.c); tests replace it to run the
     * bootstrap on machines without a GPU. NULL in a build without CUDA. */
    const struct sh_nccl_seam *nccl_seam;
};

/* Device hooks (device_cuda.c, or device_none.c without CUDA): select this rank's
 * CUDA device; then make the world's communicator a NCCL one. */
int sh_cuda_attach(sh_world *w, ck_err *err);
int sh_cuda_attach_comm(sh_world *w, ck_err *err);
void sh_cuda_detach(sh_world *w);

/* Counted allocations: every byte of parameters, gradients, optimizer state and
 * collective buffers goes through these, so the counters are exact. */
void *sh_alloc(sh_world *w, sh_mem_kind kind, size_t bytes, bool zero);
void sh_free(sh_world *w, sh_mem_kind kind, void *p, size_t bytes);
/* The same for p's sharded state (shard, sharded gradient, optimizer state): pinned
 * host memory when p->host_state, else the world's device. */
void *sh_alloc_state(sh_world *w, const sh_param *p, sh_mem_kind kind, size_t bytes,
                     bool zero);
void sh_free_state(sh_world *w, const sh_param *p, sh_mem_kind kind, void *ptr, size_t bytes);
/* Pinned host memory (device_cuda.c; -ENOTSUP without CUDA). */
int sh_pinned_alloc(void **p, size_t bytes, bool zero);
void sh_pinned_free(void *p);

/* ---- mesh ---- */

struct sh_mesh {
    sh_world *world;
    ck_mesh desc;
    uint32_t coord[CK_MAX_MESH_DIMS];
    sh_comm *comm[CK_MAX_MESH_DIMS];
};

/* ---- modules ---- */

typedef struct sh_group sh_group;     /* FSDP's, defined where FSDP is */

/* Whoever takes a module over (sh_fully_shard) installs these on it; module.c runs
 * them and knows nothing else about the installer. Any entry may be NULL. */
typedef struct sh_module_hooks {
    /* Around the forward callback. pre_forward may hand the callback another input,
     * built in *scratch (freed after the callback), as a torch forward pre-hook may
     * replace the args; post_forward may rewrite the output. */
    int (*pre_forward)(void *state, const sh_tensor **in, sh_tensor *scratch, ck_err *err);
    int (*post_forward)(void *state, sh_tensor *out, ck_err *err);
    int (*pre_backward)(void *state, ck_err *err);
    int (*post_backward)(void *state, ck_err *err);
    /* 0 when the full value (grad: the gradient buffer) of p, a parameter these hooks
     * govern, may be handed out now; else a negative errno and a message saying what
     * to call instead. */
    int (*check_param)(void *state, const sh_param *p, bool grad, ck_err *err);
    /* Frees the state; runs before the module's parameters are freed. */
    void (*release)(void *state);
    void *state;                 /* the installer's; non-NULL once installed */
} sh_module_hooks;

struct sh_param {
    sh_module *owner;
    char name[256];              /* full name */
    int ndim;
    int64_t shape[CK_MAX_NDIM];
    size_t numel, rows, row_elems;   /* rows: dim 0 (1 for 0-D) */
    sh_init_spec init;
    /* The module whose hooks govern this parameter (fully_shard grouped it there);
     * NULL: not sharded, its value always available. */
    sh_module *sharded_by;
    bool materialized;
    /* The local f32 shard: rows [shard_row, shard_row + shard_rows) of dim 0, set when
     * the parameter is created (all rows) or sharded; storage once materialized. */
    float *shard;
    size_t shard_row, shard_rows, shard_numel;
    /* The unsharded parameter in param_dtype: storage only while unsharded. For a
     * parameter outside any group it aliases `shard`. */
    sh_tensor value;
    float *grad_full;            /* unsharded f32 gradient, NULL when none */
    /* CPU offload on a CUDA rank: the shard, its sharded gradient and its optimizer
     * state live in pinned host memory, which the device reaches directly. */
    bool host_state;
    float *grad_shard;           /* sharded f32 gradient, NULL when none */
};

struct sh_module {
    sh_world *world;
    sh_module *parent;
    char name[256];              /* full name */
    sh_forward_fn forward;
    sh_backward_fn backward;
    void *user;
    sh_module **child;
    int nchild;
    sh_param **param;
    int nparam;
    sh_module_hooks hooks;       /* zero until installed */
    sh_group *group;             /* FSDP's view of the same state as hooks.state, for
                                    its walks over the tree; module.c never reads it */
};

/* Visits every module under root (root first, pre-order). */
typedef int (*sh_module_visit_fn)(sh_module *m, void *arg, ck_err *err);
int sh_module_walk(sh_module *root, sh_module_visit_fn fn, void *arg, ck_err *err);

/* The optimizer's parameters and f32 state, for the state dict. */
int sh_adamw_num_params(const sh_adamw *o);
sh_param *sh_adamw_param(const sh_adamw *o, int i);
float *sh_adamw_exp_avg(const sh_adamw *o, int i);
float *sh_adamw_exp_avg_sq(const sh_adamw *o, int i);

#endif
