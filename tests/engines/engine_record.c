/* engine_record.c - an engine that passes every operation through and records it, for
 * the power-loss crash test (tests/ckpt/test_crash_states.c builds, from the record,
 * the disk states a power cut may leave).
 *
 * What is recorded: creates (an open with O_CREAT), mkdir, rename, unlink, rmdir,
 * link, fallocate, every data write with its bytes, and every fsync (of a file or a
 * directory, directly or on a queue), each with the path it was made on (a directory
 * descriptor's path, as it was opened through the engine, joined with the path beneath
 * it); steps with their name. Reads, opens of existing files and closes change nothing on disk and
 * are not recorded. Failed operations are not recorded.
 *
 * A file written by other code (LMDB writes the manifest with its own calls, then the
 * core fsyncs it through the engine) is recorded when the engine first opens it, or
 * opens (to fsync) or renames the directory holding it, if the engine made that
 * directory: as created, then written in
 * 4 KiB pages with the bytes it holds at that moment. Nothing
 * of the save's runs between those writes and that open, so the order is exact; what
 * the record cannot show is the order of LMDB's own writes among themselves, which the
 * test covers by treating every page as an independent unsynced write.
 */
#include "test_engines.h"
#include "model/grow.h"
#include "io/engine.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct fdpath {
    int fd;
    char *path;
} fdpath;

typedef struct rec_engine {
    ck_engine base;
    ck_engine *inner;
    pthread_mutex_t mu;
    ck_rec_op *ops;
    size_t nops, capops;
    fdpath *fds;
    size_t nfds, capfds;
    char **known;            /* paths created or opened through the engine */
    size_t nknown, capknown;
    int err;                 /* -ENOMEM once a record was lost */
} rec_engine;

struct ck_ioq {
    rec_engine *re;
    ck_ioq *inner;
};

#define RE(e) ((rec_engine *)(e))

/* Appends an op (the lock held); path, to and data are copied. */
static void add(rec_engine *re, ck_rec_kind kind, const char *path, const char *to,
                uint64_t off, uint64_t len, const void *data)
{
    ck_rec_op op = { .kind = kind, .off = off, .len = len };
    op.path = strdup(path);
    op.to = to ? strdup(to) : NULL;
    if (data && len && (op.data = malloc(len)))
        memcpy(op.data, data, len);
    if (!op.path || (to && !op.to) || (data && len && !op.data) ||
        ck__grow(&re->ops, &re->capops, re->nops + 1, sizeof *re->ops) < 0) {
        free(op.path), free(op.to), free(op.data);
        re->err = -ENOMEM;
        return;
    }
    re->ops[re->nops++] = op;
}

static const char *fd_path(rec_engine *re, int fd)
{
    for (size_t i = re->nfds; i-- > 0;)
        if (re->fds[i].fd == fd)
            return re->fds[i].path;
    return "?";
}

/* The path of (dir, path): dir as it was opened through the engine. */
static void join(rec_engine *re, int dir, const char *path, char *out, size_t len)
{
    if (dir == AT_FDCWD)
        snprintf(out, len, "%s", path);
    else
        snprintf(out, len, "%s/%s", fd_path(re, dir), path);
}

static bool known(rec_engine *re, const char *path)
{
    for (size_t i = 0; i < re->nknown; i++)
        if (!strcmp(re->known[i], path))
            return true;
    return false;
}

static void remember(rec_engine *re, const char *path)
{
    char *p = strdup(path);
    if (!p || ck__grow(&re->known, &re->capknown, re->nknown + 1, sizeof *re->known) < 0) {
        free(p);
        re->err = -ENOMEM;
        return;
    }
    re->known[re->nknown++] = p;
}

/* A regular file the engine meets for the first time, written by someone else; for a
 * directory, every such file in it. */
static void adopt(rec_engine *re, const char *path)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        if (!known(re, path))
            return;          /* not made by the save: older files are not its own */
        DIR *d = opendir(path);
        struct dirent *de;
        char sub[PATH_MAX];
        while (d && (de = readdir(d)))
            if (de->d_name[0] != '.' &&
                snprintf(sub, sizeof sub, "%s/%s", path, de->d_name) < (int)sizeof sub &&
                stat(sub, &st) == 0 && S_ISREG(st.st_mode))
                adopt(re, sub);
        if (d)
            closedir(d);
        return;
    }
    if (known(re, path) || !S_ISREG(st.st_mode))
        return;
    remember(re, path);
    add(re, CK_REC_CREATE, path, NULL, 0, 0, NULL);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    uint8_t page[4096];
    ssize_t n;
    for (uint64_t off = 0; fd >= 0 && (n = pread(fd, page, sizeof page, (off_t)off)) > 0;
         off += (uint64_t)n)
        add(re, CK_REC_WRITE, path, NULL, off, (uint64_t)n, page);
    if (fd >= 0)
        close(fd);
}

static int r_open(ck_engine *e, int dir, const char *rel, int flags, unsigned mode)
{
    rec_engine *re = RE(e);
    char path[PATH_MAX];
    pthread_mutex_lock(&re->mu);
    join(re, dir, rel, path, sizeof path);
    if (!(flags & O_CREAT))
        adopt(re, path);
    struct stat st;
    bool existed = stat(path, &st) == 0;
    int fd = re->inner->ops->open(re->inner, dir, rel, flags, mode);
    if (fd >= 0) {
        char *p = strdup(path);
        if (!p || ck__grow(&re->fds, &re->capfds, re->nfds + 1, sizeof *re->fds) < 0) {
            free(p);
            re->err = -ENOMEM;
        } else {
            re->fds[re->nfds++] = (fdpath){ fd, p };
        }
    }
    /* A refused O_DIRECT create still made the file (ck__engine_open_data retries
     * without O_EXCL): the create happened now, whatever the open returned. */
    if ((flags & O_CREAT) && !existed && stat(path, &st) == 0)
        add(re, CK_REC_CREATE, path, NULL, 0, 0, NULL);
    if ((fd >= 0 || !existed) && stat(path, &st) == 0 && !known(re, path))
        remember(re, path);
    pthread_mutex_unlock(&re->mu);
    return fd;
}

static int r_close(ck_engine *e, int fd)
{
    rec_engine *re = RE(e);
    pthread_mutex_lock(&re->mu);
    for (size_t i = re->nfds; i-- > 0;)
        if (re->fds[i].fd == fd) {
            free(re->fds[i].path);
            re->fds[i] = re->fds[--re->nfds];
            break;
        }
    pthread_mutex_unlock(&re->mu);
    return re->inner->ops->close(re->inner, fd);
}

/* Runs an operation on a path and records it if it succeeded. */
#define PATH_OP(e, kind, path, to, call)                                 \
    do {                                                                 \
        rec_engine *re_ = RE(e);                                         \
        pthread_mutex_lock(&re_->mu);                                    \
        int r_ = (call);                                                 \
        if (r_ >= 0)                                                     \
            add(re_, (kind), (path), (to), 0, 0, NULL);                  \
        pthread_mutex_unlock(&re_->mu);                                  \
        return r_;                                                       \
    } while (0)

/* The same for an operation on (dir, rel), recorded with its joined path. */
#define AT_OP(e, kind, dir, rel, call)                                   \
    do {                                                                 \
        char p_[PATH_MAX];                                               \
        pthread_mutex_lock(&RE(e)->mu);                                  \
        join(RE(e), (dir), (rel), p_, sizeof p_);                        \
        pthread_mutex_unlock(&RE(e)->mu);                                \
        PATH_OP(e, kind, p_, NULL, call);                                \
    } while (0)

static int r_fallocate(ck_engine *e, int fd, uint64_t len)
{
    rec_engine *re = RE(e);
    pthread_mutex_lock(&re->mu);
    int r = re->inner->ops->fallocate(re->inner, fd, len);
    if (r >= 0)
        add(re, CK_REC_FALLOCATE, fd_path(re, fd), NULL, 0, len, NULL);
    pthread_mutex_unlock(&re->mu);
    return r;
}

static int r_fsync(ck_engine *e, int fd)
{
    PATH_OP(e, CK_REC_FSYNC, fd_path(re_, fd), NULL, re_->inner->ops->fsync(re_->inner, fd));
}

static int r_mkdir(ck_engine *e, int dir, const char *rel, unsigned mode)
{
    rec_engine *re = RE(e);
    char path[PATH_MAX];
    pthread_mutex_lock(&re->mu);
    join(re, dir, rel, path, sizeof path);
    int r = re->inner->ops->mkdir(re->inner, dir, rel, mode);
    if (r >= 0) {
        add(re, CK_REC_MKDIR, path, NULL, 0, 0, NULL);
        remember(re, path);
    }
    pthread_mutex_unlock(&re->mu);
    return r;
}

/* Known paths under from move to to. */
static void move_known(rec_engine *re, const char *from, const char *to)
{
    size_t n = strlen(from);
    for (size_t i = 0; i < re->nknown; i++) {
        const char *k = re->known[i];
        if (strncmp(k, from, n) != 0 || (k[n] != '/' && k[n] != '\0'))
            continue;
        char *moved = malloc(strlen(to) + strlen(k + n) + 1);
        if (!moved) {
            re->err = -ENOMEM;
            continue;
        }
        strcpy(moved, to);
        strcat(moved, k + n);
        free(re->known[i]);
        re->known[i] = moved;
    }
}

static int r_rename(ck_engine *e, int dir, const char *from_rel, const char *to_rel)
{
    rec_engine *re = RE(e);
    char from[PATH_MAX], to[PATH_MAX];
    pthread_mutex_lock(&re->mu);
    join(re, dir, from_rel, from, sizeof from);
    join(re, dir, to_rel, to, sizeof to);
    adopt(re, from);         /* what other code wrote into it, before it moves */
    int r = re->inner->ops->rename(re->inner, dir, from_rel, to_rel);
    if (r >= 0) {
        add(re, CK_REC_RENAME, from, to, 0, 0, NULL);
        move_known(re, from, to);
    }
    pthread_mutex_unlock(&re->mu);
    return r;
}

static int r_unlink(ck_engine *e, int dir, const char *rel)
{
    AT_OP(e, CK_REC_UNLINK, dir, rel, re_->inner->ops->unlink(re_->inner, dir, rel));
}

static int r_rmdir(ck_engine *e, int dir, const char *rel)
{
    AT_OP(e, CK_REC_RMDIR, dir, rel, re_->inner->ops->rmdir(re_->inner, dir, rel));
}

static int r_link(ck_engine *e, int fromdir, const char *from_rel, int dir, const char *to_rel)
{
    char from[PATH_MAX], to[PATH_MAX];
    pthread_mutex_lock(&RE(e)->mu);
    join(RE(e), fromdir, from_rel, from, sizeof from);
    join(RE(e), dir, to_rel, to, sizeof to);
    pthread_mutex_unlock(&RE(e)->mu);
    PATH_OP(e, CK_REC_LINK, from, to,
            re_->inner->ops->link(re_->inner, fromdir, from_rel, dir, to_rel));
}

static int r_step(ck_engine *e, const char *what)
{
    PATH_OP(e, CK_REC_STEP, what, NULL, re_->inner->ops->step(re_->inner, what));
}

static int r_ioq_open(ck_engine *e, unsigned depth, const struct iovec *bufs, unsigned nbufs,
                      ck_ioq **out)
{
    ck_ioq *q = calloc(1, sizeof *q);
    if (!q)
        return -ENOMEM;
    q->re = RE(e);
    int r = RE(e)->inner->ops->ioq_open(RE(e)->inner, depth, bufs, nbufs, &q->inner);
    if (r < 0) {
        free(q);
        return r;
    }
    *out = q;
    return 0;
}

/* Writes are recorded when submitted: the core submits a file's fsync only after its
 * writes completed, so submission order is the order that matters. */
static int r_ioq_submit(ck_ioq *q, const ck_io *ios, unsigned n)
{
    rec_engine *re = q->re;
    pthread_mutex_lock(&re->mu);
    for (unsigned i = 0; i < n; i++) {
        const ck_io *io = &ios[i];
        if (io->fsync) {
            add(re, CK_REC_FSYNC, fd_path(re, io->fd), NULL, 0, 0, NULL);
        } else if (io->write) {
            /* io->buf is the address even inside a registered buffer */
            add(re, CK_REC_WRITE, fd_path(re, io->fd), NULL, io->off, io->len, io->buf);
        }
    }
    pthread_mutex_unlock(&re->mu);
    return re->inner->ops->ioq_submit(q->inner, ios, n);
}

static int r_ioq_reap(ck_ioq *q, ck_io_done *out, unsigned max, unsigned min_done)
{
    return q->re->inner->ops->ioq_reap(q->inner, out, max, min_done);
}

static void r_ioq_close(ck_ioq *q)
{
    if (!q)
        return;
    q->re->inner->ops->ioq_close(q->inner);
    free(q);
}

static void r_destroy(ck_engine *e)
{
    rec_engine *re = RE(e);
    for (size_t i = 0; i < re->nops; i++)
        free(re->ops[i].path), free(re->ops[i].to), free(re->ops[i].data);
    for (size_t i = 0; i < re->nfds; i++)
        free(re->fds[i].path);
    for (size_t i = 0; i < re->nknown; i++)
        free(re->known[i]);
    free(re->ops);
    free(re->fds);
    free(re->known);
    pthread_mutex_destroy(&re->mu);
    free(re);
}

static const struct ck_engine_ops record_ops = {
    .open = r_open, .close = r_close, .fallocate = r_fallocate, .fsync = r_fsync,
    .mkdir = r_mkdir, .rename = r_rename, .unlink = r_unlink, .rmdir = r_rmdir,
    .link = r_link, .step = r_step,
    .ioq_open = r_ioq_open, .ioq_submit = r_ioq_submit, .ioq_reap = r_ioq_reap,
    .ioq_close = r_ioq_close, .destroy = r_destroy,
};

int ck_engine_record_new(ck_engine *inner, ck_engine **out)
{
    rec_engine *re = calloc(1, sizeof *re);
    if (!re)
        return -ENOMEM;
    re->base.ops = &record_ops;
    re->inner = inner;
    pthread_mutex_init(&re->mu, NULL);
    *out = &re->base;
    return 0;
}

int ck_engine_record_ops(ck_engine *e, const ck_rec_op **ops, size_t *n)
{
    rec_engine *re = RE(e);
    pthread_mutex_lock(&re->mu);
    *ops = re->ops;
    *n = re->nops;
    int err = re->err;
    pthread_mutex_unlock(&re->mu);
    return err;
}
