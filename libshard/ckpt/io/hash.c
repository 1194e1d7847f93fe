/* hash.c - a pool of SHA-256 workers (see io/hash.h). */
#include "io/hash.h"

#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct job {
    struct job *next;
    void (*fn)(void *arg);      /* a task, or NULL for a hash */
    const void *buf;
    size_t len;
    uint8_t *out;
    void (*done)(void *arg);
    void *arg;
} job;

struct ck__hashpool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *head, *tail;
    bool stop;
    unsigned nthreads;
    pthread_t *threads;
};

int ck__sha256(const void *buf, size_t len, uint8_t out[CK_SHA256_LEN])
{
    unsigned int n = 0;
    return EVP_Digest(buf, len, out, &n, EVP_sha256(), NULL) == 1 ? 0 : -EIO;
}

static void *worker(void *arg)
{
    ck__hashpool *p = arg;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->head && !p->stop)
            pthread_cond_wait(&p->cv, &p->mu);
        job *j = p->head;
        if (!j) {   /* stopping and drained */
            pthread_mutex_unlock(&p->mu);
            break;
        }
        p->head = j->next;
        if (!p->head)
            p->tail = NULL;
        pthread_mutex_unlock(&p->mu);

        if (j->fn) {
            j->fn(j->arg);
            free(j);
            continue;
        }
        unsigned int n = 0;
        bool ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
                  EVP_DigestUpdate(ctx, j->buf, j->len) == 1 &&
                  EVP_DigestFinal_ex(ctx, j->out, &n) == 1;
        if (!ok)   /* only on allocation failure inside OpenSSL; never silently */
            ck__sha256(j->buf, j->len, j->out);
        j->done(j->arg);
        free(j);
    }
    EVP_MD_CTX_free(ctx);
    return NULL;
}

int ck__hashpool_new(unsigned threads, ck__hashpool **out)
{
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (unsigned)n : 1;
    }
    ck__hashpool *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    p->threads = calloc(threads, sizeof *p->threads);
    if (!p->threads) {
        free(p);
        return -ENOMEM;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    for (unsigned i = 0; i < threads; i++) {
        if (pthread_create(&p->threads[i], NULL, worker, p) != 0) {
            p->nthreads = i;
            ck__hashpool_free(p);
            return -EAGAIN;
        }
    }
    p->nthreads = threads;
    *out = p;
    return 0;
}

void ck__hashpool_free(ck__hashpool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p);
}

unsigned ck__hashpool_threads(const ck__hashpool *p)
{
    return p->nthreads;
}

static int enqueue(ck__hashpool *p, job j0)
{
    job *j = malloc(sizeof *j);
    if (!j)
        return -ENOMEM;
    *j = j0;
    pthread_mutex_lock(&p->mu);
    if (p->tail)
        p->tail->next = j;
    else
        p->head = j;
    p->tail = j;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

int ck__hashpool_submit(ck__hashpool *p, const void *buf, size_t len, uint8_t *out,
                       void (*done)(void *arg), void *arg)
{
    return enqueue(p, (job){ .buf = buf, .len = len, .out = out, .done = done, .arg = arg });
}

int ck__hashpool_run(ck__hashpool *p, void (*fn)(void *arg), void *arg)
{
    return enqueue(p, (job){ .fn = fn, .arg = arg });
}
