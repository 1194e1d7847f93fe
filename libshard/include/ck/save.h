/* ck/save.h - writing a checkpoint and committing it atomically.
 *
 *   ck_save *s;
 *   ck_save_begin(&s, root, "step-00001200", 1200, &mesh, &opts, &err);
 *   ck_save_tensor(s, "layers.0.w", CK_F32, 2, shape, placements, &err);
 *   for each rank r: ck_save_shard(s, "layers.0.w", r, local_bytes, &err);
 *   ck_save_blob(s, "rng", state, len, &err);
 *   ck_save_commit(s, &stats, &err);   // durable and visible, or nothing visible
 *
 * Shards are offered per rank, as every rank of a mesh saves its local shard; of the
 * replicas of a shard only the one the plan names (model/plan.h) is written, and the
 * others' offers are ignored. The data goes to ROOT/.pending/NAME.XXXXXX/, the
 * manifest last; a rename publishes the directory as ROOT/NAME (docs/FORMAT.md,
 * "Commit protocol"). On any error, or when ck_save_abort is called, the pending
 * directory is removed and no earlier checkpoint is touched.
 */
#ifndef CK_SAVE_H
#define CK_SAVE_H

#include <stdbool.h>
#include <stdint.h>

#include "ck/ckpt.h"
#include "ck/engine.h"

typedef struct ck_save_opts {
    ck_engine *engine;          /* NULL: the default engine */
    uint32_t block_size;        /* 0: CK_BLOCK_SIZE_DEFAULT */
    uint32_t io_size;           /* 0: CK_IO_SIZE_DEFAULT */
    uint64_t mem_limit;         /* buffer bytes of the writer; 0: 64 MiB */
    unsigned hash_threads;      /* 0: one per online CPU */
    bool no_hash;
    bool fill_threadsafe;       /* fill callbacks may run on several threads at once */
    bool no_catalog;            /* don't record the commit in ROOT/catalog.mdb */
    void (*log)(void *arg, const char *msg);
    void (*progress)(void *arg, uint64_t done, uint64_t total);
    void *cb_arg;
} ck_save_opts;

typedef struct ck_save_stats {
    uint64_t tensor_bytes;      /* logical bytes of the shards written */
    uint64_t file_bytes;        /* bytes of the data files */
    double write_seconds;       /* the data path: writes, hashes, fsyncs */
    double total_seconds;       /* with manifest, rename and catalog */
    bool direct;
} ck_save_stats;

typedef struct ck_save ck_save;

int ck_save_begin(ck_save **out, const char *root, const char *name, uint64_t step,
                  const ck_mesh *mesh, const ck_save_opts *opts, ck_err *err);
/* Declares a tensor. Names are unique ([A-Za-z0-9._-], see ck_name_check). */
int ck_save_tensor(ck_save *s, const char *name, ck_dtype dtype, int ndim,
                   const uint64_t *shape, const ck_placement *pl, ck_err *err);
/* Offers rank's local shard of a tensor: the row-major bytes of its box. data must
 * stay valid until commit returns. */
int ck_save_shard(ck_save *s, const char *tensor, uint64_t rank, const void *data,
                  ck_err *err);
/* The same with the bytes produced on demand (streams, bounded memory). */
int ck_save_shard_fill(ck_save *s, const char *tensor, uint64_t rank, ck_fill_fn fill,
                       void *arg, ck_err *err);
/* ---- tensors stored as explicit box lists (format 1.1) ----
 * For layouts that placements cannot say (DCP's planner: uneven chunks, replicas
 * deduplicated by bytes, 2-D tiles of TP + FSDP): the tensor is the union of nboxes
 * disjoint boxes that tile it (ck_boxes_check), box i written by rank writers[i]. A
 * rank may write several boxes of one tensor, or none. Every process of the save
 * declares the same list, in the same order as its other tensors. Box i goes to
 * writers[i]'s data file; the rank-by-rank path, the group save and the part
 * records below work unchanged. Errors name the tensor and the box. */
int ck_save_tensor_boxes(ck_save *s, const char *name, ck_dtype dtype, int ndim,
                         const uint64_t *shape, uint32_t nboxes, const ck_box *boxes,
                         const uint64_t *writers, ck_err *err);
/* Offers box number box of a box-list tensor: the row-major bytes of that box. data
 * must stay valid until the box's rank is written (as ck_save_shard's). ck_save_shard
 * on a box-list tensor, or ck_save_box on a placed one, is -EINVAL. */
int ck_save_box(ck_save *s, const char *tensor, uint32_t box, const void *data, ck_err *err);
/* The same with the bytes produced on demand. */
int ck_save_box_fill(ck_save *s, const char *tensor, uint32_t box, ck_fill_fn fill,
                     void *arg, ck_err *err);

/* true when rank writes its shard of tensor (it is the chosen replica and the shard
 * is not empty), so callers can skip producing bytes that will be ignored. For a box-list
 * tensor: whether rank writes any non-empty box of it. */
bool ck_save_writes(const ck_save *s, const char *tensor, uint64_t rank);
/* A named byte string (step counters, RNG state, data position), copied. */
int ck_save_blob(ck_save *s, const char *name, const void *data, size_t len, ck_err *err);
/* ---- writing rank by rank (the daemon's way) ----
 * After every tensor is declared, ck_save_prepare fixes the layout and creates the
 * pending directory. Each rank's data file is then an image in memory of
 * ck_save_rank_bytes(rank) bytes, laid out as the plan says (each shard at its
 * offset in the file, zeros between: ck_save_copy_rank builds it), so it is written
 * in place, without a copy.
 * ck_save_write_rank makes one rank's file durable; calls for distinct ranks may run
 * on different threads. Ranks not written by then are written by ck_save_commit. */
int ck_save_prepare(ck_save *s, ck_err *err);
uint64_t ck_save_rank_bytes(const ck_save *s, uint64_t rank);
/* image stays valid until the rank is written. */
int ck_save_rank_image(ck_save *s, uint64_t rank, const void *image, ck_err *err);
/* Lays out rank's data file in image (ck_save_rank_bytes(rank) bytes, 4 KiB-aligned
 * for O_DIRECT) from the shards offered for rank, zeros between, and binds it as
 * ck_save_rank_image does. The offered memory is not read again once it returns: in an
 * asynchronous save this copy is the stall. */
int ck_save_copy_rank(ck_save *s, uint64_t rank, void *image, ck_err *err);
/* The copy alone, before ck_save_prepare (or a group's prepare or join): the layout is
 * the plan's, known once every tensor is declared. Bind image afterwards with
 * ck_save_rank_image. In an asynchronous save the prepare, which makes directories,
 * can then run after the stall. */
int ck_save_fill_rank(const ck_save *s, uint64_t rank, void *image, ck_err *err);
int ck_save_write_rank(ck_save *s, uint64_t rank, ck_err *err);

/* ---- one save, many processes (embedded mode in a multi-process job) ----
 * The core has no process group of its own: the caller lends it two collectives over
 * its ranks, which every rank of the group must call in the same order. Lengths are
 * in bytes, always a multiple of 8. */
typedef struct ck_group {
    uint64_t rank, world;      /* world: the mesh's rank count */
    /* Copies len bytes of buf on rank 0 into buf on every rank. */
    int (*broadcast)(void *arg, void *buf, size_t len, ck_err *err);
    /* Rank 0 receives every rank's len bytes of mine in all (world * len bytes), in
     * rank order; all is NULL on the other ranks. */
    int (*gather)(void *arg, const void *mine, void *all, size_t len, ck_err *err);
    void *arg;
} ck_group;

/* Every rank builds the same ck_save (same tensors in the same order; blobs on rank 0)
 * and then, in this order:
 *
 *   ck_save_prepare_group(s, &g, &err);          // collective: one pending directory
 *   ck_save_copy_rank(s, g.rank, image, &err);   // this rank's file, in memory
 *   ck_save_write_rank(s, g.rank, &err);         // durable; may run on a thread
 *   ck_save_finish_group(s, &g, &outcome, &err); // collective
 *   if (g.rank == 0) ck_save_commit(s, &stats, &err);   // may run on a thread
 *
 * It is the part-record flow below over the two collectives: the same token, the same
 * records, gathered in one call.
 * Rank 0 draws a token, creates ROOT/.pending/NAME.TOKEN and broadcasts the token (its
 * failure fails every rank); each rank writes only its own file there. A rank that
 * dies leaves .pending debris only. After the broadcast, prepare can fail on one rank
 * alone, as the copy can: the ranks must agree that every one got through before they
 * write; where one did not, every rank frees its save with ck_save_abort. */
int ck_save_prepare_group(ck_save *s, const ck_group *g, ck_err *err);
/* Instead of ck_save_prepare_group, without a collective: every rank passes the same
 * token ([A-Za-z0-9._-], at most 15 characters, never used before under this root for
 * this name, e.g. a nonce rank 0 drew once and a save counter), and each rank makes
 * ROOT/.pending/NAME.TOKEN if no other rank has yet. A rank that fails here, or later,
 * must still tell the others before they finish (the group's caller agrees on that:
 * a rank without a prepared save cannot call ck_save_finish_group). */
int ck_save_join_group(ck_save *s, const ck_group *g, const char *token, ck_err *err);
/* Collective, after a successful prepare (or join), once this rank's part is done:
 * outcome is its ck_save_write_rank's result (code 0) or whatever failed it. Every
 * rank's outcome and block hashes go to rank 0 in one gather; receiving them is the
 * proof that the files are durable. Rank 0 returns 0 with s ready for ck_save_commit
 * when every part is written; otherwise the first failed rank's error, having removed
 * the pending directory. The other ranks, and rank 0 on error, free s (a rank's file
 * is rank 0's once gathered). */
int ck_save_finish_group(ck_save *s, const ck_group *g, const ck_err *outcome, ck_err *err);

/* ---- one save, many processes, without collectives: part records ----
 * The steps of the group save, for callers whose processes meet only through their
 * own framework (DCP: prepare_global_plan and finish run on the coordinator, write_data
 * on every rank, and the ranks' results travel as pickled bytes). Every process builds
 * the same ck_save, then:
 *
 *   rank 0:  ck_save_share(s, token, &err);         // creates ROOT/.pending/NAME.TOKEN
 *            ... token reaches the other ranks through the caller ...
 *   others:  ck_save_join(s, token, rank, &err);    // the same directory
 *   each:    ck_save_copy_rank(s, rank, image, &err) or offer shards/boxes;
 *            ck_save_write_rank(s, rank, &err);      // this rank's file, durable
 *            ck_save_part(s, rank, &outcome, &rec, &len, &err);   // its part record
 *            ranks other than 0: ck_save_abort(s)   // frees s, removes nothing
 *   rank 0:  for each rank's record: ck_save_adopt(s, rec, len, &err);
 *            ck_save_commit(s, &stats, &err);
 *
 * A part record (docs/FORMAT.md, "Part records") is versioned bytes that name the
 * save (checkpoint name and token), the rank, its outcome, its file's size and block
 * hashes; holding it is the proof that the rank's file is durable. ck_save_adopt
 * checks every field against rank 0's own plan and refuses what does not match (a
 * record of another save, rank or layout, truncated, forged counts) with -EBADMSG
 * naming the rank, or returns the rank's own failure when its outcome was one.
 * ck_save_commit of a shared save refuses to publish while a rank's file is neither
 * written by this process nor adopted, naming that rank, and then removes the pending
 * directory: rank 0 calls it once every rank has stopped writing (DCP's finish). A
 * shared save's ck_save_abort never removes anything; what a dead save leaves is
 * .pending debris for recovery. Blobs live in the manifest, which rank 0 writes: rank
 * 0 may add them (ck_save_blob) until it commits, also those another rank produced and
 * the caller carried over (DCP's BYTE_IO items written on other ranks). */
#define CK_TOKEN_MAX 16           /* a save token with its NUL */
/* Rank 0: fixes the layout, creates the pending directory under a fresh token and
 * writes the token (12 hex digits) into token. */
int ck_save_share(ck_save *s, char token[CK_TOKEN_MAX], ck_err *err);
/* Every other rank: the same, in the directory rank 0 created under token (or, when
 * the ranks agree on a token in advance, as ck_save_join_group's callers do, any rank:
 * the directory is made when missing). */
int ck_save_join(ck_save *s, const char *token, uint64_t rank, ck_err *err);
/* This rank's part record, malloc'd into *rec (*len bytes): outcome is its
 * ck_save_write_rank's result (code 0) or whatever failed it. A rank that writes no
 * file has a record too. */
int ck_save_part(ck_save *s, uint64_t rank, const ck_err *outcome, void **rec, size_t *len,
                 ck_err *err);
/* Rank 0: takes the rank's file as written, with the hashes its record carries. A
 * rank's record is adopted at most once; rank 0's own record may be adopted or not
 * (its file is written by this process). */
int ck_save_adopt(ck_save *s, const void *rec, size_t len, ck_err *err);

/* Writes what is not yet written, fsyncs, commits, records in the catalog, and frees
 * s in every case. */
int ck_save_commit(ck_save *s, ck_save_stats *stats, ck_err *err);
/* Frees s and removes what it wrote. After ck_save_prepare_group, ck_save_share or
 * ck_save_join it removes nothing: the directory is shared, so what it holds is
 * debris for recovery. */
void ck_save_abort(ck_save *s);

#endif
