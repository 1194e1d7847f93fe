/* kd_peer_bufs.c - the chunk buffers of peer transfers, used again: a DATA's bytes are
 * read into one on the sending side and received into one on the receiving side
 * (docs/decisions/0186-peer-transfer-pipeline.md).
 *
 * A fresh megabyte per DATA is a megabyte of page faults and zeroing each time (the
 * allocator gives large blocks back to the kernel as they are freed): a fifth of a
 * GET's receiving CPU time here. A pool keeps a few buffers, aligned for O_DIRECT, and
 * is shared by the threads that use them (the UCX thread takes them, a transfer's writer
 * gives them back), so it is locked. A buffer may come back after its owner let go of
 * the pool (a send that completes after its transfer ended): the pool lives until the
 * last one came back.
 */
#include <pthread.h>
#include <stdlib.h>

#include "kd.h"

struct kd_bufs {
    pthread_mutex_t mu;
    size_t size;
    unsigned out;                  /* buffers taken and not yet given back */
    bool orphan;                   /* its owner let go: buffers coming back are freed */
    unsigned keep, nfree;
    void *free[];
};

kd_bufs *kd_bufs_new(size_t size, unsigned keep)
{
    kd_bufs *b = calloc(1, sizeof *b + keep * sizeof b->free[0]);
    if (!b)
        return NULL;
    pthread_mutex_init(&b->mu, NULL);
    b->size = size;
    b->keep = keep;
    return b;
}

static void destroy(kd_bufs *b)
{
    while (b->nfree)
        free(b->free[--b->nfree]);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

void *kd_bufs_get(kd_bufs *b)
{
    void *p = NULL;
    pthread_mutex_lock(&b->mu);
    if (b->nfree)
        p = b->free[--b->nfree];
    b->out++;
    pthread_mutex_unlock(&b->mu);
    if (!p && posix_memalign(&p, KD_PEER_DATA_ALIGN, b->size) != 0)
        p = NULL;
    if (!p)
        kd_bufs_put(b, NULL);
    return p;
}

size_t kd_bufs_size(const kd_bufs *b)
{
    return b->size;
}

void kd_bufs_put(void *pool, void *p)
{
    kd_bufs *b = pool;
    pthread_mutex_lock(&b->mu);
    b->out--;
    if (p && !b->orphan && b->nfree < b->keep) {
        b->free[b->nfree++] = p;
        p = NULL;
    }
    bool last = b->orphan && !b->out;
    pthread_mutex_unlock(&b->mu);
    free(p);
    if (last)
        destroy(b);
}

void kd_bufs_drop(kd_bufs *b)
{
    if (!b)
        return;
    pthread_mutex_lock(&b->mu);
    b->orphan = true;
    bool last = !b->out;
    pthread_mutex_unlock(&b->mu);
    if (last)
        destroy(b);
}
