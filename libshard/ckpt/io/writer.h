/* io/writer.h - the data path: write data files with io_uring, hash them in workers.
 *
 * A data file is described as runs of bytes (ck__src), each from caller memory or
 * from a fill callback, at 4 KiB-aligned file offsets; the gaps are zeros. The writer
 * preallocates each file to its final size (ext4 serialises O_DIRECT writes past
 * EOF), writes it in ~1 MiB I/Os at a deep queue, O_DIRECT where the file system
 * allows it, hashes each block on the hash pool while the I/O is in flight, and
 * fsyncs each file when its last write lands.
 *
 * Memory a block lies in entirely, 4 KiB-aligned (a staging area laid out like the
 * file), is written in place; everything else is copied or generated into a bounded
 * ring of block buffers, on the pool's threads when the sources allow it.
 */
#ifndef CK_IO_WRITER_H
#define CK_IO_WRITER_H

#include <stdbool.h>
#include <stdint.h>

#include "ck/engine.h"
#include "ck/error.h"
#include "ck/types.h"
#include "io/hash.h"

typedef struct ck__src {
    uint64_t file_off;     /* where the run starts in the file */
    uint64_t len;
    const void *mem;       /* the bytes, or NULL to use fill */
    ck_fill_fn fill;
    void *arg;
    uint64_t src_off;      /* passed to fill: offset of the run's first byte */
} ck__src;

typedef struct ck__wfile {
    const char *path;      /* created with O_EXCL; named so in messages */
    const char *rel;       /* its path beneath ck__writer_opts.dir; NULL: path itself */
    uint64_t size;         /* multiple of 4096 */
    uint64_t cut;          /* nonzero: the length the file is cut to before its fsync */
    const ck__src *srcs;    /* sorted by file_off, not overlapping, inside size */
    uint32_t nsrcs;
    uint8_t *hashes;       /* out: ceil(size / block_size) digests, or NULL */
} ck__wfile;

typedef struct ck__writer_opts {
    ck_engine *engine;          /* NULL: ck_engine_default() */
    int dir;                    /* the files' rel are beneath it (the root, held open) */
    ck__hashpool *pool;          /* worker threads; NULL: no hashing, fills inline */
    bool no_hash;               /* with a pool: use it for fills only */
    bool fill_threadsafe;       /* fill callbacks may run concurrently on the pool */
    uint32_t block_size;        /* hash block; power of two >= 4096; 0: 4 MiB */
    uint32_t io_size;           /* bytes per I/O; 0: 1 MiB */
    unsigned depth;             /* blocks in flight; 0: from mem_limit */
    uint64_t mem_limit;         /* bytes of block buffers; 0: 64 MiB */
    void (*log)(void *arg, const char *msg);
    void (*progress)(void *arg, uint64_t done, uint64_t total);
    void *cb_arg;
    /* Each time the bytes of file f (an index into the files written) from its start
     * whose writes have all landed grow: what a reader may read of it already (a
     * replication beside the write, decision 0204). Called on the thread that writes,
     * the last time with the file's size, before its fsync; may be NULL. */
    void (*landed)(void *arg, uint32_t f, uint64_t bytes);
    void *landed_arg;
} ck__writer_opts;

typedef struct ck__writer_stats {
    uint64_t bytes;             /* file bytes written */
    uint64_t copied;            /* of which copied or generated into buffers */
    double seconds;
    bool direct;                /* every file was written with O_DIRECT */
} ck__writer_stats;

int ck__write_files(const ck__writer_opts *o, ck__wfile *files, uint32_t n, ck__writer_stats *st,
                   ck_err *err);

#endif
