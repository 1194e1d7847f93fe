/* engine_uring.c - the real engine: POSIX calls for metadata, io_uring for data. Paths
 * are resolved beneath their directory, no link followed (io/rootfs.h). */
#include "ck/engine.h"
#include "io/rootfs.h"
#include "io/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

struct ck_ioq {
    struct io_uring ring;
    unsigned depth;
    unsigned queued;    /* SQEs prepared but not yet handed to the kernel */
};

static int neg_errno(int r)
{
    return r < 0 ? -errno : r;
}

static int u_open(ck_engine *e, int dir, const char *path, int flags, unsigned mode)
{
    (void)e;
    return ck__openat(dir, path, flags, mode);
}

static int u_close(ck_engine *e, int fd)
{
    (void)e;
    return neg_errno(close(fd));
}

static int u_fallocate(ck_engine *e, int fd, uint64_t len)
{
    (void)e;
    if (len == 0)
        return 0;
    int r = fallocate(fd, 0, 0, (off_t)len);
    if (r < 0 && (errno == EOPNOTSUPP || errno == ENOSYS))
        r = ftruncate(fd, (off_t)len);   /* file systems without fallocate (tmpfs is fine) */
    return neg_errno(r);
}

static int u_fsync(ck_engine *e, int fd)
{
    (void)e;
    return neg_errno(fsync(fd));
}

static int u_mkdir(ck_engine *e, int dir, const char *path, unsigned mode)
{
    (void)e;
    return ck__mkdirat(dir, path, mode);
}

static int u_rename(ck_engine *e, int dir, const char *from, const char *to)
{
    (void)e;
    return ck__renameat(dir, from, dir, to, RENAME_NOREPLACE);
}

static int u_unlink(ck_engine *e, int dir, const char *path)
{
    (void)e;
    return ck__unlinkat(dir, path, 0);
}

static int u_rmdir(ck_engine *e, int dir, const char *path)
{
    (void)e;
    return ck__unlinkat(dir, path, AT_REMOVEDIR);
}

static int u_link(ck_engine *e, int fromdir, const char *from, int dir, const char *to)
{
    (void)e;
    return ck__linkat(fromdir, from, dir, to);
}

static int u_step(ck_engine *e, const char *what)
{
    (void)e;
    (void)what;
    return 0;
}

static int u_ioq_open(ck_engine *e, unsigned depth, const struct iovec *bufs, unsigned nbufs,
                      ck_ioq **out)
{
    (void)e;
    ck_ioq *q = calloc(1, sizeof *q);
    if (!q)
        return -ENOMEM;
    int r = io_uring_queue_init(depth, &q->ring, 0);
    if (r < 0) {
        free(q);
        return r;
    }
    q->depth = depth;
    if (nbufs > 0) {
        r = io_uring_register_buffers(&q->ring, bufs, nbufs);
        if (r < 0) {
            /* Registration is an optimisation (it saves pinning pages per I/O);
             * without it (RLIMIT_MEMLOCK) the caller falls back to plain I/O. */
            io_uring_queue_exit(&q->ring);
            free(q);
            return r;
        }
    }
    *out = q;
    return 0;
}

static int u_ioq_submit(ck_ioq *q, const ck_io *ios, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);
        if (!sqe) {
            int r = io_uring_submit(&q->ring);
            if (r < 0)
                return r;
            q->queued = 0;
            sqe = io_uring_get_sqe(&q->ring);
            if (!sqe)
                return -EBUSY;
        }
        const ck_io *io = &ios[i];
        if (io->fsync) {
            io_uring_prep_fsync(sqe, io->fd, 0);
        } else if (io->buf_index >= 0) {
            if (io->write)
                io_uring_prep_write_fixed(sqe, io->fd, io->buf, io->len, io->off, io->buf_index);
            else
                io_uring_prep_read_fixed(sqe, io->fd, io->buf, io->len, io->off, io->buf_index);
        } else if (io->write) {
            io_uring_prep_write(sqe, io->fd, io->buf, io->len, io->off);
        } else {
            io_uring_prep_read(sqe, io->fd, io->buf, io->len, io->off);
        }
        io_uring_sqe_set_data64(sqe, io->user);
        q->queued++;
    }
    int r = io_uring_submit(&q->ring);
    if (r < 0)
        return r;
    q->queued = 0;
    return 0;
}

static int u_ioq_reap(ck_ioq *q, ck_io_done *out, unsigned max, unsigned min_done)
{
    unsigned got = 0;
    while (got < max) {
        struct io_uring_cqe *cqe;
        int r;
        if (got < min_done) {
            r = io_uring_wait_cqe(&q->ring, &cqe);
            if (r == -EINTR)
                continue;
        } else {
            r = io_uring_peek_cqe(&q->ring, &cqe);
            if (r == -EAGAIN)
                break;
        }
        if (r < 0)
            return r;
        out[got].user = io_uring_cqe_get_data64(cqe);
        out[got].res = cqe->res;
        io_uring_cqe_seen(&q->ring, cqe);
        got++;
    }
    return (int)got;
}

static void u_ioq_close(ck_ioq *q)
{
    if (!q)
        return;
    io_uring_queue_exit(&q->ring);
    free(q);
}

static const struct ck_engine_ops uring_ops = {
    .open = u_open, .close = u_close, .fallocate = u_fallocate, .fsync = u_fsync,
    .mkdir = u_mkdir, .rename = u_rename, .unlink = u_unlink, .rmdir = u_rmdir,
    .link = u_link, .step = u_step,
    .ioq_open = u_ioq_open, .ioq_submit = u_ioq_submit, .ioq_reap = u_ioq_reap,
    .ioq_close = u_ioq_close, .destroy = NULL,
};

/* Immutable: the engine holds no state, so one instance serves every thread. */
static ck_engine uring_engine = { .ops = &uring_ops };

ck_engine *ck_engine_default(void)
{
    return &uring_engine;
}

int ck__engine_open_file(ck_engine *e, int dir, const char *path, int flags, unsigned mode)
{
    /* Non-blocking until it is known to be a regular file: a FIFO would block a read
     * open until a writer came, for ever. */
    int fd = e->ops->open(e, dir, path, flags | O_NONBLOCK, mode);
    if (fd == -ENXIO)
        return CK_ENOTREG;      /* a FIFO opened for writing, no reader */
    if (fd < 0)
        return fd;
    struct stat st;
    int r = fstat(fd, &st) < 0 ? -errno : S_ISREG(st.st_mode) ? 0 : CK_ENOTREG;
    int fl = r == 0 ? fcntl(fd, F_GETFL) : 0;
    if (r == 0 && !(flags & O_NONBLOCK) && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0))
        r = -errno;
    if (r < 0) {
        e->ops->close(e, fd);
        return r;
    }
    return fd;
}

int ck__engine_open_data(ck_engine *e, int dir, const char *path, int flags, unsigned mode,
                         bool *direct)
{
    int fd = ck__engine_open_file(e, dir, path, flags | O_DIRECT, mode);
    if (fd == -EINVAL) {
        /* The file system refuses O_DIRECT (some FUSE and older tmpfs): buffered I/O
         * still works, only slower; the caller logs it. Linux creates the file before
         * it refuses the flag, so the retry drops O_EXCL: the file is ours, made by
         * the exclusive open that just failed. */
        fd = ck__engine_open_file(e, dir, path, flags & ~O_EXCL, mode);
        *direct = false;
    } else {
        *direct = fd >= 0;
    }
    return fd;
}

int ck__engine_fsync_path(ck_engine *e, int dir, const char *path)
{
    int fd = e->ops->open(e, dir, path, O_RDONLY, 0);
    if (fd < 0)
        return fd;
    int r = e->ops->fsync(e, fd);
    int c = e->ops->close(e, fd);
    return r < 0 ? r : c;
}
