/* writer.c - the data path of a save: io_uring writes, hashing in workers, fsync.
 *
 * One thread drives a ring of block-sized slots. For each block of each file it takes
 * a free slot and points it at caller memory, or has its own buffer filled: on a
 * worker, which then also hashes it, when the sources are memory or thread-safe
 * fills, else inline. A filled slot's I/Os are submitted by the driver; a slot is
 * free again when its writes have landed and its hash is done. A file is fsynced and
 * closed when its last block lands.
 */
#include "io/writer.h"
#include "io/rootfs.h"
#include "io/engine.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_CHUNKS 256   /* I/Os per block: the low byte of an I/O's user tag */

typedef struct wstate wstate;

typedef struct slot {
    wstate *w;
    uint8_t *own;              /* this slot's buffer, block_size bytes, 4 KiB-aligned */
    uint8_t *buf;              /* what is written: own, or caller memory */
    int own_index;             /* own's registered-buffer index, or -1 */
    uint32_t file;
    uint32_t len;
    uint64_t b0;               /* file offset of the block */
    uint32_t src0;             /* first source that may overlap it */
    uint8_t *hash_out;         /* where its digest goes, or NULL */
    unsigned nios;
    unsigned ios_pending;      /* driver thread only */
    bool hashing;              /* under w->mu: a worker still reads buf */
    bool filling;              /* under w->mu: a worker fills (and hashes) own */
    bool ready;                /* under w->mu: filled, its writes not yet submitted */
    int fill_err;
    ck_io ios[MAX_CHUNKS];
} slot;

typedef struct wfile_state {
    int fd;
    uint64_t blocks_left;      /* submitted or not, not yet landed */
    uint8_t *landed;           /* with opts.landed: a bit per block that landed */
    uint64_t prefix;           /* with opts.landed: the blocks from the start all landed */
    bool submitted;            /* every block submitted */
    uint32_t cursor;           /* first src that may still overlap the next block */
} wfile_state;

struct wstate {
    const ck__writer_opts *o;
    ck_engine *e;
    ck__wfile *files;
    wfile_state *fs;
    uint32_t nfiles;
    uint32_t block, io;
    slot *slots;
    unsigned nslots;
    ck_ioq *q;
    unsigned inflight;         /* I/Os submitted, not reaped */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int err_code;              /* first error; after it nothing new is submitted */
    ck_err *err;
    uint64_t done, total;
    ck__writer_stats *st;
};

static void logf_(wstate *w, const char *fmt, const char *path)
{
    if (!w->o->log)
        return;
    char msg[PATH_MAX + 128];
    snprintf(msg, sizeof msg, fmt, path);
    w->o->log(w->o->cb_arg, msg);
}

static int fail(wstate *w, int code, const char *fmt, const char *path, const char *detail)
{
    if (w->err_code == 0)
        w->err_code = ck_err_set(w->err, code, fmt, path, detail);
    return w->err_code;
}

/* Runs on a hash worker. */
static void on_hashed(void *arg)
{
    slot *s = arg;
    pthread_mutex_lock(&s->w->mu);
    s->hashing = false;
    pthread_cond_signal(&s->w->cv);
    pthread_mutex_unlock(&s->w->mu);
}

static void close_file(wstate *w, uint32_t f)
{
    int r = w->e->ops->close(w->e, w->fs[f].fd);
    if (r < 0)
        fail(w, r, "%s: close: %s", w->files[f].path, strerror(-r));
    w->fs[f].fd = -1;
}

#define FSYNC_TAG (UINT64_C(1) << 62)   /* user tag of a file's fsync: the bit | file */

/* A file's last block landed: fsync it on the ring, so that the fsyncs of many files
 * run together and the driver keeps submitting (a blocking fsync here would wait for
 * a journal commit that waits for every write in flight). */
static void finish_file(wstate *w, uint32_t f)
{
    wfile_state *fs = &w->fs[f];
    if (fs->fd < 0)
        return;
    /* A file whose length is not whole pages is cut to it before its fsync. */
    uint64_t cut = w->files[f].cut;
    if (w->err_code == 0 && cut && ftruncate(fs->fd, (off_t)cut) < 0)
        fail(w, -errno, "%s: truncate: %s", w->files[f].path, strerror(errno));
    if (w->err_code == 0) {
        ck_io io = { .fd = fs->fd, .fsync = true, .user = FSYNC_TAG | f };
        int r = w->e->ops->ioq_submit(w->q, &io, 1);
        if (r == 0) {
            w->inflight++;
            return;
        }
        fail(w, r, "%s: fsync: %s", w->files[f].path, strerror(-r));
    }
    close_file(w, f);
}

/* Block b of file f landed: its prefix of landed blocks grows when b was its end (the
 * writes of a queue land in any order). */
static void prefix_grow(wstate *w, uint32_t f, uint64_t b)
{
    wfile_state *fs = &w->fs[f];
    uint64_t n = (w->files[f].size + w->block - 1) / w->block, was = fs->prefix;
    fs->landed[b / 8] |= (uint8_t)(1u << (b % 8));
    while (fs->prefix < n && fs->landed[fs->prefix / 8] & (1u << (fs->prefix % 8)))
        fs->prefix++;
    if (fs->prefix != was) {
        uint64_t bytes = fs->prefix * w->block;
        w->o->landed(w->o->landed_arg, f, bytes < w->files[f].size ? bytes : w->files[f].size);
    }
}

static void block_landed(wstate *w, slot *s)
{
    wfile_state *fs = &w->fs[s->file];
    w->done += s->len;
    if (w->o->progress)
        w->o->progress(w->o->cb_arg, w->done, w->total);
    if (fs->landed && w->err_code == 0)
        prefix_grow(w, s->file, s->b0 / w->block);
    if (--fs->blocks_left == 0 && fs->submitted)
        finish_file(w, s->file);
}

/* Reaps completions; waits for at least one when wait is set. */
static void reap(wstate *w, bool wait)
{
    ck_io_done done[128];
    int got = w->e->ops->ioq_reap(w->q, done, 128, wait ? 1 : 0);
    if (got < 0) {
        /* The ring itself failed: nothing more will complete. */
        fail(w, got, "%s: io_uring: %s", "writer", strerror(-got));
        for (unsigned i = 0; i < w->nslots; i++)
            w->slots[i].ios_pending = 0;
        w->inflight = 0;
        return;
    }
    for (int i = 0; i < got; i++) {
        if (done[i].user & FSYNC_TAG) {
            uint32_t f = (uint32_t)(done[i].user & ~FSYNC_TAG);
            w->inflight--;
            if (done[i].res < 0)
                fail(w, done[i].res, "%s: fsync: %s", w->files[f].path, strerror(-done[i].res));
            close_file(w, f);
            continue;
        }
        slot *s = &w->slots[done[i].user >> 8];
        ck_io *io = &s->ios[done[i].user & 0xff];
        int res = done[i].res;
        w->inflight--;
        if (res > 0 && (uint32_t)res < io->len && w->err_code == 0) {
            /* A short write: continue with the rest, as write(2) callers must. */
            io->buf = (uint8_t *)io->buf + res;
            io->off += (uint32_t)res;
            io->len -= (uint32_t)res;
            io->buf_index = -1;
            int r = w->e->ops->ioq_submit(w->q, io, 1);
            if (r == 0) {
                w->inflight++;
                continue;
            }
            res = r;
        }
        if (res < 0)
            fail(w, res, "%s: write: %s", w->files[s->file].path, strerror(-res));
        else if (res == 0 && io->len > 0)
            fail(w, -EIO, "%s: %s", w->files[s->file].path, "write made no progress");
        if (--s->ios_pending == 0)
            block_landed(w, s);
    }
}

static bool busy_locked(const slot *s)
{
    return s->ios_pending || s->hashing || s->filling || s->ready;
}

static int submit_writes(wstate *w, slot *s)
{
    s->ios_pending = s->nios;
    int r = w->e->ops->ioq_submit(w->q, s->ios, s->nios);
    if (r < 0) {
        s->ios_pending = 0;
        return fail(w, r, "%s: submitting writes: %s", w->files[s->file].path, strerror(-r));
    }
    w->inflight += s->nios;
    return 0;
}

/* Submits the writes of slots whose fill finished on a worker. */
static bool submit_ready(wstate *w)
{
    bool any = false;
    for (unsigned i = 0; i < w->nslots; i++) {
        slot *s = &w->slots[i];
        pthread_mutex_lock(&w->mu);
        bool ready = s->ready;
        s->ready = false;
        pthread_mutex_unlock(&w->mu);
        if (!ready)
            continue;
        any = true;
        if (s->fill_err)
            fail(w, s->fill_err, "%s: filling the data: %s", w->files[s->file].path,
                 strerror(-s->fill_err));
        else if (w->err_code == 0)
            submit_writes(w, s);
    }
    return any;
}

/* Moves the pipeline on: submits filled slots, reaps writes, and with wait set,
 * blocks until something happened. */
static void pump(wstate *w, bool wait)
{
    bool moved = submit_ready(w);
    if (w->inflight > 0) {
        reap(w, wait && !moved);
        return;
    }
    if (!wait || moved)
        return;
    /* No I/O in flight: only workers can change anything. */
    pthread_mutex_lock(&w->mu);
    bool working = false, any_ready = false;
    for (unsigned i = 0; i < w->nslots; i++) {
        working = working || w->slots[i].filling || w->slots[i].hashing;
        any_ready = any_ready || w->slots[i].ready;
    }
    if (working && !any_ready)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

static slot *get_slot(wstate *w)
{
    for (;;) {
        for (unsigned i = 0; i < w->nslots; i++) {
            pthread_mutex_lock(&w->mu);
            bool busy = busy_locked(&w->slots[i]);
            pthread_mutex_unlock(&w->mu);
            if (!busy)
                return &w->slots[i];
        }
        pump(w, true);
    }
}

/* Copies or generates the bytes of the slot's block into its own buffer, zeros
 * in the gaps. May run on a worker. */
static int fill_block(wstate *w, slot *s)
{
    const ck__wfile *wf = &w->files[s->file];
    uint64_t b0 = s->b0, b1 = b0 + s->len, pos = b0;
    for (uint32_t i = s->src0; i < wf->nsrcs && wf->srcs[i].file_off < b1; i++) {
        const ck__src *c = &wf->srcs[i];
        uint64_t a = c->file_off > b0 ? c->file_off : b0;
        uint64_t z = c->file_off + c->len < b1 ? c->file_off + c->len : b1;
        if (a >= z)
            continue;
        memset(s->own + (pos - b0), 0, a - pos);
        uint64_t in = a - c->file_off;
        if (c->mem) {
            memcpy(s->own + (a - b0), (const uint8_t *)c->mem + in, z - a);
        } else {
            int r = c->fill(c->arg, c->src_off + in, s->own + (a - b0), z - a);
            if (r < 0)
                return r;
        }
        pos = z;
    }
    memset(s->own + (pos - b0), 0, b1 - pos);
    return 0;
}

/* A worker's job: fill, hash, and hand the slot back to the driver. */
static void fill_job(void *arg)
{
    slot *s = arg;
    int r = fill_block(s->w, s);
    if (r == 0 && s->hash_out)
        r = ck__sha256(s->buf, s->len, s->hash_out);
    pthread_mutex_lock(&s->w->mu);
    s->fill_err = r;
    s->filling = false;
    s->ready = true;
    pthread_cond_signal(&s->w->cv);
    pthread_mutex_unlock(&s->w->mu);
}

/* Where the block's bytes come from: caller memory when one aligned run holds
 * them all (returns true), else the slot's own buffer. Also tells whether a worker
 * may fill it. */
static bool in_place(wstate *w, slot *s, bool *parallel)
{
    const ck__wfile *wf = &w->files[s->file];
    wfile_state *fs = &w->fs[s->file];
    uint64_t b0 = s->b0, b1 = b0 + s->len;
    while (fs->cursor < wf->nsrcs &&
           wf->srcs[fs->cursor].file_off + wf->srcs[fs->cursor].len <= b0)
        fs->cursor++;
    s->src0 = fs->cursor;
    *parallel = w->o->pool != NULL;
    for (uint32_t i = s->src0; i < wf->nsrcs && wf->srcs[i].file_off < b1; i++) {
        const ck__src *c = &wf->srcs[i];
        if (i == s->src0 && c->mem && c->file_off <= b0 && b1 <= c->file_off + c->len &&
            (((uintptr_t)c->mem + (b0 - c->file_off)) & 4095) == 0) {
            s->buf = (uint8_t *)c->mem + (b0 - c->file_off);
            return true;
        }
        if (!c->mem && !w->o->fill_threadsafe)
            *parallel = false;
    }
    s->buf = s->own;
    return false;
}

static int submit_block(wstate *w, uint32_t f, uint64_t b0)
{
    ck__wfile *wf = &w->files[f];
    uint32_t len = (uint32_t)(wf->size - b0 < w->block ? wf->size - b0 : w->block);
    slot *s = get_slot(w);
    if (w->err_code)
        return w->err_code;
    s->file = f;
    s->b0 = b0;
    s->len = len;
    s->fill_err = 0;
    bool hash = w->o->pool && !w->o->no_hash;
    s->hash_out = hash ? wf->hashes + (b0 / w->block) * CK_SHA256_LEN : NULL;
    bool parallel;
    bool mem = in_place(w, s, &parallel);
    unsigned idx = (unsigned)(s - w->slots);
    s->nios = 0;
    for (uint32_t off = 0; off < len; off += w->io) {
        ck_io *io = &s->ios[s->nios];
        *io = (ck_io){ .fd = w->fs[f].fd, .write = true, .buf = s->buf + off,
                       .buf_index = mem ? -1 : s->own_index,
                       .len = len - off < w->io ? len - off : w->io, .off = b0 + off,
                       .user = (uint64_t)idx << 8 | s->nios };
        s->nios++;
    }
    if (!mem)
        w->st->copied += len;
    int r;
    if (!mem && parallel) {
        pthread_mutex_lock(&w->mu);
        s->filling = true;
        pthread_mutex_unlock(&w->mu);
        if ((r = ck__hashpool_run(w->o->pool, fill_job, s)) < 0) {
            pthread_mutex_lock(&w->mu);
            s->filling = false;
            pthread_mutex_unlock(&w->mu);
            return fail(w, r, "%s: queueing a fill: %s", wf->path, strerror(-r));
        }
        return 0;
    }
    if (!mem && (r = fill_block(w, s)) < 0)
        return fail(w, r, "%s: filling the data: %s", wf->path, strerror(-r));
    if ((r = submit_writes(w, s)) < 0)
        return r;
    if (hash) {
        pthread_mutex_lock(&w->mu);
        s->hashing = true;
        pthread_mutex_unlock(&w->mu);
        if ((r = ck__hashpool_submit(w->o->pool, s->buf, len, s->hash_out, on_hashed, s)) < 0) {
            pthread_mutex_lock(&w->mu);
            s->hashing = false;
            pthread_mutex_unlock(&w->mu);
            return fail(w, r, "%s: queueing a hash: %s", wf->path, strerror(-r));
        }
    }
    return 0;
}

static int open_file(wstate *w, uint32_t f)
{
    ck__wfile *wf = &w->files[f];
    bool direct = false;
    int fd = ck__engine_open_data(w->e, wf->rel ? w->o->dir : AT_FDCWD,
                                  wf->rel ? wf->rel : wf->path, O_WRONLY | O_CREAT | O_EXCL,
                                  0644, &direct);
    if (fd < 0)
        return fail(w, fd, "%s: create: %s", wf->path, ck__why(fd));
    if (!direct && w->st->direct) {
        logf_(w, "%s: the file system refuses O_DIRECT; writing through the page cache",
              wf->path);
        w->st->direct = false;
    }
    w->fs[f].fd = fd;
    int r = w->e->ops->fallocate(w->e, fd, wf->size);
    if (r < 0)
        return fail(w, r, "%s: preallocate: %s", wf->path, strerror(-r));
    return 0;
}

/* Whether any block must be copied or generated: only then are block buffers
 * allocated and registered (64 MiB of page faults and pinning that a save straight
 * from an aligned staging image never uses). Mirrors in_place(). */
static bool needs_buffers(const wstate *w)
{
    for (uint32_t f = 0; f < w->nfiles; f++) {
        const ck__wfile *wf = &w->files[f];
        uint32_t cur = 0;
        for (uint64_t b0 = 0; b0 < wf->size; b0 += w->block) {
            uint64_t b1 = wf->size - b0 < w->block ? wf->size : b0 + w->block;
            while (cur < wf->nsrcs && wf->srcs[cur].file_off + wf->srcs[cur].len <= b0)
                cur++;
            if (cur == wf->nsrcs)
                return true;
            const ck__src *c = &wf->srcs[cur];
            if (!c->mem || c->file_off > b0 || b1 > c->file_off + c->len ||
                (((uintptr_t)c->mem + (b0 - c->file_off)) & 4095))
                return true;
        }
    }
    return false;
}

static int setup(wstate *w)
{
    const ck__writer_opts *o = w->o;
    w->block = o->block_size ? o->block_size : CK_BLOCK_SIZE_DEFAULT;
    w->io = o->io_size ? o->io_size : CK_IO_SIZE_DEFAULT;
    if (w->block < 4096 || (w->block & (w->block - 1)))
        return ck_err_set(w->err, -EINVAL, "block size %u is not a power of two >= 4096",
                          w->block);
    if (w->io > w->block)
        w->io = w->block;
    if (w->io % 4096 || w->block / w->io > MAX_CHUNKS)
        return ck_err_set(w->err, -EINVAL, "I/O size %u must be a multiple of 4096 and at "
                          "least block size / %d", w->io, MAX_CHUNKS);
    uint64_t mem = o->mem_limit ? o->mem_limit : (64u << 20);
    uint64_t n = o->depth ? o->depth : mem / w->block;
    w->nslots = (unsigned)(n < 2 ? 2 : n > 256 ? 256 : n);
    w->slots = calloc(w->nslots, sizeof *w->slots);
    w->fs = calloc(w->nfiles ? w->nfiles : 1, sizeof *w->fs);
    struct iovec *iov = calloc(w->nslots, sizeof *iov);
    if (!w->slots || !w->fs || !iov) {
        free(iov);
        return -ENOMEM;
    }
    for (uint32_t f = 0; f < w->nfiles; f++)
        w->fs[f].fd = -1;
    bool own = needs_buffers(w);
    for (unsigned i = 0; i < w->nslots; i++) {
        slot *s = &w->slots[i];
        s->w = w;
        s->own_index = -1;
        if (!own)
            continue;
        if (posix_memalign((void **)&s->own, 4096, w->block) != 0) {
            free(iov);
            return -ENOMEM;
        }
        iov[i] = (struct iovec){ .iov_base = s->own, .iov_len = w->block };
        s->own_index = (int)i;
    }
    unsigned depth = w->nslots * (w->block / w->io);
    if (depth > 4096)
        depth = 4096;
    /* Registered buffers spare the kernel a page-pinning per I/O; where the memlock
     * limit forbids them, plain I/O does the same job. */
    int r = w->e->ops->ioq_open(w->e, depth, iov, own ? w->nslots : 0, &w->q);
    if (r < 0) {
        for (unsigned i = 0; i < w->nslots; i++)
            w->slots[i].own_index = -1;
        r = w->e->ops->ioq_open(w->e, depth, NULL, 0, &w->q);
    }
    free(iov);
    if (r < 0)
        return ck_err_set(w->err, r, "io_uring setup: %s", strerror(-r));
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int ck__write_files(const ck__writer_opts *o, ck__wfile *files, uint32_t n, ck__writer_stats *st,
                   ck_err *err)
{
    ck__writer_stats dummy;
    wstate w = { .o = o, .e = o->engine ? o->engine : ck_engine_default(), .files = files,
                 .nfiles = n, .err = err, .st = st ? st : &dummy };
    *w.st = (ck__writer_stats){ .direct = true };
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    double t0 = now_s();
    int r = setup(&w);
    for (uint32_t f = 0; f < n; f++)
        w.total += files[f].size;
    for (uint32_t f = 0; r == 0 && f < n && w.err_code == 0; f++) {
        if (files[f].size % 4096) {
            r = ck_err_set(err, -EINVAL, "%s: size %llu is not a multiple of 4096",
                           files[f].path, (unsigned long long)files[f].size);
            break;
        }
        if (open_file(&w, f) < 0)
            break;
        uint64_t nblocks = (files[f].size + w.block - 1) / w.block;
        w.fs[f].blocks_left = nblocks;
        if (o->landed && !(w.fs[f].landed = calloc(nblocks / 8 + 1, 1))) {
            r = ck_err_set(err, -ENOMEM, "%s: out of memory", files[f].path);
            break;
        }
        for (uint64_t b = 0; b < nblocks && w.err_code == 0; b++)
            submit_block(&w, f, b * w.block);
        w.fs[f].submitted = true;
        if (w.fs[f].blocks_left == 0)
            finish_file(&w, f);
    }
    /* Drain: no slot's memory may be released while the kernel or a worker uses it,
     * and filled slots still have writes to submit (none once an error is set). */
    for (bool busy = w.q != NULL; busy;) {
        pump(&w, true);
        busy = w.inflight > 0;
        pthread_mutex_lock(&w.mu);
        for (unsigned i = 0; w.slots && i < w.nslots && !busy; i++)
            busy = busy_locked(&w.slots[i]);
        pthread_mutex_unlock(&w.mu);
    }
    for (uint32_t f = 0; w.fs && f < n; f++) {
        if (w.fs[f].fd >= 0) {
            w.e->ops->close(w.e, w.fs[f].fd);
            w.fs[f].fd = -1;
        }
        free(w.fs[f].landed);
    }
    if (w.q)
        w.e->ops->ioq_close(w.q);
    for (unsigned i = 0; w.slots && i < w.nslots; i++)
        free(w.slots[i].own);
    free(w.slots);
    free(w.fs);
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    w.st->bytes = w.done;
    w.st->seconds = now_s() - t0;
    if (r < 0)
        return r;
    return w.err_code;
}

int ck_files_write(const ck_write_opts *o, const ck_file_out *files, uint32_t n, ck_err *err)
{
    ck__src *src = calloc(n ? n : 1, sizeof *src);
    ck__wfile *wf = calloc(n ? n : 1, sizeof *wf);
    ck__hashpool *pool = NULL;
    int r = !src || !wf ? -ENOMEM : ck__hashpool_new(0, &pool);
    if (r < 0) {
        free(src);
        free(wf);
        return ck_err_set(err, r, "starting the writer: %s", strerror(-r));
    }
    for (uint32_t i = 0; i < n; i++) {
        src[i] = (ck__src){ .len = files[i].len, .fill = files[i].fill, .arg = files[i].arg };
        wf[i] = (ck__wfile){ .path = files[i].path, .size = (files[i].len + 4095) & ~4095ull,
                             .cut = files[i].len, .srcs = &src[i], .nsrcs = 1 };
    }
    ck__writer_opts wo = { .engine = o->engine, .pool = pool, .no_hash = true,
                           .fill_threadsafe = true, .mem_limit = o->mem_limit, .log = o->log,
                           .progress = o->progress, .cb_arg = o->cb_arg };
    r = ck__write_files(&wo, wf, n, NULL, err);
    ck__hashpool_free(pool);
    free(src);
    free(wf);
    return r;
}
