/* load/rlist.h - the read list under every load: file ranges streamed through one
 * io_uring, and the check of every hash block they touch (private to load/).
 *
 * Ranges are added in any order; neighbours that continue each other in the file and
 * in memory are coalesced, and up to a queue's depth of reads are in flight. When the
 * checkpoint's handle verifies (the default, ck_load_verify), each range is cut at the
 * hash blocks of its file (docs/FORMAT.md): a block the range covers whole is read
 * straight into the destination, a block it covers in part is read whole into a
 * buffer of the handle's block cache and the wanted bytes copied out of it; either
 * way the block is hashed once it has landed (a whole one on the handle's pool),
 * beside the next reads, and compared with the manifest. rlist_finish returns once
 * every read landed and every block it used matched.
 */
#ifndef CK_LOAD_RLIST_H
#define CK_LOAD_RLIST_H

#include <stdbool.h>
#include <stdint.h>

#include "ck/ckpt.h"

typedef struct rlist rlist;
typedef struct ck__vstate ck__vstate;

/* A read list over ck. bounce: O_DIRECT also into memory that is not 4 KiB aligned,
 * through aligned buffers copied out (a batch load); else such reads are buffered. */
int rlist_open(ck_ckpt *ck, bool bounce, rlist **out, ck_err *err);
void rlist_close(rlist *rl);

/* The tensor whose ranges are added from now on, for messages about them. */
void rlist_tensor(rlist *rl, const char *name);

/* Adds the reads of bytes [off, off + len) of shard s into dst. */
int rlist_shard(rlist *rl, const ck_shard *s, uint64_t off, uint64_t len, uint8_t *dst,
                ck_err *err);

/* Waits until every byte added so far is in its destination and every block read
 * since the last finish has been compared with the manifest: 0, the first error, or
 * -EBADMSG naming the checkpoint, the data file, the tensor and the block whose bytes
 * do not match. */
int rlist_finish(rlist *rl, ck_err *err);

/* File reads issued so far (tests check coalescing with it). */
uint64_t rlist_reads(const rlist *rl);

/* ---- a block cache shared by threads ----
 * The handles of a ck_readers (one per thread) share one cache of verified blocks, so
 * that fills running side by side over neighbouring bytes read and hash each block
 * once; each thread hashes what it read itself (its callers already spread over the
 * cores). A handle given one uses it instead of its own until it is closed. */
int ck__vstate_shared(uint32_t block_size, ck__vstate **out);
void ck__vstate_free(ck__vstate *vs);
void ck__vstate_lend(ck_ckpt *ck, ck__vstate *vs);

#endif
