/* io/hash.h - SHA-256 in worker threads.
 *
 * Integrity is per fixed-size block of each data file. Hashing runs on a pool of
 * threads so that it overlaps the I/O of a save and scales over cores in a deep
 * verify; one job is one block, hashed with OpenSSL's EVP interface.
 */
#ifndef CK_IO_HASH_H
#define CK_IO_HASH_H

#include <stddef.h>
#include <stdint.h>

#define CK_SHA256_LEN 32

typedef struct ck__hashpool ck__hashpool;

/* threads == 0: one per online CPU. */
int ck__hashpool_new(unsigned threads, ck__hashpool **out);
/* Waits for queued jobs, then stops the threads. */
void ck__hashpool_free(ck__hashpool *p);
unsigned ck__hashpool_threads(const ck__hashpool *p);

/* Queues SHA-256 of buf[0, len) into out; done(arg) runs on a worker thread after
 * out is written. buf must stay valid until then. */
int ck__hashpool_submit(ck__hashpool *p, const void *buf, size_t len, uint8_t *out,
                       void (*done)(void *arg), void *arg);

/* Queues fn(arg) to run on a worker: the pool also runs other work that should
 * spread over the cores (the writer's fills). */
int ck__hashpool_run(ck__hashpool *p, void (*fn)(void *arg), void *arg);

/* One-shot SHA-256 on the calling thread. */
int ck__sha256(const void *buf, size_t len, uint8_t out[CK_SHA256_LEN]);

#endif
