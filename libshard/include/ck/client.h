/* ck/client.h - asynchronous checkpoint saves from training ranks, and loads.
 *
 * What PyTorch's dcp.async_save gives, in C: a rank declares its checkpoint, offers
 * its local shards, and calls ck_client_save_async, which copies them into a staging
 * area (shared memory, laid out as the rank's data file) and returns. That copy is the
 * only stall; the data is then written, hashed and fsynced by the save engine while
 * training goes on, and committed atomically when every rank's part is durable.
 *
 *   ck_client *cl;
 *   ck_client_open(&cl, "/ckpt", NULL, &err);         // embedded unless CKPTD_SOCKET
 *   ck_client_save *sv;
 *   ck_client_begin(cl, &sv, "step-00001200", 1200, &mesh, rank, world, &err);
 *   ck_client_tensor(sv, "layers.0.w", CK_BF16, 2, shape, pl, &err);  // every rank, same order
 *   ck_client_shard(sv, "layers.0.w", local_bytes, &err);            // this rank's box
 *   ck_client_blob(sv, "rng.rank3", state, len, &err);
 *   ck_client_save_async(sv, &err);                    // copy, return; train on
 *   if (rank == 0) ck_client_commit(sv, &err);         // commit once all are durable
 *   ...
 *   ck_client_wait(sv, &err);                          // committed, or the error
 *   ck_client_save_free(sv);
 *
 * Two modes, same results. Connected: the engine is ckptd, reached over a Unix socket
 * (opts->socket, else $CKPTD_SOCKET); the staging memfd is handed to it, so a save
 * whose every part was staged and whose commit was asked for completes even if every
 * rank dies. Embedded (the default): the same engine runs on threads inside this
 * process; ranks that are threads of one process share one engine (opts->peer).
 *
 * Staging is double-buffered per client: a save waits in ck_client_save_async only
 * while the save before the previous one still drains. A ck_client and its saves are
 * used by one thread at a time.
 */
#ifndef CK_CLIENT_H
#define CK_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ck/ckpt.h"
#include "ck/engine.h"

typedef struct ck_client ck_client;
typedef struct ck_client_save ck_client_save;

typedef struct ck_client_opts {
    const char *socket;        /* ckptd's socket; NULL: $CKPTD_SOCKET, else embedded */
    bool embedded;             /* embedded even when $CKPTD_SOCKET is set */
    ck_client *peer;           /* embedded: share this client's engine (ranks as threads) */
    /* Embedded engine settings (ckptd has its own command line): */
    ck_engine *engine;         /* NULL: the default I/O engine */
    unsigned writers;          /* writer threads; 0: 4 */
    unsigned hash_threads;     /* 0: one per CPU */
    void (*log)(void *arg, const char *msg);
    void *log_arg;
} ck_client_opts;

/* root: the checkpoint root. Connected, it may be NULL (the daemon's root is used)
 * and must otherwise be the daemon's root. */
int ck_client_open(ck_client **out, const char *root, const ck_client_opts *opts,
                   ck_err *err);
/* Waits until every part this client staged is durable, then closes. */
void ck_client_close(ck_client *cl);
bool ck_client_connected(const ck_client *cl);
const char *ck_client_root(const ck_client *cl);

/* Starts this rank's part of checkpoint name. world must be the mesh's rank count. */
int ck_client_begin(ck_client *cl, ck_client_save **out, const char *name, uint64_t step,
                    const ck_mesh *mesh, uint64_t rank, uint64_t world, ck_err *err);
/* Records without SHA-256 block hashes (benchmarks). Every rank must agree. */
void ck_client_no_hash(ck_client_save *sv);
/* Declares a tensor; every rank declares the same tensors in the same order. */
int ck_client_tensor(ck_client_save *sv, const char *name, ck_dtype dtype, int ndim,
                     const uint64_t *shape, const ck_placement *pl, ck_err *err);
/* This rank's local shard: the row-major bytes of its box, read during
 * ck_client_save_async only. Replicas the plan gives to another rank are skipped. */
int ck_client_shard(ck_client_save *sv, const char *tensor, const void *data, ck_err *err);
/* The same, produced by fill(arg, off, dst, len) straight into staging. */
int ck_client_shard_fill(ck_client_save *sv, const char *tensor, ck_fill_fn fill, void *arg,
                         ck_err *err);
/* A tensor stored as an explicit list of boxes (format 1.1, ck_save_tensor_boxes):
 * every rank declares the same full list in the same place among its tensors (DCP's
 * coordinator knows every rank's plan and ships the list to each rank); the engine
 * checks that the ranks agree and refuses the save, naming the tensor, when they do
 * not. */
int ck_client_tensor_boxes(ck_client_save *sv, const char *name, ck_dtype dtype, int ndim,
                           const uint64_t *shape, uint32_t nboxes, const ck_box *boxes,
                           const uint64_t *writers, ck_err *err);
/* One of this rank's boxes of a box-list tensor: the row-major bytes of box number box
 * (writers[box] must be this rank), read during ck_client_save_async only. Every box
 * this rank writes must be given. */
int ck_client_box(ck_client_save *sv, const char *tensor, uint32_t box, const void *data,
                  ck_err *err);
int ck_client_box_fill(ck_client_save *sv, const char *tensor, uint32_t box, ck_fill_fn fill,
                       void *arg, ck_err *err);
/* A named byte string of this rank (copied); names are unique over all ranks. */
int ck_client_blob(ck_client_save *sv, const char *name, const void *data, size_t len,
                   ck_err *err);
/* Copies this rank's shards and blobs into staging, hands them to the engine and
 * returns. Every tensor this rank writes must have its shard. */
int ck_client_save_async(ck_client_save *sv, ck_err *err);
/* Rank 0, after its save_async: commit once every rank's part is durable. */
int ck_client_commit(ck_client_save *sv, ck_err *err);

typedef enum ck_client_state {
    CK_CLIENT_BUILDING = 0,    /* before save_async */
    CK_CLIENT_STAGED,          /* the engine has the part */
    CK_CLIENT_DURABLE,         /* the part is on disk; its staging is free again */
    CK_CLIENT_COMMITTED,       /* the checkpoint is visible */
    CK_CLIENT_FAILED,
} ck_client_state;

/* Where the save stands, without blocking. On FAILED, err holds the reason. */
int ck_client_poll(ck_client_save *sv, ck_client_state *state, ck_err *err);
/* Blocks until the checkpoint is committed (0) or failed (the error). */
int ck_client_wait(ck_client_save *sv, ck_err *err);
/* Blocks until the part no longer needs its staging area, then frees sv. */
void ck_client_save_free(ck_client_save *sv);

/* Loads the part of tensor that rank holds on mesh with placements pl (any mesh, any
 * placements: resharding) from checkpoint name into dst, reading exactly the needed
 * byte ranges (ck/load.h). dst_len must be that part's size, ck_box_numel(box) *
 * itemsize bytes; another size is refused (-EINVAL, naming both) before any read. */
int ck_client_load(ck_client *cl, const char *name, const char *tensor, const ck_mesh *mesh,
                   const ck_placement *pl, uint64_t rank, void *dst, size_t dst_len,
                   ck_err *err);
/* Loads any box of tensor (inside its shape) into dst, dst_len = ck_box_numel(box) *
 * itemsize bytes, whatever layout it was saved with (DCP's read items). */
int ck_client_load_box(ck_client *cl, const char *name, const char *tensor, const ck_box *box,
                       void *dst, size_t dst_len, ck_err *err);

#endif
