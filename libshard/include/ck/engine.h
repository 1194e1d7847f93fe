/* ck/engine.h - the one interface through which the core touches files.
 *
 * As SQLite's VFS, every file operation of a save, a load or a removal goes through
 * an engine: the real one (POSIX calls plus io_uring for data), or one of the tests'
 * engines that wrap it (tests/engines/: fault injection and recording, built for the
 * tests only, as SQLite's test VFS is). Because a save is a sequence of engine
 * operations, a test can stop it dead, or make it fail, at every operation index and
 * then check what is left on disk, instead of only where someone thought to look.
 *
 * Data moves through queues (ck_ioq): one io_uring each, owned by one thread.
 * Everything else is synchronous. Calls return 0 (or an fd / a count) or -errno.
 *
 * Paths are relative to a directory descriptor `dir`, a checkpoint root held open:
 * the real engine resolves them beneath it and follows no symbolic link in any
 * component (-ELOOP), so that nothing planted in a shared root leads a save outside
 * it (docs/FORMAT.md, "Links and special files"). dir == AT_FDCWD takes the path as
 * given, links followed: only for opening a root itself.
 */
#ifndef CK_ENGINE_H
#define CK_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "ck/error.h"

typedef struct ck_engine ck_engine;
typedef struct ck_ioq ck_ioq;

typedef struct ck_io {
    int fd;
    bool write;         /* false: read */
    bool fsync;         /* an fsync of fd (the other fields but user are ignored) */
    int buf_index;      /* >= 0: a buffer registered with ck_ioq_open; -1: none */
    void *buf;
    uint32_t len;
    uint64_t off;
    uint64_t user;      /* returned in the completion */
} ck_io;

typedef struct ck_io_done {
    uint64_t user;
    int res;            /* bytes moved, or -errno */
} ck_io_done;

struct ck_engine_ops {
    int (*open)(ck_engine *e, int dir, const char *path, int flags, unsigned mode);
    int (*close)(ck_engine *e, int fd);
    int (*fallocate)(ck_engine *e, int fd, uint64_t len);
    int (*fsync)(ck_engine *e, int fd);
    int (*mkdir)(ck_engine *e, int dir, const char *path, unsigned mode);
    /* rename, both paths beneath dir, that fails with -EEXIST when `to` exists
     * (renameat2 RENAME_NOREPLACE) */
    int (*rename)(ck_engine *e, int dir, const char *from, const char *to);
    int (*unlink)(ck_engine *e, int dir, const char *path);
    int (*rmdir)(ck_engine *e, int dir, const char *path);
    /* a hard link to the regular file `from` (beneath fromdir) at `to` (beneath dir) */
    int (*link)(ck_engine *e, int fromdir, const char *from, int dir, const char *to);
    /* A durable step done by other code (an LMDB commit): `what` names it. The real
     * engine does nothing; a fault engine may fail or crash here. */
    int (*step)(ck_engine *e, const char *what);

    int (*ioq_open)(ck_engine *e, unsigned depth, const struct iovec *bufs,
                    unsigned nbufs, ck_ioq **out);
    int (*ioq_submit)(ck_ioq *q, const ck_io *ios, unsigned n);
    /* Waits until at least min_done completions are available (0: don't wait). */
    int (*ioq_reap)(ck_ioq *q, ck_io_done *out, unsigned max, unsigned min_done);
    void (*ioq_close)(ck_ioq *q);
    void (*destroy)(ck_engine *e);
};

struct ck_engine {
    const struct ck_engine_ops *ops;
};

/* The real engine: POSIX calls and io_uring. Shared by all threads; it has no state
 * besides its queues. Never destroy it. */
CK_API ck_engine *ck_engine_default(void);

/* A file that ck_files_write makes: len bytes, produced by fill(arg, off, dst, n) on
 * the writer's worker threads, several at once (fill must allow it). */
typedef struct ck_file_out {
    const char *path;           /* created (O_EXCL) */
    uint64_t len;
    int (*fill)(void *arg, uint64_t off, void *dst, size_t len);
    void *arg;
} ck_file_out;

typedef struct ck_write_opts {
    ck_engine *engine;          /* NULL: ck_engine_default() */
    uint64_t mem_limit;         /* bytes of block buffers; 0: 64 MiB */
    void (*log)(void *arg, const char *msg);
    void (*progress)(void *arg, uint64_t done, uint64_t total);
    void *cb_arg;
} ck_write_opts;

/* Writes n files as the core writes its data files (io_uring, O_DIRECT where the file
 * system allows it, blocks filled on worker threads into a bounded ring), each then cut
 * to its length and made durable. On an error the files may be left half written: the
 * caller writes under temporary names and renames them into place. */
CK_API int ck_files_write(const ck_write_opts *o, const ck_file_out *files, uint32_t n,
                          ck_err *err);

static inline void ck_engine_destroy(ck_engine *e)
{
    if (e && e->ops->destroy)
        e->ops->destroy(e);
}

#endif
