/* ck/client.h - asynchronous checkpoint saves from training ranks.
 *
 * What PyTorch's dcp.async_save gives, in C: a rank declares its checkpoint, offers
 * its local shards, and calls ck_client_save_async, which copies them into a staging
 * area (shared memory, laid out as the rank's data file) and returns. That copy is the
 * only stall; the data is then written, hashed and fsynced by the save engine while
 * training goes on, and committed atomically when every rank's part is durable.
 *
 *   ck_client *cl;
 *   ck_client_open(&cl, "/ckpt", NULL, &err);         // embedded unless CKPTD_SOCKET
 *   ck_job_id job;                                     // once per job: rank 0 makes it,
 *   if (rank == 0) ck_job_id_new(&job, &err);          // the job's own collective
 *   MPI_Bcast(&job, sizeof job, MPI_BYTE, 0, comm);    // gives it to every rank
 *   ck_client_save *sv;
 *   ck_client_begin(cl, &sv, "step-00001200", 1200, &mesh, rank, world, &job, &err);
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
 * process; ranks that are threads of one process share one engine (opts->peer), and
 * the engines of a job's processes (opts->nodes of them, one per process) meet through
 * the root's file system exactly as the daemons of several nodes do: the engine of
 * rank 0 coordinates and commits (docs/FORMAT.md, "Saves served by several daemons").
 *
 * Staging is double-buffered per client: a save waits in ck_client_save_async only
 * while the save before the previous one still drains. Its memory is faulted in ahead
 * (on huge pages where the system gives them, decision 0046) and reused, so no save
 * pays for a first touch: declare the size early with ck_client_save_reserve (a save
 * of a new size that was not declared pays for its own slot, and the next slot is
 * made meanwhile on a thread).
 *
 * Lazy saves take the copy off the caller's path altogether, for sources that stay
 * unchanged until a point the caller names (a model's parameters and optimizer state
 * between two optimizer steps):
 *
 *   ck_client_save_lazy(sv, &err);      // returns at once; a thread copies
 *   ... forward, backward (they only read the sources) ...
 *   ck_client_save_fence(sv, &err);     // before the next write to the sources
 *   optimizer step
 *
 * A ck_client and its saves are used by one thread at a time; the lazy save's copy
 * thread is the client's until the fence, and every other call on the client (or its
 * saves) fences it first, so the one-thread rule holds for the caller. The one
 * exception is rank 0's ck_client_commit, which never waits for the copy: the copy
 * thread asks for the commit itself once the part is staged.
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
    /* Connected: how many ckptd (one per node, all on the same root) serve the job's
     * ranks, each rank through its own node's socket; 0: $CKPTD_NODES, else 1. Every
     * rank must give the same count (docs/PROTOCOL.md, "Several daemons"). */
    unsigned nodes;
    /* Connected: how long the client waits for ckptd, in seconds (docs/PROTOCOL.md,
     * "Time limits"). timeout_s bounds the answer to HELLO, the ADMIT of a part, each
     * message taken, and the daemon's silence during the longer waits; 0:
     * $CKPTD_TIMEOUT, else 10. commit_timeout_s bounds the wait for a part to be
     * durable and for the commit (ck_client_wait, and a save waiting for a staging
     * area); 0: $CKPTD_COMMIT_TIMEOUT, else 600. A daemon that misses a limit fails the
     * client's saves with -ETIMEDOUT naming its socket, its pid and the wait; the
     * next save connects again. */
    double timeout_s;
    double commit_timeout_s;
    ck_client *peer;           /* embedded: share this client's engine (ranks as threads) */
    /* Embedded, nodes > 1: the job's processes each run an engine of their own (every
     * rank declares the same count). Seconds a save may wait for the others' parts (0:
     * 600), and after which an engine whose heartbeat stands still is dead (0: 10). */
    unsigned part_timeout;
    unsigned dead_after;
    /* Embedded engine settings (ckptd has its own command line): */
    ck_engine *engine;         /* NULL: the default I/O engine */
    unsigned writers;          /* writer threads; 0: 4 */
    unsigned hash_threads;     /* 0: one per CPU */
    /* Both modes: */
    bool small_pages;          /* staging on 4 KiB pages, no huge page attempt */
    void (*log)(void *arg, const char *msg);   /* the engine's news, the staging's pages */
    void *log_arg;
    /* Told after a staging area is mapped, and before it is unmapped (only where
     * staging_mapped returned 0), on whatever thread maps it: a GPU rank registers the
     * area for DMA once (cudaHostRegister), not in every save's stall. A non-zero
     * return only means the area stays as it is. */
    int (*staging_mapped)(void *arg, void *base, size_t len);
    void (*staging_unmapping)(void *arg, void *base, size_t len);
    void *staging_arg;
} ck_client_opts;

/* root: the checkpoint root. Connected, it may be NULL (the daemon's root is used)
 * and must otherwise be the daemon's root. */
int ck_client_open(ck_client **out, const char *root, const ck_client_opts *opts,
                   ck_err *err);
/* Waits until every part this client staged is durable, then closes. Every save begun
 * on cl must be freed first (ck_client_save_free): a save points into its client. */
void ck_client_close(ck_client *cl);
bool ck_client_connected(const ck_client *cl);
const char *ck_client_root(const ck_client *cl);

/* A job's identity: 16 random bytes that every rank of one job passes to every
 * ck_client_begin of its saves. The engines match a save's ranks by its name and its
 * job (docs/FORMAT.md, "Job identity"): the ranks of two jobs that save the same name
 * into one root are never put in one save, whatever the order they arrive in; the
 * second job's save fails ("checkpoint NAME is being saved by another job ..."), and
 * the first goes on. Made once per job, on one rank (ck_job_id_new: getrandom), and
 * given to the others over the collective the job already has (MPI_Bcast of its bytes,
 * torch.distributed's broadcast): the engines cannot make it themselves, since the
 * ranks of a job have nothing else in common that another job could not share. All
 * zero is no job id (refused). */
#define CK_JOB_ID_LEN 16
typedef struct ck_job_id {
    uint8_t bytes[CK_JOB_ID_LEN];
} ck_job_id;

int ck_job_id_new(ck_job_id *out, ck_err *err);

/* Starts this rank's part of checkpoint name for job (the same on every rank of the
 * save). world must be the mesh's rank count. */
int ck_client_begin(ck_client *cl, ck_client_save **out, const char *name, uint64_t step,
                    const ck_mesh *mesh, uint64_t rank, uint64_t world, const ck_job_id *job,
                    ck_err *err);
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
/* Like save_async, but returns at once: a thread of the client copies and stages the
 * part while the caller computes. The sources must stay unchanged until
 * ck_client_save_fence returns. */
int ck_client_save_lazy(ck_client_save *sv, ck_err *err);
/* A synchronous save of this rank's part: returns once it is durable (rank 0 still
 * asks for the commit, and ck_client_wait waits for it), and the sources may change
 * as soon as it returns. With an embedded engine and every source given by address,
 * no staging area is used: the engine's writer copies the sources block by block into
 * its own buffers while earlier blocks are written and hashed, so the copy overlaps
 * the writes instead of coming before them. Otherwise (ckptd, fills, placed boxes) it
 * is save_async and a wait for the part. The wait is bounded like ck_client_wait's; a
 * part given up then is never read again (its later reads fail its save). */
int ck_client_save_sync(ck_client_save *sv, ck_err *err);
/* After save_lazy, before the sources change: waits for what is not yet copied. 0
 * once the part is staged (or further); the save's error when it failed (a fence
 * after a failed save returns its error, as often as it is called). Also accepts a
 * save made by save_async. */
int ck_client_save_fence(ck_client_save *sv, ck_err *err);
/* Declares the staging size of parts like sv's (its tensors and blobs declared; no
 * shard needed): every staging area no save holds is made at least that large and
 * faulted in; with wait, before it returns (at start-up), else on a thread, and the
 * next call on the client waits for what remains. sv may then be freed unsaved. */
int ck_client_save_reserve(ck_client_save *sv, bool wait, ck_err *err);
/* The same for a size in bytes (a part's file image plus its blobs). A failure is
 * logged, and the save that needs the area makes it itself. */
void ck_client_reserve(ck_client *cl, uint64_t bytes, bool wait);
/* ---- staging in place: the caller writes the bytes itself ----
 * For sources the client cannot read (device memory), the caller copies them straight
 * into the staging area, with no buffer between (a DMA from the device):
 *
 *   ck_client_save_place(sv, &err);                  // a staging area, admitted, laid out
 *   void *dst = ck_client_box_at(sv, "w", 3, &err);  // where box 3's bytes go
 *   cudaMemcpyAsync(dst, dev, len, cudaMemcpyDeviceToHost, side);   // ... every such box
 *   ck_client_save_copies(sv, sync_side, side);      // how to wait for those copies
 *   ck_client_save_lazy(sv, &err);                   // or save_async
 *
 * save_async (or the lazy save's thread) then copies what was given by address or
 * fill, and the blobs, calls the copies' wait, and hands the part over: the engine
 * never reads staging the caller is still writing. */
/* Takes a staging area for sv (waiting while both drain, as save_async does), has the
 * engine admit the part and lays it out. No tensor or blob may be declared after it. */
int ck_client_save_place(ck_client_save *sv, ck_err *err);
/* After place: where the row-major bytes of this rank's shard of a placed tensor (or of
 * box box of a box-list tensor) go in the staging area; the caller must write all of
 * them before the part is handed over. NULL, with err set, for a tensor or box this
 * rank does not write (another replica writes it, or it is empty). */
void *ck_client_shard_at(ck_client_save *sv, const char *tensor, ck_err *err);
void *ck_client_box_at(ck_client_save *sv, const char *tensor, uint32_t box, ck_err *err);
/* The whole staging area of a placed save (its file image, then its blobs). */
int ck_client_save_staging(ck_client_save *sv, void **base, size_t *len, ck_err *err);
/* wait(arg, err) returns 0 once the caller's copies into the staging area have landed,
 * or a negative error (in err) that fails the save: called once, on the thread that
 * hands the part over, before it does, and even when the part failed before (the copies
 * must land before the area can be reused). */
void ck_client_save_copies(ck_client_save *sv, int (*wait)(void *arg, ck_err *err), void *arg);

/* Rank 0, after its save_async (or save_lazy): commit once every rank's part is
 * durable. */
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

#endif
