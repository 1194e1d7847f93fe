/* load.c - reading any part of a tensor onto any mesh (see ck/load.h).
 *
 * Wanted bytes become file reads in three steps: the wanted byte range of the target
 * box is cut into at most 2*ndim sub-boxes, each contiguous in the destination;
 * each sub-box is intersected with every saved shard and walked as runs contiguous
 * on both sides (ck__runs); each run is mapped through the shard's extents to file
 * ranges. The read list coalesces ranges that continue each other in the file and
 * in memory, and runs them through one io_uring.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck/load.h"
#include "format/reader_int.h"
#include "model/layout.h"
#include "io/engine.h"

enum { RL_DEPTH = 64, RL_IO_MAX = 1u << 20, RL_ALIGN = 4096 };

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

/* A read list: file ranges added in order, coalesced when they continue each other
 * in the file and in memory, and streamed through one io_uring: up to RL_DEPTH reads
 * are in flight, and a slot is handed to the next read as soon as its own has landed
 * (and, through a bounce buffer, been copied out), so the device never waits for the
 * slowest read of a batch nor for the copies. With bounce buffers (a batch load),
 * ranges whose destination is not 4 KiB aligned are read with O_DIRECT too, into
 * aligned buffers: the page cache's path runs at about half the device's read speed. */
typedef struct rlist {
    ck_ckpt *ck;
    ck_ioq *q;
    rl_item pending;      /* the range being grown by coalescing */
    bool have;
    ck_io ios[RL_DEPTH];  /* per slot: its read in flight */
    rl_bounce bc[RL_DEPTH];
    unsigned free_slots[RL_DEPTH], nfree;
    uint64_t reads;       /* file reads issued */
    int failed;           /* the first failure; its message is in the caller's err */
    uint8_t *bounce;      /* RL_DEPTH buffers of RL_BOUNCE bytes, or NULL */
} rlist;

enum { RL_BOUNCE = RL_IO_MAX + 2 * RL_ALIGN };

static int rlist_open(ck_ckpt *ck, rlist **out, ck_err *err)
{
    rlist *rl = calloc(1, sizeof *rl);
    if (!rl)
        return -ENOMEM;
    rl->ck = ck;
    int r = ck->engine->ops->ioq_open(ck->engine, RL_DEPTH, NULL, 0, &rl->q);
    if (r < 0) {
        free(rl);
        return ck_err_set(err, r, "io_uring: %s", strerror(-r));
    }
    for (unsigned i = 0; i < RL_DEPTH; i++)
        rl->free_slots[i] = RL_DEPTH - 1 - i;
    rl->nfree = RL_DEPTH;
    *out = rl;
    return 0;
}

/* Waits for at least min_done reads, copies out what landed in bounce buffers and
 * frees their slots. After a failure the rest are still reaped (the kernel must be
 * done with every buffer before it is freed), but nothing more is copied. */
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
        for (unsigned i = 0; i < RL_DEPTH; i++)
            rl->free_slots[i] = i;
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

/* Starts slot s's read (ios[s] and bc[s] filled in). */
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

static void rlist_close(rlist *rl)
{
    if (!rl)
        return;
    ck_err ignored = {0};
    rl_drain(rl, &ignored);     /* only after an error path: buffers must be idle */
    rl->ck->engine->ops->ioq_close(rl->q);
    free(rl->bounce);
    free(rl);
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

/* Splits one coalesced range into reads of at most RL_IO_MAX: O_DIRECT for the
 * aligned body; what alignment forbids through a bounce buffer where the list has
 * them, else buffered. */
static int rl_issue(rlist *rl, const rl_item *it, ck_err *err)
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

static int rlist_add(rlist *rl, uint32_t file, uint64_t off, uint64_t len, void *dst,
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
        int r = rl_issue(rl, p, err);
        if (r < 0)
            return r;
    }
    *p = (rl_item){ .file = file, .off = off, .len = len, .dst = dst };
    rl->have = true;
    return 0;
}

static int rlist_flush(rlist *rl, ck_err *err)
{
    int r = 0;
    if (rl->have)
        r = rl_issue(rl, &rl->pending, err);
    rl->have = false;
    int r2 = rl_drain(rl, err);
    return r < 0 ? r : r2;
}

/* Adds the reads of bytes [off, off+len) of shard s into dst. */
static int rlist_shard(rlist *rl, const ck_shard *s, uint64_t off, uint64_t len, uint8_t *dst,
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

struct ck_reader {
    ck_ckpt *ck;
    ck_tensor t;
    ck_shard *sh;
    uint32_t nsh;
    rlist *rl;
    bool own_rl;          /* a batch load's readers share the batch's list */
    uint64_t last_reads;
};

/* A reader of tensor whose reads go to rl, or to a list of its own when rl is NULL. */
static int reader_open(ck_ckpt *ck, const char *tensor, rlist *rl, ck_reader **out,
                       ck_err *err)
{
    ck_reader *rd = calloc(1, sizeof *rd);
    if (!rd)
        return -ENOMEM;
    rd->ck = ck;
    rd->rl = rl;
    int r = ck_tensor_get(ck, tensor, &rd->t, err);
    if (r == 0)
        r = ck_shards_get(ck, &rd->t, &rd->sh, &rd->nsh, err);
    if (r == 0 && !rl && (r = rlist_open(ck, &rd->rl, err)) == 0)
        rd->own_rl = true;
    if (r < 0) {
        ck_reader_close(rd);
        return r;
    }
    *out = rd;
    return 0;
}

int ck_reader_open(ck_ckpt *ck, const char *tensor, ck_reader **out, ck_err *err)
{
    return reader_open(ck, tensor, NULL, out, err);
}

void ck_reader_close(ck_reader *rd)
{
    if (!rd)
        return;
    if (rd->own_rl)
        rlist_close(rd->rl);
    free(rd->sh);
    free(rd);
}

const ck_tensor *ck_reader_tensor(const ck_reader *rd)
{
    return &rd->t;
}

uint64_t ck_reader_last_reads(const ck_reader *rd)
{
    return rd->last_reads;
}

/* Reads sub (a box in global coordinates whose elements are contiguous in the
 * destination, in row-major order) from every saved shard it meets. */
static int read_subbox(ck_reader *rd, const ck_box *sub, uint8_t *dst, ck_err *err)
{
    size_t is = ck_dtype_size(rd->t.dtype);
    uint64_t want = ck_box_numel(sub), got = 0;
    for (uint32_t i = 0; i < rd->nsh; i++) {
        ck_box x;
        if (!ck__box_intersect(sub, &rd->sh[i].box, &x))
            continue;
        ck__runs it;
        ck__runs_init(&it, &x, &rd->sh[i].box, sub);
        uint64_t so, d, n;
        while (ck__runs_next(&it, &so, &d, &n)) {
            int r = rlist_shard(rd->rl, &rd->sh[i], so * is, n * is, dst + d * is, err);
            if (r < 0)
                return r;
            got += n;
        }
    }
    if (got != want)
        return ck_err_set(err, -EBADMSG, "tensor %s: the saved shards cover %llu of the %llu "
                          "elements asked for", rd->t.name, (unsigned long long)got,
                          (unsigned long long)want);
    return 0;
}

/* Cuts elements [a, b) of box's row-major storage into sub-boxes, each contiguous
 * there, and reads each. dims [d, ndim) are free; the earlier ones are fixed in cur. */
static int decompose(ck_reader *rd, const ck_box *box, ck_box *cur, int d, uint64_t a,
                     uint64_t b, uint8_t *dst, ck_err *err)
{
    if (a >= b)
        return 0;
    int n = box->ndim;
    if (d == n) {   /* 0-D: the single element */
        return read_subbox(rd, cur, dst, err);
    }
    uint64_t inner = 1;
    for (int k = d + 1; k < n; k++)
        inner *= box->len[k];
    size_t is = ck_dtype_size(rd->t.dtype);
    uint64_t ra = a / inner, rb = b / inner;
    int r;
    if (ra == rb) {   /* inside one slice of dim d */
        cur->off[d] = box->off[d] + ra;
        cur->len[d] = 1;
        return decompose(rd, box, cur, d + 1, a - ra * inner, b - ra * inner, dst, err);
    }
    if (a % inner) {  /* head: the end of slice ra */
        cur->off[d] = box->off[d] + ra;
        cur->len[d] = 1;
        if ((r = decompose(rd, box, cur, d + 1, a % inner, inner, dst, err)) < 0)
            return r;
        dst += (inner - a % inner) * is;
        ra++;
    }
    if (rb > ra) {    /* whole slices [ra, rb) */
        ck_box mid = *cur;
        mid.off[d] = box->off[d] + ra;
        mid.len[d] = rb - ra;
        for (int k = d + 1; k < n; k++) {
            mid.off[k] = box->off[k];
            mid.len[k] = box->len[k];
        }
        if ((r = read_subbox(rd, &mid, dst, err)) < 0)
            return r;
        dst += (rb - ra) * inner * is;
    }
    if (b % inner) {  /* tail: the start of slice rb */
        cur->off[d] = box->off[d] + rb;
        cur->len[d] = 1;
        if ((r = decompose(rd, box, cur, d + 1, 0, b % inner, dst, err)) < 0)
            return r;
    }
    return 0;
}

/* Checks a read of bytes [off, off + len) of box's storage; 0 or -EINVAL. */
static int read_check(const ck_reader *rd, const ck_box *box, uint64_t off, uint64_t len,
                      ck_err *err)
{
    const ck_tensor *t = &rd->t;
    size_t is = ck_dtype_size(t->dtype);
    if (box->ndim != t->ndim)
        return ck_err_set(err, -EINVAL, "tensor %s: a %d-D box for a %d-D tensor", t->name,
                          box->ndim, t->ndim);
    for (int d = 0; d < t->ndim; d++)
        if (box->off[d] > t->shape[d] || box->len[d] > t->shape[d] - box->off[d])
            return ck_err_set(err, -EINVAL, "tensor %s: the box asked for lies outside its shape",
                              t->name);
    uint64_t bytes = ck_box_numel(box) * is;
    if (off % is || len % is || off > bytes || len > bytes - off)
        return ck_err_set(err, -EINVAL, "tensor %s: bytes [%llu, +%llu) are not whole elements "
                          "of the %llu-byte box", t->name, (unsigned long long)off,
                          (unsigned long long)len, (unsigned long long)bytes);
    return 0;
}

int ck_reader_read(ck_reader *rd, const ck_box *box, uint64_t off, uint64_t len, void *dst,
                   ck_err *err)
{
    const ck_tensor *t = &rd->t;
    size_t is = ck_dtype_size(t->dtype);
    int rc = read_check(rd, box, off, len, err);
    if (rc < 0)
        return rc;
    uint64_t before = rd->rl->reads;
    ck_box cur = *box;
    int r = decompose(rd, box, &cur, 0, off / is, (off + len) / is, dst, err);
    int r2 = rlist_flush(rd->rl, err);
    rd->last_reads = rd->rl->reads - before;
    if (r < 0)
        return r;
    return r2;
}

int ck_reader_read_shard(ck_reader *rd, const ck_mesh *mesh, const ck_placement *pl,
                         uint64_t rank, void *dst, ck_err *err)
{
    const ck_tensor *t = &rd->t;
    int r = ck__layout_check(t->name, t->ndim, t->shape, ck_dtype_size(t->dtype), mesh, pl, err);
    if (r < 0)
        return r;
    if (rank >= ck_mesh_world(mesh))
        return ck_err_set(err, -EINVAL, "tensor %s: rank %llu is outside the target mesh",
                          t->name, (unsigned long long)rank);
    uint32_t coord[CK_MAX_MESH_DIMS];
    ck_box box;
    ck_mesh_coord(mesh, rank, coord);
    ck_shard_box(t->ndim, t->shape, mesh, pl, coord, &box);
    return ck_reader_read(rd, &box, 0, ck_box_numel(&box) * ck_dtype_size(t->dtype), dst, err);
}

int ck_load_many(ck_ckpt *ck, const ck_load_item *items, size_t n, ck_err *err)
{
    rlist *rl;
    int r = rlist_open(ck, &rl, err);
    if (r < 0)
        return r;
    if (posix_memalign((void **)&rl->bounce, RL_ALIGN, (size_t)RL_DEPTH * RL_BOUNCE)) {
        rlist_close(rl);
        return ck_err_set(err, -ENOMEM, "%s: out of memory for read buffers", ck->dir);
    }
    ck_reader *rd = NULL;
    for (size_t i = 0; i < n && r == 0; i++) {
        const ck_load_item *it = &items[i];
        if (!rd || strcmp(rd->t.name, it->tensor) != 0) {
            ck_reader_close(rd);
            rd = NULL;
            r = reader_open(ck, it->tensor, rl, &rd, err);
            if (r < 0)
                break;
        }
        uint64_t want = ck_box_numel(&it->box) * ck_dtype_size(rd->t.dtype);
        if ((r = read_check(rd, &it->box, 0, want, err)) < 0)
            break;
        if (want != it->len) {
            r = ck_err_set(err, -EINVAL, "tensor %s: the box asked for is %llu bytes, the "
                           "destination %llu", it->tensor, (unsigned long long)want,
                           (unsigned long long)it->len);
            break;
        }
        ck_box cur = it->box;
        r = decompose(rd, &it->box, &cur, 0, 0, want / ck_dtype_size(rd->t.dtype), it->dst,
                      err);
    }
    int r2 = rlist_flush(rl, err);
    ck_reader_close(rd);
    rlist_close(rl);
    return r < 0 ? r : r2;
}

typedef struct rs_entry {
    ck_ckpt *ck;
    ck_reader *rd;               /* of the tensor it read last, or NULL */
    struct rs_entry *next;
} rs_entry;

struct ck_readers {
    char dir[PATH_MAX];
    const ck_ckpt *src;          /* ck_readers_open_ckpt: each handle is a copy of it */
    pthread_mutex_t mu;
    rs_entry *idle;              /* handles no thread holds */
};

int ck_readers_open(const char *dir, ck_readers **out, ck_err *err)
{
    ck_readers *rs = calloc(1, sizeof *rs);
    if (!rs)
        return -ENOMEM;
    if (snprintf(rs->dir, sizeof rs->dir, "%s", dir) >= (int)sizeof rs->dir) {
        free(rs);
        return ck_err_set(err, -ENAMETOOLONG, "%s: path too long", dir);
    }
    pthread_mutex_init(&rs->mu, NULL);
    *out = rs;
    return 0;
}

static void entry_free(rs_entry *e)
{
    ck_reader_close(e->rd);
    ck_close(e->ck);
    free(e);
}

int ck_readers_open_ckpt(const ck_ckpt *ck, ck_readers **out, ck_err *err)
{
    int r = ck_readers_open(ck_dir(ck), out, err);
    if (r == 0)
        (*out)->src = ck;
    return r;
}

void ck_readers_close(ck_readers *rs)
{
    if (!rs)
        return;
    while (rs->idle) {
        rs_entry *e = rs->idle;
        rs->idle = e->next;
        entry_free(e);
    }
    pthread_mutex_destroy(&rs->mu);
    free(rs);
}

int ck_readers_read(ck_readers *rs, const char *tensor, const ck_box *box, uint64_t off,
                    uint64_t len, void *dst, ck_err *err)
{
    pthread_mutex_lock(&rs->mu);
    rs_entry *e = rs->idle;
    if (e)
        rs->idle = e->next;
    pthread_mutex_unlock(&rs->mu);
    int r = 0;
    if (!e) {
        if (!(e = calloc(1, sizeof *e)))
            return -ENOMEM;
        if ((r = rs->src ? ck__open_dup(rs->src, &e->ck, err)
                         : ck_open_dir(rs->dir, &e->ck, err)) < 0) {
            free(e);
            return r;
        }
    }
    if (e->rd && strcmp(ck_reader_tensor(e->rd)->name, tensor) != 0) {
        ck_reader_close(e->rd);
        e->rd = NULL;
    }
    if (!e->rd)
        r = ck_reader_open(e->ck, tensor, &e->rd, err);
    if (r == 0)
        r = ck_reader_read(e->rd, box, off, len, dst, err);
    pthread_mutex_lock(&rs->mu);
    e->next = rs->idle;
    rs->idle = e;
    pthread_mutex_unlock(&rs->mu);
    return r;
}

int ck_shard_read(ck_ckpt *ck, const ck_shard *s, uint64_t off, uint64_t len, void *dst,
                  ck_err *err)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < s->n_extents; i++)
        total += s->ext[i].len;
    if (off > total || len > total - off)
        return ck_err_set(err, -EINVAL, "read of [%llu, +%llu) outside shard %u (%llu bytes)",
                          (unsigned long long)off, (unsigned long long)len, s->idx,
                          (unsigned long long)total);
    rlist *rl;
    int r = rlist_open(ck, &rl, err);
    if (r < 0)
        return r;
    r = rlist_shard(rl, s, off, len, dst, err);
    int r2 = rlist_flush(rl, err);
    rlist_close(rl);
    return r < 0 ? r : r2;
}
