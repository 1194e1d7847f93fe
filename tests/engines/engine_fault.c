/* engine_fault.c - an engine that wraps another and injects one fault.
 *
 * Operations are numbered from 0 in the order they reach the engine. At operation
 * `at` the fault strikes: an error, a short write, a failed fsync, a slow one, or a
 * crash after which nothing reaches the disk any more. The crash test runs a save once to count
 * its operations, then once per index with a crash there, and checks after each
 * that every earlier checkpoint is intact and nothing partial is visible.
 */
#include "test_engines.h"
#include "model/grow.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct fault_engine {
    ck_engine base;
    ck_engine *inner;
    ck_fault fault;
    pthread_mutex_t mu;
    uint64_t ops;
    bool fired;
    bool crashed;
} fault_engine;

struct ck_ioq {
    fault_engine *fe;
    ck_ioq *inner;
    /* completions made up by the fault, handed out before the inner queue's */
    ck_io_done *fake;
    unsigned nfake;
    size_t capfake;
};

enum verdict { PASS, FAIL, SHORTEN, SLOW };

/* Counts one operation and decides its fate. *err gets the error for FAIL. A short
 * write needs 8 KiB or more, so that half of it stays 4 KiB-aligned for O_DIRECT. */
static enum verdict judge(fault_engine *fe, bool is_write, uint32_t write_len, bool is_fsync,
                          int *err)
{
    enum verdict v = PASS;
    pthread_mutex_lock(&fe->mu);
    uint64_t n = fe->ops++;
    if (fe->crashed) {
        v = FAIL;
        *err = -ECANCELED;
    } else if (!fe->fired && n >= fe->fault.at) {
        switch (fe->fault.kind) {
        case CK_FAULT_EIO:
            v = FAIL, *err = -EIO, fe->fired = true;
            break;
        case CK_FAULT_ENOSPC:
            v = FAIL, *err = -ENOSPC, fe->fired = true;
            break;
        case CK_FAULT_CRASH:
            v = FAIL, *err = -ECANCELED, fe->fired = fe->crashed = true;
            break;
        case CK_FAULT_SHORT:
            if (is_write && write_len >= 8192)
                v = SHORTEN, fe->fired = true;
            break;
        case CK_FAULT_FSYNC:
            if (is_fsync)
                v = FAIL, *err = -EIO, fe->fired = true;
            break;
        case CK_FAULT_SLOW:
            if (is_fsync)
                v = SLOW, fe->fired = true;
            break;
        case CK_FAULT_NONE:
            break;
        }
    }
    pthread_mutex_unlock(&fe->mu);
    /* Slept outside the lock: the engine's other operations go on meanwhile. */
    if (v == SLOW)
        sleep(CK_FAULT_SLOW_S);
    return v;
}

#define FE(e) ((fault_engine *)(e))

/* For operations with nothing to shorten: pass through, or fail. */
#define GUARD(e)                                                     \
    do {                                                             \
        int err_ = 0;                                                \
        if (judge(FE(e), false, 0, false, &err_) == FAIL)               \
            return err_;                                             \
    } while (0)

static int f_open(ck_engine *e, int dir, const char *path, int flags, unsigned mode)
{
    GUARD(e);
    return FE(e)->inner->ops->open(FE(e)->inner, dir, path, flags, mode);
}

static int f_close(ck_engine *e, int fd)
{
    int err = 0;
    if (judge(FE(e), false, 0, false, &err) == FAIL) {
        /* The descriptor is released either way, as a dead process's would be. */
        FE(e)->inner->ops->close(FE(e)->inner, fd);
        return err;
    }
    return FE(e)->inner->ops->close(FE(e)->inner, fd);
}

static int f_fallocate(ck_engine *e, int fd, uint64_t len)
{
    GUARD(e);
    return FE(e)->inner->ops->fallocate(FE(e)->inner, fd, len);
}

static int f_fsync(ck_engine *e, int fd)
{
    int err = 0;
    if (judge(FE(e), false, 0, true, &err) == FAIL)
        return err;
    return FE(e)->inner->ops->fsync(FE(e)->inner, fd);
}

static int f_mkdir(ck_engine *e, int dir, const char *path, unsigned mode)
{
    GUARD(e);
    return FE(e)->inner->ops->mkdir(FE(e)->inner, dir, path, mode);
}

static int f_rename(ck_engine *e, int dir, const char *from, const char *to)
{
    GUARD(e);
    return FE(e)->inner->ops->rename(FE(e)->inner, dir, from, to);
}

static int f_unlink(ck_engine *e, int dir, const char *path)
{
    GUARD(e);
    return FE(e)->inner->ops->unlink(FE(e)->inner, dir, path);
}

static int f_rmdir(ck_engine *e, int dir, const char *path)
{
    GUARD(e);
    return FE(e)->inner->ops->rmdir(FE(e)->inner, dir, path);
}

static int f_link(ck_engine *e, int fromdir, const char *from, int dir, const char *to)
{
    GUARD(e);
    return FE(e)->inner->ops->link(FE(e)->inner, fromdir, from, dir, to);
}

static int f_step(ck_engine *e, const char *what)
{
    GUARD(e);
    return FE(e)->inner->ops->step(FE(e)->inner, what);
}

static int f_ioq_open(ck_engine *e, unsigned depth, const struct iovec *bufs, unsigned nbufs,
                      ck_ioq **out)
{
    ck_ioq *q = calloc(1, sizeof *q);
    if (!q)
        return -ENOMEM;
    q->fe = FE(e);
    int r = FE(e)->inner->ops->ioq_open(FE(e)->inner, depth, bufs, nbufs, &q->inner);
    if (r < 0) {
        free(q);
        return r;
    }
    *out = q;
    return 0;
}

static int push_fake(ck_ioq *q, uint64_t user, int res)
{
    if (ck__grow(&q->fake, &q->capfake, (size_t)q->nfake + 1, sizeof *q->fake) < 0)
        return -ENOMEM;
    q->fake[q->nfake++] = (ck_io_done){ .user = user, .res = res };
    return 0;
}

static int f_ioq_submit(ck_ioq *q, const ck_io *ios, unsigned n)
{
    ck_engine *inner = q->fe->inner;
    for (unsigned i = 0; i < n; i++) {
        ck_io io = ios[i];
        int err = 0;
        bool w = io.write && !io.fsync;
        enum verdict v = judge(q->fe, w, w ? io.len : 0, io.fsync, &err);
        int r;
        if (v == FAIL) {
            r = push_fake(q, io.user, err);
        } else {
            if (v == SHORTEN)
                io.len = (io.len / 2) & ~4095u;   /* stays O_DIRECT-aligned */
            r = io.len == 0 && !io.fsync ? push_fake(q, io.user, 0)
                            : inner->ops->ioq_submit(q->inner, &io, 1);
        }
        if (r < 0)
            return r;
    }
    return 0;
}

static int f_ioq_reap(ck_ioq *q, ck_io_done *out, unsigned max, unsigned min_done)
{
    unsigned got = 0;
    while (got < max && q->nfake > 0) {
        out[got++] = q->fake[0];
        memmove(q->fake, q->fake + 1, --q->nfake * sizeof *q->fake);
    }
    if (got == max)
        return (int)got;
    int r = q->fe->inner->ops->ioq_reap(q->inner, out + got, max - got,
                                        min_done > got ? min_done - got : 0);
    return r < 0 ? r : (int)got + r;
}

static void f_ioq_close(ck_ioq *q)
{
    if (!q)
        return;
    q->fe->inner->ops->ioq_close(q->inner);
    free(q->fake);
    free(q);
}

static void f_destroy(ck_engine *e)
{
    pthread_mutex_destroy(&FE(e)->mu);
    free(e);
}

static const struct ck_engine_ops fault_ops = {
    .open = f_open, .close = f_close, .fallocate = f_fallocate, .fsync = f_fsync,
    .mkdir = f_mkdir, .rename = f_rename, .unlink = f_unlink, .rmdir = f_rmdir,
    .link = f_link, .step = f_step,
    .ioq_open = f_ioq_open, .ioq_submit = f_ioq_submit, .ioq_reap = f_ioq_reap,
    .ioq_close = f_ioq_close, .destroy = f_destroy,
};

int ck_engine_fault_new(ck_engine *inner, ck_fault fault, ck_engine **out)
{
    fault_engine *fe = calloc(1, sizeof *fe);
    if (!fe)
        return -ENOMEM;
    fe->base.ops = &fault_ops;
    fe->inner = inner;
    fe->fault = fault;
    pthread_mutex_init(&fe->mu, NULL);
    *out = &fe->base;
    return 0;
}

uint64_t ck_engine_fault_ops(ck_engine *e)
{
    pthread_mutex_lock(&FE(e)->mu);
    uint64_t n = FE(e)->ops;
    pthread_mutex_unlock(&FE(e)->mu);
    return n;
}

bool ck_engine_fault_fired(ck_engine *e)
{
    pthread_mutex_lock(&FE(e)->mu);
    bool f = FE(e)->fired;
    pthread_mutex_unlock(&FE(e)->mu);
    return f;
}

int ck_fault_parse(const char *s, ck_fault *out)
{
    static const struct { const char *name; ck_fault_kind kind; } kinds[] = {
        { "eio", CK_FAULT_EIO }, { "enospc", CK_FAULT_ENOSPC }, { "short", CK_FAULT_SHORT },
        { "fsync", CK_FAULT_FSYNC }, { "crash", CK_FAULT_CRASH }, { "slow", CK_FAULT_SLOW },
    };
    const char *at = strchr(s, '@');
    if (!at || at[1] == '\0')
        return -EINVAL;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(at + 1, &end, 10);
    if (errno || *end != '\0' || at[1] == '-')
        return -EINVAL;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (strlen(kinds[i].name) == (size_t)(at - s) && !strncmp(s, kinds[i].name, (size_t)(at - s))) {
            out->kind = kinds[i].kind;
            out->at = n;
            return 0;
        }
    }
    return -EINVAL;
}
