/* rlist.c - the read list under every load, and the check of the blocks it reads
 * (see load/rlist.h).
 *
 * Verification works on the manifest's hash blocks, so a read that touches a block
 * reads all of it, once:
 *   - a block a coalesced range covers whole lands where the range goes (through the
 *     same O_DIRECT, bounce or buffered reads as an unverified load), and is hashed
 *     there: a dim-0 FSDP shard is mostly such blocks, so verification adds no copy;
 *   - a block a range covers in part (the edges of a shard, small tensors packed
 *     together, rows of a dim-1 reshard) is read whole into an entry of the block
 *     cache; the wanted bytes are copied out as soon as it lands (until then up to
 *     VB_COPIES copies wait in the entry, so reads stay at queue depth), and, once its
 *     hash matched, later ranges of the same handle copy from it without a read.
 * A whole block is hashed on the handle's pool as soon as its last read lands, while
 * the next reads run; a load's trackers (VB_TRACK blocks reading or hashing) bound how
 * far the reads run ahead of the hashing. A cached block is hashed by the thread that
 * read it, when it lands (its reads in flight go on meanwhile). The bytes can be in
 * their destination before their block is checked: the load as a whole fails if one
 * does not match, and what the destination then holds is unspecified, as for any
 * failed load.
 *
 * Threads: a load's rlist is driven by one thread. Pool workers finish hashes, and the
 * threads of a ck_readers share one cache; block states, the load's count of blocks
 * in progress (busy) and its first mismatch are under the cache's mutex, and every
 * change is broadcast on its condition. A thread that waits for a block another one
 * reads first reaps its own reads, so two threads never wait on each other.
 */
#include "load/rlist.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/reader_int.h"
#include "io/hash.h"
#include "io/engine.h"

enum { RL_DEPTH = 64, RL_IO_MAX = 1u << 20, RL_ALIGN = 4096,
       RL_BOUNCE = RL_IO_MAX + 2 * RL_ALIGN };
/* Whole blocks of one load in flight (reading or hashing); partial blocks a handle
 * caches (a ck_readers' threads share more); copies that wait for a cached block. */
enum { VB_TRACK = 128, VB_CACHE = 4, VB_CACHE_SHARED = 8, VB_COPIES = 32 };

typedef struct rl_item {
    uint32_t file;
    uint64_t off;
    uint64_t len;
    uint8_t *dst;
} rl_item;

/* An O_DIRECT read into a bounce buffer, copied out once it has landed. */
typedef struct rl_bounce {
    uint8_t *dst;
    uint32_t skip;        /* bytes of the aligned read before the wanted ones */
    uint32_t len;         /* 0: the slot's read goes straight to its destination */
} rl_bounce;

typedef enum vb_state {
    VB_FREE,              /* holds nothing */
    VB_READING,           /* its owner's reads are in flight */
    VB_HASHING,           /* landed; its owner may copy from it, others wait */
    VB_GOOD,              /* a cache entry whose hash matched: anyone copies from it */
} vb_state;

typedef struct vcopy {
    uint8_t *dst;
    uint32_t at, len;     /* bytes [at, at + len) of the block */
} vcopy;

/* A block being checked: a tracker of a load (its bytes land in the destination) or
 * an entry of the block cache (in buf). */
typedef struct vblk {
    rlist *owner;         /* the load that reads and hashes it (READING, HASHING) */
    vb_state state;       /* under vs->mu */
    uint32_t file;
    uint64_t block;
    uint32_t len;         /* the block's bytes: the last of a file may be short */
    uint8_t *data;        /* where they land: the destination, or buf */
    uint8_t *buf;         /* a cache entry's buffer (block_size bytes, aligned) */
    bool cached;          /* an entry of the cache, not a tracker */
    bool open;            /* the owner is still starting its reads */
    unsigned ios;         /* its reads in flight (owner only) */
    unsigned pins;        /* threads copying out of buf, under vs->mu */
    uint64_t used;        /* last use, for eviction, under vs->mu */
    unsigned ncopies;     /* copies waiting for it to land (owner only) */
    vcopy copies[VB_COPIES];
    uint8_t want[CK_HASH_LEN], got[CK_HASH_LEN];
    char tensor[CK_NAME_MAX];   /* the tensor whose read needed it, for the message */
} vblk;

struct ck__vstate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ck__hashpool *pool;   /* NULL: the thread that read a block hashes it */
    uint32_t block_size;
    unsigned ncache;
    uint64_t tick;
    vblk cache[VB_CACHE_SHARED];
};

/* A read list: file ranges added in order, coalesced when they continue each other
 * in the file and in memory, and streamed through one io_uring: up to RL_DEPTH reads
 * are in flight, and a slot is handed to the next read as soon as its own has landed
 * (and, through a bounce buffer, been copied out), so the device never waits for the
 * slowest read of a batch nor for the copies. With bounce buffers (a batch load),
 * ranges whose destination is not 4 KiB aligned are read with O_DIRECT too, into
 * aligned buffers: the page cache's path runs at about half the device's read speed. */
struct rlist {
    ck_ckpt *ck;
    ck_ioq *q;
    rl_item pending;      /* the range being grown by coalescing */
    bool have;
    ck_io ios[RL_DEPTH];  /* per slot: its read in flight */
    rl_bounce bc[RL_DEPTH];
    vblk *blk[RL_DEPTH];  /* per slot: the block its read belongs to, or NULL */
    unsigned free_slots[RL_DEPTH], nfree;
    uint64_t reads;       /* file reads issued */
    int failed;           /* the first failure; its message is in the caller's err */
    uint8_t *bounce;      /* RL_DEPTH buffers of RL_BOUNCE bytes, or NULL */
    vblk *cur;            /* the block whose reads are being started */
    char tensor[CK_NAME_MAX];       /* the tensor of the pending range */
    char next_tensor[CK_NAME_MAX];  /* the tensor of the ranges being added */
    /* Verification; vs is NULL when the reads are not checked. */
    ck__vstate *vs;
    vblk *trk;            /* VB_TRACK trackers */
    unsigned busy;        /* own blocks reading or hashing, under vs->mu */
    bool bad;             /* under vs->mu: the first block that did not match */
    uint32_t bad_file, bad_len;
    uint64_t bad_block;
    char bad_tensor[CK_NAME_MAX];
};

/* ---- block states ---- */

static int vstate_new(uint32_t block_size, unsigned ncache, bool pool, ck__vstate **out)
{
    ck__vstate *vs = calloc(1, sizeof *vs);
    if (!vs)
        return -ENOMEM;
    if (pool) {
        /* A pool per handle, hashing as fast as the device reads (SHA-256 runs at about
         * 1.5-2 GB/s a core): more threads than cores would only contend. */
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        int r = ck__hashpool_new(n > 8 ? 8 : n > 0 ? (unsigned)n : 1, &vs->pool);
        if (r < 0) {
            free(vs);
            return r;
        }
    }
    pthread_mutex_init(&vs->mu, NULL);
    pthread_cond_init(&vs->cv, NULL);
    vs->block_size = block_size;
    vs->ncache = ncache;
    for (unsigned i = 0; i < ncache; i++)
        vs->cache[i].cached = true;
    *out = vs;
    return 0;
}

int ck__vstate_shared(uint32_t block_size, ck__vstate **out)
{
    return vstate_new(block_size, VB_CACHE_SHARED, false, out);
}

void ck__vstate_free(ck__vstate *vs)
{
    if (!vs)
        return;
    ck__hashpool_free(vs->pool);     /* waits for the hashes queued */
    for (unsigned i = 0; i < vs->ncache; i++)
        free(vs->cache[i].buf);
    pthread_mutex_destroy(&vs->mu);
    pthread_cond_destroy(&vs->cv);
    free(vs);
}

void ck__vstate_lend(ck_ckpt *ck, ck__vstate *vs)
{
    if (ck->vs_free)
        ck->vs_free(ck->vs);
    ck->vs = vs;
    ck->vs_free = NULL;
}

/* What became of a block of ours. */
enum { V_MATCHED, V_MISMATCH, V_DROPPED };

/* A block of ours is done (owner or pool thread): a cache entry that matched is kept
 * for anyone to copy from; a bad block never is (the next load reads it again), nor
 * one whose reads failed (its bytes are not whole). */
static void blk_done(rlist *rl, vblk *b, int verdict)
{
    ck__vstate *vs = rl->vs;
    pthread_mutex_lock(&vs->mu);
    if (verdict == V_MISMATCH && !rl->bad) {
        rl->bad = true;
        rl->bad_file = b->file;
        rl->bad_block = b->block;
        rl->bad_len = b->len;
        memcpy(rl->bad_tensor, b->tensor, sizeof rl->bad_tensor);
    }
    b->state = b->cached && verdict == V_MATCHED ? VB_GOOD : VB_FREE;
    b->ncopies = 0;
    rl->busy--;
    pthread_cond_broadcast(&vs->cv);
    pthread_mutex_unlock(&vs->mu);
}

static void on_hashed(void *arg)
{
    vblk *b = arg;
    blk_done(b->owner, b, memcmp(b->got, b->want, CK_HASH_LEN) == 0 ? V_MATCHED : V_MISMATCH);
}

/* Every read of b landed: its waiting copies go out and its hash starts. After a
 * failed read the block is dropped unhashed (the load fails anyway). */
static void blk_landed(rlist *rl, vblk *b)
{
    if (rl->failed) {
        blk_done(rl, b, V_DROPPED);
        return;
    }
    for (unsigned i = 0; i < b->ncopies; i++)
        memcpy(b->copies[i].dst, b->buf + b->copies[i].at, b->copies[i].len);
    b->ncopies = 0;
    pthread_mutex_lock(&rl->vs->mu);
    b->state = VB_HASHING;
    pthread_mutex_unlock(&rl->vs->mu);
    /* A cached block is hashed here: it is one of few (the edges of ranges), and the
     * next range that needs its entry must not wait behind the pool's queue. */
    if (!b->cached && rl->vs->pool &&
        ck__hashpool_submit(rl->vs->pool, b->data, b->len, b->got, on_hashed, b) == 0)
        return;
    ck__sha256(b->data, b->len, b->got);
    on_hashed(b);
}

static void blk_io_done(rlist *rl, vblk *b)
{
    if (--b->ios == 0 && !b->open)
        blk_landed(rl, b);
}

/* ---- the reads ---- */

int rlist_open(ck_ckpt *ck, bool bounce, rlist **out, ck_err *err)
{
    rlist *rl = calloc(1, sizeof *rl);
    if (!rl)
        return ck_err_set(err, -ENOMEM, "%s: out of memory for a read list", ck->dir);
    rl->ck = ck;
    int r = 0;
    if (bounce && posix_memalign((void **)&rl->bounce, RL_ALIGN, (size_t)RL_DEPTH * RL_BOUNCE))
        r = ck_err_set(err, -ENOMEM, "%s: out of memory for read buffers", ck->dir);
    if (r == 0 && ck->info.hashed && !ck->no_verify) {
        if (!ck->vs) {
            if ((r = vstate_new(ck->info.block_size, VB_CACHE, true, &ck->vs)) < 0)
                ck_err_set(err, r, "%s: starting the hash threads: %s", ck->dir, strerror(-r));
            else
                ck->vs_free = ck__vstate_free;
        }
        rl->vs = ck->vs;
        if (r == 0 && !(rl->trk = calloc(VB_TRACK, sizeof *rl->trk)))
            r = ck_err_set(err, -ENOMEM, "%s: out of memory for a read list", ck->dir);
    }
    if (r == 0 && (r = ck->engine->ops->ioq_open(ck->engine, RL_DEPTH, NULL, 0, &rl->q)) < 0)
        ck_err_set(err, r, "io_uring: %s", strerror(-r));
    if (r < 0) {
        free(rl->trk);
        free(rl->bounce);
        free(rl);
        return r;
    }
    for (unsigned i = 0; i < RL_DEPTH; i++)
        rl->free_slots[i] = RL_DEPTH - 1 - i;
    rl->nfree = RL_DEPTH;
    *out = rl;
    return 0;
}

/* Waits for at least min_done reads, copies out what landed in bounce buffers, frees
 * their slots and lands the blocks whose last read it was. After a failure the rest
 * are still reaped (the kernel must be done with every buffer before it is freed), but
 * nothing more is copied. */
static int rl_reap(rlist *rl, unsigned min_done, ck_err *err)
{
    ck_engine *e = rl->ck->engine;
    ck_io_done done[RL_DEPTH];
    int got = e->ops->ioq_reap(rl->q, done, RL_DEPTH, min_done);
    if (got < 0) {
        /* The ring itself failed: nothing more will complete. */
        if (!rl->failed)
            rl->failed = ck_err_set(err, got, "%s: waiting for reads: %s", rl->ck->dir,
                                    strerror(-got));
        rl->nfree = RL_DEPTH;
        for (unsigned i = 0; i < RL_DEPTH; i++) {
            rl->free_slots[i] = i;
            vblk *b = rl->blk[i];
            rl->blk[i] = NULL;
            if (b)
                blk_io_done(rl, b);
        }
        return rl->failed;
    }
    for (int j = 0; j < got; j++) {
        unsigned s = (unsigned)done[j].user;
        int r = 1;
        if (!rl->failed) {
            r = ck__ioq_complete(e, rl->q, &rl->ios[s], done[j].res, rl->ck->dir, err);
            if (r < 0)
                rl->failed = r;
        }
        if (r == 0)
            continue;     /* the rest of a short read is in flight in the same slot */
        if (r > 0 && !rl->failed && rl->bc[s].len)
            memcpy(rl->bc[s].dst, rl->bounce + (size_t)s * RL_BOUNCE + rl->bc[s].skip,
                   rl->bc[s].len);
        rl->bc[s].len = 0;
        rl->free_slots[rl->nfree++] = s;
        vblk *b = rl->blk[s];
        rl->blk[s] = NULL;
        if (b)
            blk_io_done(rl, b);
    }
    return rl->failed;
}

/* A free slot, waiting for a read to land when all are in flight. */
static int rl_slot(rlist *rl, ck_err *err)
{
    while (rl->nfree == 0) {
        int r = rl_reap(rl, 1, err);
        if (r < 0)
            return r;
    }
    return (int)rl->free_slots[--rl->nfree];
}

/* Starts slot s's read (ios[s] and bc[s] filled in), for the block being started. */
static int rl_start(rlist *rl, unsigned s, ck_err *err)
{
    rl->ios[s].user = s;
    rl->reads++;
    int r = rl->ck->engine->ops->ioq_submit(rl->q, &rl->ios[s], 1);
    if (r < 0) {
        rl->bc[s].len = 0;
        rl->free_slots[rl->nfree++] = s;
        return rl->failed = ck_err_set(err, r, "%s: submitting reads: %s", rl->ck->dir,
                                       strerror(-r));
    }
    if ((rl->blk[s] = rl->cur))
        rl->cur->ios++;
    return 0;
}

/* Waits for every read in flight. */
static int rl_drain(rlist *rl, ck_err *err)
{
    while (rl->nfree < RL_DEPTH)
        rl_reap(rl, 1, err);
    int r = rl->failed;
    rl->failed = 0;
    return r;
}

/* Reads [foff, foff + chunk) into d through a bounce buffer: the aligned range around
 * it, with O_DIRECT, when that range lies inside the file; 0 when it does not (the
 * caller reads buffered), 1 when started. */
static int rl_bounced(rlist *rl, uint32_t file, uint64_t foff, uint32_t chunk, uint8_t *d,
                      ck_err *err)
{
    uint64_t a = foff & ~(uint64_t)(RL_ALIGN - 1);
    uint64_t b = (foff + chunk + RL_ALIGN - 1) & ~(uint64_t)(RL_ALIGN - 1);
    if (!rl->bounce || b > rl->ck->files[file].size)
        return 0;
    int fd = ck__data_fd(rl->ck, file, true, err);
    if (fd == NO_DIRECT)
        return 0;
    if (fd < 0)
        return fd;
    int s = rl_slot(rl, err);
    if (s < 0)
        return s;
    rl->bc[s] = (rl_bounce){ .dst = d, .skip = (uint32_t)(foff - a), .len = chunk };
    rl->ios[s] = (ck_io){ .fd = fd, .write = false, .buf_index = -1,
                          .buf = rl->bounce + (size_t)s * RL_BOUNCE,
                          .len = (uint32_t)(b - a), .off = a };
    int r = rl_start(rl, (unsigned)s, err);
    return r < 0 ? r : 1;
}

/* Splits a range into reads of at most RL_IO_MAX: O_DIRECT for the aligned body; what
 * alignment forbids through a bounce buffer where the list has them, else buffered. */
static int rl_read(rlist *rl, const rl_item *it, ck_err *err)
{
    uint64_t done = 0;
    while (done < it->len) {
        uint64_t foff = it->off + done;
        uint8_t *d = it->dst + done;
        uint64_t left = it->len - done;
        uint32_t chunk = (uint32_t)(left < RL_IO_MAX ? left : RL_IO_MAX);
        bool aligned = ((uintptr_t)d % RL_ALIGN) == 0 && foff % RL_ALIGN == 0 && chunk >= RL_ALIGN;
        int r;
        if (aligned) {
            chunk -= chunk % RL_ALIGN;
        } else if ((r = rl_bounced(rl, it->file, foff, chunk, d, err)) != 0) {
            if (r < 0)
                return r;
            done += chunk;
            continue;
        }
        int fd = aligned ? ck__data_fd(rl->ck, it->file, true, err) : NO_DIRECT;
        if (fd == NO_DIRECT)
            fd = ck__data_fd(rl->ck, it->file, false, err);
        if (fd < 0)
            return fd;
        int s = rl_slot(rl, err);
        if (s < 0)
            return s;
        rl->ios[s] = (ck_io){ .fd = fd, .write = false, .buf_index = -1, .buf = d,
                              .len = chunk, .off = foff };
        if ((r = rl_start(rl, (unsigned)s, err)) < 0)
            return r;
        done += chunk;
    }
    return 0;
}

/* ---- verified reads ---- */

/* Starts the reads of block b (claimed: READING, ours, open) into b->data. */
static int blk_fetch(rlist *rl, vblk *b, ck_err *err)
{
    ck_ckpt *ck = rl->ck;
    uint64_t at = b->block * rl->vs->block_size;
    int r = 0;
    if (b->cached && !b->buf &&
        posix_memalign((void **)&b->buf, RL_ALIGN, rl->vs->block_size) != 0)
        r = ck_err_set(err, -ENOMEM, "%s: out of memory for a block buffer", ck->dir);
    if (b->cached)
        b->data = b->buf;
    memcpy(b->tensor, rl->tensor, sizeof b->tensor);
    if (r == 0 && (r = ck_hash_get(ck, b->file, b->block, b->want, err)) == -ENOENT)
        r = ck_err_set(err, -EBADMSG, "%s: the checkpoint says its blocks are hashed",
                       ck->dir);
    if (r == 0) {
        rl->cur = b;
        r = rl_read(rl, &(rl_item){ .file = b->file, .off = at, .len = b->len,
                                    .dst = b->data }, err);
        rl->cur = NULL;
    }
    if (r < 0 && !rl->failed)
        rl->failed = r;
    b->open = false;
    if (b->ios == 0)
        blk_landed(rl, b);
    return r;
}

/* Marks b, a free block, as ours and being read (under vs->mu). */
static void blk_claim(rlist *rl, vblk *b, uint32_t file, uint64_t block, uint32_t len)
{
    *b = (vblk){ .owner = rl, .state = VB_READING, .file = file, .block = block, .len = len,
                 .buf = b->buf, .cached = b->cached, .open = true, .used = ++rl->vs->tick };
    rl->busy++;
}

/* Block `block` of file, covered whole by a range into dst: read in place, hashed there. */
static int rl_whole(rlist *rl, uint32_t file, uint64_t block, uint8_t *dst, uint32_t len,
                    ck_err *err)
{
    ck__vstate *vs = rl->vs;
    vblk *t = NULL;
    pthread_mutex_lock(&vs->mu);
    while (!t) {
        for (unsigned i = 0; i < VB_TRACK && !t; i++)
            if (rl->trk[i].state == VB_FREE)
                t = &rl->trk[i];
        if (t)
            break;
        /* Every tracker is reading or hashing: wait for one. */
        if (rl->nfree < RL_DEPTH) {
            pthread_mutex_unlock(&vs->mu);
            int r = rl_reap(rl, 1, err);
            if (r < 0)
                return r;
            pthread_mutex_lock(&vs->mu);
        } else {
            pthread_cond_wait(&vs->cv, &vs->mu);
        }
    }
    blk_claim(rl, t, file, block, len);
    pthread_mutex_unlock(&vs->mu);
    t->data = dst;
    return blk_fetch(rl, t, err);
}

static vblk *cache_find(ck__vstate *vs, uint32_t file, uint64_t block)
{
    for (unsigned i = 0; i < vs->ncache; i++) {
        vblk *e = &vs->cache[i];
        if (e->state != VB_FREE && e->file == file && e->block == block)
            return e;
    }
    return NULL;
}

/* An entry to reuse: a free one, else the least recently used good one nobody is
 * copying from; NULL when every entry is being read or hashed. */
static vblk *cache_victim(ck__vstate *vs)
{
    vblk *v = NULL;
    for (unsigned i = 0; i < vs->ncache; i++) {
        vblk *e = &vs->cache[i];
        if (e->state == VB_FREE)
            return e;
        if (e->state == VB_GOOD && e->pins == 0 && (!v || e->used < v->used))
            v = e;
    }
    return v;
}

/* Bytes [at, at + n) of block `block` of file, into dst, through the block cache. */
static int rl_part(rlist *rl, uint32_t file, uint64_t block, uint32_t blen, uint32_t at,
                   uint32_t n, uint8_t *dst, ck_err *err)
{
    ck__vstate *vs = rl->vs;
    int r = 0;
    pthread_mutex_lock(&vs->mu);
    for (;;) {
        vblk *e = cache_find(vs, file, block);
        bool mine = e && e->owner == rl && e->state != VB_GOOD;
        if (e && (e->state == VB_GOOD || (mine && e->state == VB_HASHING))) {
            e->pins++;
            e->used = ++vs->tick;
            pthread_mutex_unlock(&vs->mu);
            memcpy(dst, e->buf + at, n);
            pthread_mutex_lock(&vs->mu);
            if (--e->pins == 0)
                pthread_cond_broadcast(&vs->cv);
            break;
        }
        if (mine && e->ncopies < VB_COPIES) {   /* ours, still being read */
            e->copies[e->ncopies++] = (vcopy){ .dst = dst, .at = at, .len = n };
            break;
        }
        if (!e && (e = cache_victim(vs))) {
            blk_claim(rl, e, file, block, blen);
            pthread_mutex_unlock(&vs->mu);
            r = blk_fetch(rl, e, err);
            pthread_mutex_lock(&vs->mu);
            if (r < 0)
                break;
            continue;     /* now place the bytes */
        }
        /* The block (or a free entry) waits for reads or hashes: ours first. */
        if (rl->nfree < RL_DEPTH) {
            pthread_mutex_unlock(&vs->mu);
            r = rl_reap(rl, 1, err);
            pthread_mutex_lock(&vs->mu);
            if (r < 0)
                break;
        } else {
            pthread_cond_wait(&vs->cv, &vs->mu);
        }
    }
    pthread_mutex_unlock(&vs->mu);
    return r;
}

/* Starts a coalesced range: as it is, or cut at the hash blocks it touches. */
static int rl_issue(rlist *rl, const rl_item *it, ck_err *err)
{
    if (rl->failed)
        return rl->failed;    /* the load has failed: read nothing more */
    if (!rl->vs)
        return rl_read(rl, it, err);
    uint64_t bs = rl->vs->block_size, size = rl->ck->files[it->file].size;
    uint64_t off = it->off, left = it->len;
    uint8_t *dst = it->dst;
    while (left > 0) {
        uint64_t block = off / bs, b0 = block * bs, b1 = b0 + bs < size ? b0 + bs : size;
        uint64_t n = left < b1 - off ? left : b1 - off;
        int r = off == b0 && n == b1 - b0
              ? rl_whole(rl, it->file, block, dst, (uint32_t)n, err)
              : rl_part(rl, it->file, block, (uint32_t)(b1 - b0), (uint32_t)(off - b0),
                        (uint32_t)n, dst, err);
        if (r < 0)
            return r;
        off += n;
        dst += n;
        left -= n;
    }
    return 0;
}

static int rlist_add(rlist *rl, uint32_t file, uint64_t off, uint64_t len, uint8_t *dst,
                     ck_err *err)
{
    if (len == 0)
        return 0;
    rl_item *p = &rl->pending;
    if (rl->have && p->file == file && p->off + p->len == off && p->dst + p->len == dst) {
        p->len += len;
        return 0;
    }
    if (rl->have) {
        rl->have = false;
        int r = rl_issue(rl, p, err);
        if (r < 0)
            return r;
    }
    *p = (rl_item){ .file = file, .off = off, .len = len, .dst = dst };
    rl->have = true;
    if (rl->vs && strcmp(rl->tensor, rl->next_tensor) != 0)
        memcpy(rl->tensor, rl->next_tensor, sizeof rl->tensor);
    return 0;
}

int rlist_shard(rlist *rl, const ck_shard *s, uint64_t off, uint64_t len, uint8_t *dst,
                ck_err *err)
{
    uint64_t pos = 0;
    for (uint32_t i = 0; i < s->n_extents && len > 0; i++) {
        const ck_extent *e = &s->ext[i];
        if (off >= pos + e->len) {
            pos += e->len;
            continue;
        }
        uint64_t in = off - pos, n = e->len - in < len ? e->len - in : len;
        int r = rlist_add(rl, e->file, e->off + in, n, dst, err);
        if (r < 0)
            return r;
        dst += n;
        off += n;
        len -= n;
        pos += e->len;
    }
    if (len > 0)
        return ck_err_set(err, -EBADMSG, "shard %u of tensor %u: its extents end before byte %llu",
                          s->idx, s->tensor, (unsigned long long)off);
    return 0;
}

void rlist_tensor(rlist *rl, const char *name)
{
    snprintf(rl->next_tensor, sizeof rl->next_tensor, "%s", name);
}

/* Waits until every byte added so far is in its destination. */
static int rl_landed(rlist *rl, ck_err *err)
{
    int r = 0;
    if (rl->have) {
        rl->have = false;
        r = rl_issue(rl, &rl->pending, err);
    }
    int r2 = rl_drain(rl, err);
    return r < 0 ? r : r2;
}

/* Waits until none of our blocks is being read or hashed. */
static void rl_settle(rlist *rl)
{
    ck_err ignored = { 0 };
    rl_drain(rl, &ignored);
    if (!rl->vs)
        return;
    pthread_mutex_lock(&rl->vs->mu);
    while (rl->busy > 0)
        pthread_cond_wait(&rl->vs->cv, &rl->vs->mu);
    pthread_mutex_unlock(&rl->vs->mu);
}

int rlist_finish(rlist *rl, ck_err *err)
{
    int r = rl_landed(rl, err);
    if (!rl->vs)
        return r;
    rl_settle(rl);
    pthread_mutex_lock(&rl->vs->mu);
    bool bad = rl->bad;
    rl->bad = false;
    pthread_mutex_unlock(&rl->vs->mu);
    if (bad && r == 0) {
        uint64_t a = rl->bad_block * rl->vs->block_size;
        r = ck_err_set(err, -EBADMSG, "checkpoint %s: data file %s, block %llu (bytes "
                       "%llu-%llu), read for tensor %s: SHA-256 mismatch, these are not "
                       "the bytes that were saved (ckpt-verify --deep lists every bad "
                       "block)", rl->ck->dir, rl->ck->files[rl->bad_file].name,
                       (unsigned long long)rl->bad_block, (unsigned long long)a,
                       (unsigned long long)(a + rl->bad_len), rl->bad_tensor);
    }
    return r;
}

uint64_t rlist_reads(const rlist *rl)
{
    return rl->reads;
}

void rlist_close(rlist *rl)
{
    if (!rl)
        return;
    rl_settle(rl);     /* only after an error path: buffers must be idle */
    rl->ck->engine->ops->ioq_close(rl->q);
    free(rl->trk);
    free(rl->bounce);
    free(rl);
}
