/* sh/comm.h - collectives with asynchronous handles, and the device mesh.
 *
 * A communicator is one group of ranks. Every collective may be started
 * asynchronously: pass a `sh_work **` and wait on the handle later (sh_work_wait
 * completes and frees it); pass NULL to run it to completion before returning. The
 * CPU backend uses MPI's nonblocking collectives; a GPU backend (NCCL) implements the
 * same table of operations (see libshard/train/comm/comm.h), so the FSDP code above
 * never names MPI.
 *
 * Buffers are counted in elements of `dtype`, one of the dtypes the table
 * libshard/train/comm/dtypes.h lists (any other is -EINVAL). All ranks of the
 * communicator must start the same collectives in the same order, as in MPI/NCCL.
 */
#ifndef SH_COMM_H
#define SH_COMM_H

#include <stdbool.h>
#include <stddef.h>

#include "ck/types.h"
#include "sh/world.h"

typedef struct sh_work sh_work;
typedef enum sh_reduce_op { SH_SUM, SH_MAX } sh_reduce_op;

int sh_comm_rank(const sh_comm *c);
int sh_comm_size(const sh_comm *c);
const char *sh_comm_name(const sh_comm *c);   /* "world", "mesh dim 'shard'", ... */

/* recv (size * count) receives every rank's count elements, in rank order. */
int sh_all_gather(sh_comm *c, const void *send, void *recv, size_t count, ck_dtype dt,
                  sh_work **work, ck_err *err);
/* send holds size * count elements; rank r receives the reduction of every rank's
 * r-th block of count elements. */
int sh_reduce_scatter(sh_comm *c, const void *send, void *recv, size_t count, ck_dtype dt,
                      sh_reduce_op op, sh_work **work, ck_err *err);
/* In place when send == recv. */
int sh_all_reduce(sh_comm *c, const void *send, void *recv, size_t count, ck_dtype dt,
                  sh_reduce_op op, sh_work **work, ck_err *err);
int sh_broadcast(sh_comm *c, void *buf, size_t count, ck_dtype dt, int root, sh_work **work,
                 ck_err *err);
/* recv (significant at root only) receives size * count elements in rank order. */
int sh_gather(sh_comm *c, const void *send, void *recv, size_t count, ck_dtype dt, int root,
              sh_work **work, ck_err *err);
int sh_barrier(sh_comm *c, sh_work **work, ck_err *err);

/* Completes the collective and frees the handle. NULL is a no-op. */
int sh_work_wait(sh_work *work, ck_err *err);

/* A device mesh: the world's ranks arranged row-major in an N-D array (torch's
 * DeviceMesh(arange(world).view(shape))), with a name and a communicator per dim:
 * the communicator of dim d joins the ranks that differ only in their coordinate d. */
typedef struct sh_mesh sh_mesh;

/* names may be NULL, or hold ndim names. The product of shape must be the world size;
 * otherwise -EINVAL with both numbers in the message. */
int sh_mesh_new(sh_world *w, int ndim, const int *shape, const char *const *names,
                sh_mesh **out, ck_err *err);
void sh_mesh_free(sh_mesh *m);
int sh_mesh_ndim(const sh_mesh *m);
int sh_mesh_size(const sh_mesh *m, int dim);
int sh_mesh_coord(const sh_mesh *m, int dim);     /* this rank's coordinate */
sh_comm *sh_mesh_comm(sh_mesh *m, int dim);
/* The dim called name, or -1. */
int sh_mesh_dim(const sh_mesh *m, const char *name);
/* The shape and names as the checkpoint core describes a mesh. */
const ck_mesh *sh_mesh_desc(const sh_mesh *m);

#endif
