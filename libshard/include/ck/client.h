/* ck/client.h - asynchronous checkpoint saves from training ranks.
 *
 * What PyTorch's dcp.async_save gives, in C: a rank begins its part of a checkpoint
 * with the save's declaration (ck/decl.h, built once and kept while the state keeps
 * its structure), gives its shards and blobs, and submits the part: the copy into a
 * staging area (shared memory, laid out as the rank's data file) is the only stall;
 * the data is then written, hashed and fsynced by the save engine while training goes
 * on, and committed atomically when every rank's part is durable.
 *
 *   ck_client *cl;
 *   ck_client_open(&cl, "/ckpt", NULL, &err);         // embedded unless CKPTD_SOCKET
 *   ck_job_id job;                                     // once per job: rank 0 makes it,
 *   if (rank == 0) ck_job_id_new(&job, &err);          // the job's own collective
 *   MPI_Bcast(&job, sizeof job, MPI_BYTE, 0, comm);    // gives it to every rank
 *   ck_client_save *sv;
 *   ck_client_begin(cl, &sv, "step-00001200", 1200, decl, rank, &job, &err);
 *   ck_client_shard(sv, "layers.0.w", local_bytes, &err);       // this rank's box
 *   ck_client_blob(sv, "rng.rank3", state, len, &err);
 *   ck_client_submit(sv, &(ck_submit){ .mode = CK_SUBMIT_COPY }, &err);  // copy; train on
 *   if (rank == 0) ck_client_commit(sv, &err);         // commit once all are durable
 *   ...
 *   ck_client_wait(sv, CK_CLIENT_COMMITTED, &err);     // committed, or the error
 *   ck_client_save_free(sv);
 *
 * One submit, whatever the part's sources (ck_submit): its mode says when it returns
 * (the copy done; at once, a thread of the client copying while the caller computes;
 * or the part durable), and the sources, when given there, replace a call per shard:
 * each the address or fill of one of the rank's shards, or neither, and then the caller
 * copies that shard straight into the staging area itself (device memory: one DMA).
 *
 * Two transports, same results. Connected: the engine is ckptd, reached over a Unix
 * socket (opts->socket, else $CKPTD_SOCKET); the staging memfd is handed to it, so a
 * save whose every part was staged and whose commit was asked for completes even if
 * every rank dies. Embedded (the default): the same engine runs on threads inside this
 * process; ranks that are threads of one process share one engine (opts->peer), and
 * the engines of a job's processes (opts->nodes of them, one per process) meet through
 * the root's file system exactly as the daemons of several nodes do: the engine of
 * rank 0 coordinates and commits (docs/FORMAT.md, "Saves served by several daemons").
 *
 * Staging is double-buffered per client: a submit waits only while the save before
 * the previous one still drains. Its memory is faulted in ahead (on huge pages where
 * the system gives them, decision 0046) and reused, so no save pays for a first touch:
 * declare the size early with ck_client_reserve (ck_decl_file_bytes, plus the blobs;
 * a save of a size not reserved makes its own slot, and the next slot is made
 * meanwhile on a thread).
 *
 * A ck_client and its saves are used by one thread at a time; a lazy submit's copy
 * thread is the client's until ck_client_wait(sv, CK_CLIENT_STAGED) (the fence), and
 * every other call on the client (or its saves) fences it first, so the one-thread
 * rule holds for the caller. The one exception is rank 0's ck_client_commit, which
 * never waits for the copy: the copy thread asks for the commit itself once the part
 * is staged.
 */
#ifndef CK_CLIENT_H
#define CK_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ck/ckpt.h"
#include "ck/decl.h"
#include "ck/engine.h"
#include "ck/load.h"

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
CK_API int ck_client_open(ck_client **out, const char *root, const ck_client_opts *opts,
                          ck_err *err);
/* Waits until every part this client staged is durable, then closes. Every save begun
 * on cl must be freed first (ck_client_save_free): a save points into its client. */
CK_API void ck_client_close(ck_client *cl);
CK_API bool ck_client_connected(const ck_client *cl);
CK_API const char *ck_client_root(const ck_client *cl);

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

CK_API int ck_job_id_new(ck_job_id *out, ck_err *err);

/* Starts this rank's part of checkpoint name for job (the same on every rank of the
 * save) with the save's declaration (sealed here if it is not: its error is returned);
 * the world is its mesh's. The part holds its own reference to decl. */
CK_API int ck_client_begin(ck_client *cl, ck_client_save **out, const char *name, uint64_t step,
                           ck_decl *decl, uint64_t rank, const ck_job_id *job, ck_err *err);
/* The commit level a save waits for (docs/decisions/0175-commit-levels.md): where the
 * checkpoint must be before ck_client_wait(sv, CK_CLIENT_COMMITTED) returns. Without
 * a local tier (ckptd without --local-root, or embedded) every save commits to the
 * root as it always did, which is durable and satisfies every level. With one:
 *   LOCAL       every node committed its own copy (its ranks' files and the whole
 *               manifest) in its local tier;
 *   REPLICATED  and every node's copy has F copies on F distinct nodes (ckptd
 *               --replicas F, placed by the clique rule, decision 0174);
 *   DURABLE     a complete copy is committed in the durable root: the daemons drain
 *               the save at once and the wait ends with the drain (decision 0176).
 * A level that cannot be reached (a replica's peer died) never fails a save that is
 * committed: the wait returns 0 with the level reached lower than asked, and
 * ck_client_level_reached says why. */
typedef enum ck_level {
    CK_LEVEL_DEFAULT = 0,      /* the daemon's: LOCAL with a local tier, else DURABLE */
    CK_LEVEL_LOCAL = 1,
    CK_LEVEL_REPLICATED = 2,
    CK_LEVEL_DURABLE = 3,
} ck_level;
/* Before the submit; every rank of the save asks for the same level. */
CK_API void ck_client_level(ck_client_save *sv, ck_level level);
/* Once COMMITTED: the level the checkpoint reached (0 before), and, when it is lower
 * than the one asked, why (into why, cap bytes; "" otherwise). */
CK_API ck_level ck_client_level_reached(const ck_client_save *sv, char *why, size_t cap);
/* "local", "replicated", "durable" ("default" for 0), and back: -EINVAL for a name
 * that is none of them. */
CK_API const char *ck_level_name(ck_level level);
CK_API int ck_level_parse(const char *name, ck_level *out, ck_err *err);

/* Records without SHA-256 block hashes (benchmarks). Every rank must agree. */
CK_API void ck_client_no_hash(ck_client_save *sv);
/* This rank's shard of a placed tensor: the row-major bytes of its box, read during
 * the submit only (its mode says until when). Replicas the plan gives to another rank
 * are skipped. */
CK_API int ck_client_shard(ck_client_save *sv, const char *tensor, const void *data, ck_err *err);
/* The same, produced by fill(arg, off, dst, len) straight into staging. */
CK_API int ck_client_shard_fill(ck_client_save *sv, const char *tensor, ck_fill_fn fill, void *arg,
                                ck_err *err);
/* One of this rank's boxes of a box-list tensor: the row-major bytes of box number box
 * (writers[box] must be this rank). Every box this rank writes must be given. */
CK_API int ck_client_box(ck_client_save *sv, const char *tensor, uint32_t box, const void *data,
                         ck_err *err);
CK_API int ck_client_box_fill(ck_client_save *sv, const char *tensor, uint32_t box,
                              ck_fill_fn fill, void *arg, ck_err *err);
/* A named byte string of this rank (copied); names are unique over all ranks. */
CK_API int ck_client_blob(ck_client_save *sv, const char *name, const void *data, size_t len,
                          ck_err *err);

/* One of the rank's shards in a submit: its bytes by address or by fill; neither, and
 * the caller writes them into the staging area itself (ck_submit.place). */
typedef struct ck_source {
    const void *mem;
    ck_fill_fn fill;
    void *arg;
} ck_source;

typedef enum ck_submit_mode {
    /* Copies the sources and the blobs into staging, hands the part to the engine and
     * returns: the sources may change as soon as it returns. */
    CK_SUBMIT_COPY = 0,
    /* Returns at once: a thread of the client copies and hands the part over while the
     * caller computes. The sources must stay unchanged until ck_client_wait(sv,
     * CK_CLIENT_STAGED) returns (the fence: a model's parameters and optimizer state
     * between two optimizer steps). */
    CK_SUBMIT_LAZY,
    /* Returns once the part is durable (rank 0 still asks for the commit). With an
     * embedded engine and every source given by address, no staging area is used: the
     * engine's writer copies the sources block by block while earlier blocks are
     * written and hashed, so the copy overlaps the writes (decision 0132). Otherwise
     * it is COPY and a wait for the part. The wait is bounded as ck_client_wait's. */
    CK_SUBMIT_SYNC,
} ck_submit_mode;

typedef struct ck_submit {
    ck_submit_mode mode;
    /* NULL: the sources given by ck_client_shard and ck_client_box. Else nsrc of them,
     * one per shard the plan gives this rank (ck_decl_writes, in its order), which
     * replace those. */
    const ck_source *src;
    uint32_t nsrc;
    /* In place: for each source with neither mem nor fill, place(arg, i, tensor, box,
     * dst, len) is called (on the thread that copies) with the staging address of the
     * i-th source's len bytes, which the caller writes there (a DMA from the device it
     * queues): the shard of tensor that is box (its box number in a box list, its shard
     * index by placements); then
     * copies_done(arg, err) once, before the part is handed over, even when the part
     * failed before (the copies must land before the area can be reused): 0 once they
     * landed, or an error that fails the save. The engine never reads staging the
     * caller is still writing. */
    int (*place)(void *arg, uint32_t i, const char *tensor, uint32_t box, void *dst,
                 size_t len, ck_err *err);
    int (*copies_done)(void *arg, ck_err *err);
    void *arg;
} ck_submit;

/* Hands this rank's part over, as how says. Every shard this rank writes must have a
 * source by then. */
CK_API int ck_client_submit(ck_client_save *sv, const ck_submit *how, ck_err *err);

/* Staging areas no save holds are made at least bytes large (a part's
 * ck_decl_file_bytes, plus its blobs) and faulted in; with wait, before it returns (at
 * start-up), else on a thread, and the next call on the client waits for what remains.
 * A failure is logged, and the save that needs the area makes it itself. */
CK_API void ck_client_reserve(ck_client *cl, uint64_t bytes, bool wait);

/* Rank 0, after its submit: commit once every rank's part is durable. */
CK_API int ck_client_commit(ck_client_save *sv, ck_err *err);

typedef enum ck_client_state {
    CK_CLIENT_BUILDING = 0,    /* before the submit */
    CK_CLIENT_STAGED,          /* the engine has the part */
    CK_CLIENT_DURABLE,         /* the part is on disk; its staging is free again */
    CK_CLIENT_COMMITTED,       /* the checkpoint is visible */
    CK_CLIENT_FAILED,
} ck_client_state;

/* Where the save stands, without blocking. On FAILED, err holds the reason. */
CK_API int ck_client_poll(ck_client_save *sv, ck_client_state *state, ck_err *err);
/* Blocks until the part reaches state: CK_CLIENT_STAGED, its sources are no longer read
 * (the fence of a lazy submit: its copy is done); CK_CLIENT_DURABLE, the part is on
 * disk; CK_CLIENT_COMMITTED, the checkpoint is visible. 0, or the save's error (as
 * often as it is asked). */
CK_API int ck_client_wait(ck_client_save *sv, ck_client_state state, ck_err *err);
/* Blocks until the part no longer needs its staging area, then frees sv. */
CK_API void ck_client_save_free(ck_client_save *sv);

/* ---- restoring from the nearest copies (docs/ARCHITECTURE.md, "Tiers") ----
 * Through a ckptd that keeps a local tier, a checkpoint may live in several places:
 * this node's local tier, peers' replicas of its parts, the durable root. A loader
 * restores through the daemon, which picks what can be restored and brings each rank
 * the files its boxes need, nearest first:
 *
 *   if (rank == 0) ck_client_resolve(cl, "step-", true, name, why, sizeof why, &err);
 *   MPI_Bcast(name, CK_NAME_MAX, MPI_CHAR, 0, comm);     // every rank loads that one
 *   ck_client_restore_open(cl, name, &ck, &err);         // its manifest
 *   ... the rank's boxes, as ck_load_many takes them ...
 *   ck_client_restore_fetch(cl, &ck, items, n, &err);    // the files they touch
 *   ck_load_many(ck, items, n, &err);                    // every block checked
 *
 * Without a daemon (embedded) the root is all there is: the calls are ck_root_newest
 * and ck_open of ROOT/NAME, and the fetch does nothing. Every wait on the daemon is
 * bounded as a commit's (commit_timeout_s, while it answers within timeout_s). */

/* The checkpoint to restore: what itself, or with newest the newest PREFIX<step> (what
 * is the prefix; ck/steps.h) whose every data file has a live copy. Connected, ckptd
 * looks at every copy it can reach (its local tier, its live peers', the durable
 * root); when the pick is not the newest checkpoint saved, why (why_len bytes) says
 * why ("step-12 (step 12): rank-00002.dat, rank-00003.dat have no live copy;
 * unreachable: ckptd n2 (...); restoring step-8 (step 8) from the durable tier"),
 * else it is "". -ENOENT when there is no such checkpoint, -ENODATA (the message says
 * what is lost) when none can be restored. */
CK_API int ck_client_resolve(ck_client *cl, const char *what, bool newest, char name[CK_NAME_MAX],
                             char *why, size_t why_len, ck_err *err);
/* Opens checkpoint name for loading, through the copies ckptd names nearest first (a
 * copy in its local tier, fetching the manifest from a peer if none is near, or the
 * durable root's): the tensors and blobs are readable at once, the data files held
 * where they lie. Embedded: ck_open of ROOT/NAME. */
CK_API int ck_client_restore_open(ck_client *cl, const char *name, ck_ckpt **out, ck_err *err);
/* Makes the data files that a load of items would read (ck_load_files) readable
 * through *ck, each from its nearest copy: ckptd answers at once for those in its
 * local tier, fetches the others from a live peer's copy (checked block by block),
 * and leaves to the durable root's copy, read in place, only what no peer could give;
 * *ck is replaced by a handle on the copies that hold them (no reader of the old one
 * may be open). Without a daemon nothing is fetched, and a load of a file *ck lacks
 * fails naming it. */
CK_API int ck_client_restore_fetch(ck_client *cl, ck_ckpt **ck, const ck_load_item *items,
                                   size_t n, ck_err *err);

#endif
