/* ck/reshard.h - a checkpoint re-cut for another mesh, committed as a new checkpoint.
 *
 * The new checkpoint holds the same tensors (names, dtypes, shapes, ids, bytes) and
 * blobs as the source, laid out for a target mesh and placements. Each tensor is
 * carried over one of two ways:
 *
 *   by reference  the source's data files are hard-linked into the new checkpoint and
 *                 each new shard is a list of extents into them. Hashes belong to file
 *                 blocks, so they carry over from the source manifest: no tensor byte
 *                 is read. Possible when every new shard is a few byte ranges of the
 *                 old files, each starting on a 4 KiB boundary (the format requires
 *                 aligned extents): dim-0 and replicate changes of row-major tensors.
 *   by copy       new data files, one per writing rank of the target mesh, written by
 *                 the writer, from a fill callback that reads through ck_reader,
 *                 so memory stays bounded by the writer's ring; hashes are computed.
 *
 * CK_RESHARD_AUTO decides per tensor (by reference where possible); CK_RESHARD_COPY
 * copies everything. When a hard link is refused with EXDEV (the target root is on
 * another file system) the reshard starts over as a copy and says so through log.
 * The new checkpoint is committed with the protocol of a save: nothing is visible
 * until it is durable, and the source is never modified.
 */
#ifndef CK_RESHARD_H
#define CK_RESHARD_H

#include <stdbool.h>
#include <stdint.h>

#include "ck/ckpt.h"
#include "ck/engine.h"

typedef enum ck_reshard_mode { CK_RESHARD_AUTO = 0, CK_RESHARD_COPY = 1 } ck_reshard_mode;

typedef struct ck_reshard_opts {
    const char *root;           /* where the new checkpoint goes */
    const char *name;           /* its name; it must not exist */
    const ck_mesh *mesh;        /* the target mesh */
    const ck_placement *pl;     /* one per target mesh dim; NULL: ck_placements_default.
                                   0-D tensors are always replicated. */
    ck_reshard_mode mode;
    uint32_t max_extents;       /* most extents of a by-reference shard; 0: 16 */
    ck_engine *engine;          /* NULL: the default engine */
    uint64_t mem_limit;         /* writer buffers of a copy; 0: 64 MiB */
    unsigned hash_threads;      /* 0: one per online CPU */
    bool no_catalog;
    void (*log)(void *arg, const char *msg);
    void (*progress)(void *arg, uint64_t done, uint64_t total);
    void *cb_arg;
} ck_reshard_opts;

typedef struct ck_reshard_stats {
    uint64_t tensors_linked, tensors_copied;
    uint32_t files_linked, files_written;
    uint64_t bytes_linked;      /* tensor bytes carried by reference */
    uint64_t bytes_copied;      /* tensor bytes read and rewritten */
    uint64_t file_bytes;        /* bytes of the new data files written */
    double seconds;
    bool exdev_fallback;        /* links were refused: everything was copied */
    bool direct;                /* the copies were written with O_DIRECT */
} ck_reshard_stats;


/* Writes and commits the resharded checkpoint o->root/o->name. */
CK_API int ck_reshard(ck_ckpt *src, const ck_reshard_opts *o, ck_reshard_stats *st, ck_err *err);

#endif
