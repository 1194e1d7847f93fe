/* kd_drain_pipe.c - how a drain's writer moves a copy's bytes into the durable copy
 * (decision 0203): the drain's committer, for its own stream, and a node writing its
 * part both hand it their files, in stream order; and the pace of every drain's reads.
 *
 * Three things happen at once, where one thread did each in turn:
 *   the disk reads  each file past the page cache (O_DIRECT where the file system takes
 *                   it: a copy was written so, and its bytes are not in the cache), up
 *                   to KD_PIPE_AHEAD chunks ahead, through the engine's io_uring queue;
 *   the caller      writes each chunk in order (ck__copy_in_write), paced;
 *   a checker       (a thread of the pipe's; the copy was begun with one checker)
 *                   checks each chunk's blocks against the manifest once it is written
 *                   (ck__copy_in_check).
 * A chunk's buffer is read into again only once the checker has done with it: the
 * pipe holds KD_PIPE_SLOTS chunks, kd_drain_chunk bytes each. The queue is the
 * caller's alone; the checker shares only the counts, under the pipe's lock. */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kd.h"

#include "ck/engine.h"
#include "io/engine.h"
#include "ops/copy.h"

#define KD_PIPE_AHEAD 2u   /* reads in flight past the chunk being written */
#define KD_PIPE_SLOTS 4u   /* chunks held: read ahead, being written, being checked */

#define DRAIN_CHUNK (1u << 20)     /* bytes read and written at once */
#define DRAIN_CREDIT 0.1           /* s of the rate a paced drain may catch up */

void kd_drain_pace(kd_drain_bucket *b, uint64_t n)
{
    if (!b || !b->rate)
        return;
    double now = kd_now();
    /* Time spent reading and writing counts, up to one chunk's worth (a tenth of a
     * second); idle time beyond earns nothing: no burst after a pause. */
    if (b->t < now - DRAIN_CREDIT)
        b->t = now - DRAIN_CREDIT;
    b->t += (double)n / (double)b->rate;
    double wait = b->t - now;
    if (wait > 0) {
        struct timespec ts = { .tv_sec = (time_t)wait,
                               .tv_nsec = (long)((wait - (double)(time_t)wait) * 1e9) };
        nanosleep(&ts, NULL);
    }
}

size_t kd_drain_chunk(const kd_drain_bucket *b)
{
    /* At most a tenth of a second of the rate, so that pacing is smooth and a stop is
     * seen soon. */
    uint64_t c = b && b->rate ? b->rate / 10 : DRAIN_CHUNK;
    c = c < 4096 ? 4096 : c > DRAIN_CHUNK ? DRAIN_CHUNK : c;
    return (size_t)(c & ~(uint64_t)4095);
}

/* A buffer of len bytes read into with O_DIRECT (aligned to CK_COPY_OUT_ALIGN). */
static uint8_t *pipe_buf(size_t len)
{
    void *p;
    return posix_memalign(&p, CK_COPY_OUT_ALIGN, len) == 0 ? p : NULL;
}

struct kd_dpipe {
    ck__copy_in *c;
    kd_drain_bucket *bucket;
    ck_engine *e;
    ck_ioq *q;
    uint8_t *buf;                  /* KD_PIPE_SLOTS chunks */
    size_t chunk;
    ck_io io[KD_PIPE_SLOTS];
    bool ready[KD_PIPE_SLOTS];     /* slot's read is whole */
    size_t len[KD_PIPE_SLOTS];     /* the chunk's bytes */
    uint32_t tag[KD_PIPE_SLOTS];   /* the caller's name for the file it is of */
    unsigned flying;               /* reads in the queue */
    uint64_t seq;                  /* the next chunk the caller writes */

    pthread_t th;
    bool th_live;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t written, checked;     /* chunks (under mu) */
    bool closing;                  /* no chunk will come (under mu) */
    bool quit;                     /* the copy is given up: check no more (under mu) */
    int cr;                        /* the checker's error, and where (under mu) */
    uint32_t ctag;
    ck_err cerr;
};

static void *checker(void *arg)
{
    kd_dpipe *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->checked == p->written && !p->closing && !p->quit)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->quit || p->checked == p->written)
            break;
        unsigned s = (unsigned)(p->checked % KD_PIPE_SLOTS);
        pthread_mutex_unlock(&p->mu);
        ck_err e = { 0 };
        int r = ck__copy_in_check(p->c, 0, p->buf + (size_t)s * p->chunk, p->len[s], &e);
        pthread_mutex_lock(&p->mu);
        if (r < 0) {
            p->cr = r;
            p->ctag = p->tag[s];
            p->cerr = e;
            pthread_cond_broadcast(&p->cv);
            break;
        }
        p->checked++;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int kd_dpipe_open(ck__copy_in *c, kd_drain_bucket *bucket, kd_dpipe **out, ck_err *err)
{
    kd_dpipe *p = calloc(1, sizeof *p);
    if (!p)
        return ck_err_set(err, -ENOMEM, "out of memory");
    *p = (kd_dpipe){ .c = c, .bucket = bucket, .e = ck_engine_default(),
                     .chunk = kd_drain_chunk(bucket) };
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    int r = 0;
    if (!(p->buf = pipe_buf(KD_PIPE_SLOTS * p->chunk)))
        r = ck_err_set(err, -ENOMEM, "out of memory");
    else if ((r = p->e->ops->ioq_open(p->e, KD_PIPE_SLOTS, NULL, 0, &p->q)) < 0)
        ck_err_set(err, r, "a queue to read the copy: %s", strerror(-r));
    else if ((r = -pthread_create(&p->th, NULL, checker, p)) < 0)
        ck_err_set(err, r, "starting a checker: %s", strerror(-r));
    p->th_live = r == 0;
    if (r < 0) {
        kd_dpipe_free(p);
        return r;
    }
    *out = p;
    return 0;
}

/* The checker's error, and the file it was in, once it has one. */
static int checker_failed(kd_dpipe *p, uint32_t *bad, ck_err *err)
{
    pthread_mutex_lock(&p->mu);
    int r = p->cr;
    if (r < 0) {
        *bad = p->ctag;
        *err = p->cerr;
    }
    pthread_mutex_unlock(&p->mu);
    return r;
}

/* Whether chunk s may be read into without a wait. */
static bool slot_free(kd_dpipe *p, uint64_t s)
{
    pthread_mutex_lock(&p->mu);
    bool free_now = s < p->checked + KD_PIPE_SLOTS;
    pthread_mutex_unlock(&p->mu);
    return free_now;
}

/* Waits until chunk s may be read into: the checker has done with the chunk that slot
 * held. 0, or the checker's error. */
static int slot_wait(kd_dpipe *p, uint64_t s, uint32_t *bad, ck_err *err)
{
    pthread_mutex_lock(&p->mu);
    while (s >= p->checked + KD_PIPE_SLOTS && p->cr == 0)
        pthread_cond_wait(&p->cv, &p->mu);
    int r = p->cr;
    if (r < 0) {
        *bad = p->ctag;
        *err = p->cerr;
    }
    pthread_mutex_unlock(&p->mu);
    return r;
}

int kd_dpipe_file(kd_dpipe *p, const kd_dpipe_file_in *f, uint32_t *bad, ck_err *err)
{
    bool direct = f->direct;
    uint64_t base = p->seq, n = (f->len + p->chunk - 1) / p->chunk, asked = 0;
    int r = 0;
    for (uint64_t done = 0; r == 0 && done < n;) {
        /* Every chunk from this one on that a slot is free for, at most KD_PIPE_AHEAD
         * past it, is asked for; this one at least, waiting for its slot if it must. */
        while (r == 0 && asked < n && asked <= done + KD_PIPE_AHEAD) {
            uint64_t s = base + asked;
            if (asked > done && !slot_free(p, s))
                break;                 /* a read ahead never waits: asked again later */
            if ((r = slot_wait(p, s, bad, err)) < 0)
                break;
            unsigned k = (unsigned)(s % KD_PIPE_SLOTS);
            uint64_t off = asked * p->chunk;
            size_t want = f->len - off < p->chunk ? (size_t)(f->len - off) : p->chunk;
            p->io[k] = (ck_io){ .fd = f->fd, .buf_index = -1,
                                .buf = p->buf + (size_t)k * p->chunk, .len = (uint32_t)want,
                                .off = off, .user = k };
            p->ready[k] = false;
            p->len[k] = want;
            p->tag[k] = f->tag;
            if ((r = ck__direct_fit(f->fd, &direct, p->io[k].buf, want, off)) < 0 ||
                (r = p->e->ops->ioq_submit(p->q, &p->io[k], 1)) < 0) {
                *bad = f->tag;
                ck_err_set(err, r, "%s: reading it at byte %llu: %s", f->what,
                           (unsigned long long)off, strerror(-r));
                break;
            }
            p->flying++;
            asked++;
        }
        unsigned k = (unsigned)((base + done) % KD_PIPE_SLOTS);
        while (r == 0 && !p->ready[k]) {
            ck_io_done got[KD_PIPE_SLOTS];
            int m = p->e->ops->ioq_reap(p->q, got, KD_PIPE_SLOTS, 1);
            if (m < 0)
                r = ck_err_set(err, m, "%s: waiting for its reads: %s", f->what, strerror(-m));
            for (int i = 0; i < m; i++) {
                unsigned u = (unsigned)got[i].user;
                /* 0: a short read, its rest asked for again (still in the queue). */
                int c = r == 0 ? ck__ioq_complete(p->e, p->q, &p->io[u], got[i].res, f->what,
                                                  err)
                               : -1;
                if (c != 0)
                    p->flying--;
                if (c < 0 && r == 0)
                    r = c;
                p->ready[u] = c == 1;
            }
            if (r < 0)
                *bad = f->tag;
        }
        if (r < 0)
            break;
        kd_drain_pace(p->bucket, p->len[k]);
        if ((r = ck__copy_in_write(p->c, p->buf + (size_t)k * p->chunk, p->len[k], err)) < 0)
            break;
        pthread_mutex_lock(&p->mu);
        p->written++;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        done++;
        p->seq++;
        if (f->wrote)
            f->wrote(f->arg, p->len[k]);
        if (f->stop && f->stop(f->arg))
            r = ck_err_set(err, -ECANCELED, "the daemon is stopping");
        else
            r = checker_failed(p, bad, err);
    }
    return r;
}

int kd_dpipe_end(kd_dpipe *p, uint32_t *bad, ck_err *err)
{
    pthread_mutex_lock(&p->mu);
    p->closing = true;
    pthread_cond_broadcast(&p->cv);
    while (p->checked < p->written && p->cr == 0)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return checker_failed(p, bad, err);
}

void kd_dpipe_free(kd_dpipe *p)
{
    if (!p)
        return;
    if (p->th_live) {
        pthread_mutex_lock(&p->mu);
        /* What is written but not checked yet is not checked: the copy is given up. */
        p->quit = true;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->th, NULL);
    }
    /* Nothing reads into buf once it is freed. A read that came back short is not
     * asked again: what it read is not used. */
    ck_io_done got[KD_PIPE_SLOTS];
    while (p->q && p->flying) {
        int m = p->e->ops->ioq_reap(p->q, got, KD_PIPE_SLOTS, 1);
        if (m <= 0)
            break;
        p->flying -= (unsigned)m;
    }
    if (p->q)
        p->e->ops->ioq_close(p->q);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->buf);
    free(p);
}
