/* ck/save.h - writing a checkpoint and committing it atomically.
 *
 *   ck_save *s;
 *   ck_save_begin(&s, root, "step-00001200", 1200, decl, &opts, &err);   // ck/decl.h
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
 *
 * This is a whole save made by one process that holds (or streams, through fills)
 * every rank's bytes: the tools, importers and resharding. Training ranks, each its own
 * process, save asynchronously through ck/client.h, whose engine drives this same save
 * rank by rank and shares it among several engines (its private calls are the core's).
 */
#ifndef CK_SAVE_H
#define CK_SAVE_H

#include <stdbool.h>
#include <stdint.h>

#include "ck/ckpt.h"
#include "ck/decl.h"
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

/* A save of the tensors decl declares (sealed here if it is not: its error, naming the
 * tensor, is returned). The save holds its own reference to decl. */
CK_API int ck_save_begin(ck_save **out, const char *root, const char *name, uint64_t step,
                         ck_decl *decl, const ck_save_opts *opts, ck_err *err);
/* Offers rank's local shard of a tensor: the row-major bytes of its box. data must
 * stay valid until commit returns. */
CK_API int ck_save_shard(ck_save *s, const char *tensor, uint64_t rank, const void *data,
                         ck_err *err);
/* The same with the bytes produced on demand (streams, bounded memory). */
CK_API int ck_save_shard_fill(ck_save *s, const char *tensor, uint64_t rank, ck_fill_fn fill,
                              void *arg, ck_err *err);
/* ---- tensors stored as explicit box lists (format 1.1, ck_decl_tensor_boxes) ---- */
/* Offers box number box of a box-list tensor: the row-major bytes of that box. data
 * must stay valid until the box's rank is written (as ck_save_shard's). ck_save_shard
 * on a box-list tensor, or ck_save_box on a placed one, is -EINVAL. */
CK_API int ck_save_box(ck_save *s, const char *tensor, uint32_t box, const void *data,
                       ck_err *err);
/* The same with the bytes produced on demand. */
CK_API int ck_save_box_fill(ck_save *s, const char *tensor, uint32_t box, ck_fill_fn fill,
                            void *arg, ck_err *err);

/* true when rank writes its shard of tensor (it is the chosen replica and the shard
 * is not empty), so callers can skip producing bytes that will be ignored. For a box-list
 * tensor: whether rank writes any non-empty box of it. */
CK_API bool ck_save_writes(const ck_save *s, const char *tensor, uint64_t rank);
/* A named byte string (step counters, RNG state, data position), copied. */
CK_API int ck_save_blob(ck_save *s, const char *name, const void *data, size_t len, ck_err *err);
/* Writes what is not yet written, fsyncs, commits, records in the catalog, and frees
 * s in every case. */
CK_API int ck_save_commit(ck_save *s, ck_save_stats *stats, ck_err *err);
/* Frees s and removes what it wrote. */
CK_API void ck_save_abort(ck_save *s);

#endif
