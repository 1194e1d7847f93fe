/* load.c - reading any part of a tensor onto any mesh (see ck/load.h).
 *
 * Wanted bytes become file reads in three steps: the wanted byte range of the target
 * box is cut into at most 2*ndim sub-boxes, each contiguous in the destination;
 * each sub-box is intersected with every saved shard and walked as runs contiguous
 * on both sides (ck__runs); each run is mapped through the shard's extents to file
 * ranges. The read list (load/rlist.c) coalesces ranges that continue each other in
 * the file and in memory, runs them through one io_uring and checks the blocks they
 * touch.
 *
 * A load into the tensor's own dtype reads straight into place. Into another dtype,
 * the wanted elements are read CONV_BYTES of saved bytes at a time into the reader's
 * buffer and converted from there into place, so memory stays bounded whatever the
 * tensor's size.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck/load.h"
#include "format/reader_int.h"
#include "load/rlist.h"
#include "model/layout.h"
#include "io/engine.h"

#define CONV_BYTES (4u << 20)

struct ck_reader {
    ck_ckpt *ck;
    ck_tensor t;
    ck_dtype as;          /* what reads write: t.dtype, or a dtype they convert into */
    ck_shard *sh;
    uint32_t nsh;
    rlist *rl;
    bool own_rl;          /* a batch load's readers share the batch's list */
    uint64_t last_reads;
    uint8_t *conv;        /* a converting reader's CONV_BYTES of saved bytes */
};

void ck_load_verify(ck_ckpt *ck, bool verify)
{
    ck->no_verify = !verify;
}

/* 0 if tensor t's values can be loaded as dtype `as`, else -EINVAL naming both. */
static int as_check(const ck_ckpt *ck, const ck_tensor *t, ck_dtype as, ck_err *err)
{
    ck_err why = { 0 };
    int r = ck_dtype_convertible(t->dtype, as, &why);
    if (r < 0)
        return ck_err_set(err, r, "%s: tensor %s is %s and cannot be loaded as %s: %s",
                          ck->dir, t->name, ck_dtype_name(t->dtype),
                          ck_dtype_name(as) ? ck_dtype_name(as) : "an unknown dtype",
                          ck_err_msg(&why));
    return 0;
}

/* A reader of tensor whose reads go to rl, or to a list of its own when rl is NULL. */
static int reader_open(ck_ckpt *ck, const char *tensor, ck_dtype as, rlist *rl,
                       ck_reader **out, ck_err *err)
{
    ck_reader *rd = calloc(1, sizeof *rd);
    if (!rd)
        return -ENOMEM;
    rd->ck = ck;
    rd->rl = rl;
    int r = ck_tensor_get(ck, tensor, &rd->t, err);
    rd->as = as == CK_AS_SAVED ? rd->t.dtype : as;
    if (r == 0)
        r = as_check(ck, &rd->t, rd->as, err);
    if (r == 0)
        r = ck_shards_get(ck, &rd->t, &rd->sh, &rd->nsh, err);
    if (r == 0 && !rl && (r = rlist_open(ck, false, &rd->rl, err)) == 0)
        rd->own_rl = true;
    if (r < 0) {
        ck_reader_close(rd);
        return r;
    }
    *out = rd;
    return 0;
}

int ck_reader_open(ck_ckpt *ck, const char *tensor, ck_dtype as, ck_reader **out,
                   ck_err *err)
{
    return reader_open(ck, tensor, as, NULL, out, err);
}

void ck_reader_close(ck_reader *rd)
{
    if (!rd)
        return;
    if (rd->own_rl)
        rlist_close(rd->rl);
    free(rd->conv);
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
 * destination, in row-major order) from every saved shard it meets, as saved. */
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
 * there, and reads each, as saved. dims [d, ndim) are free; the earlier ones are
 * fixed in cur. */
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

/* Converts k elements read from element e of the box on (in the reader's buffer) into
 * dst; a value `as` cannot hold fails naming its element in the box. */
static int convert_out(ck_reader *rd, uint8_t *dst, uint64_t k, uint64_t e, ck_err *err)
{
    ck_err why = { 0 };
    int r = ck_dtype_convert(dst, rd->as, rd->conv, rd->t.dtype, k, &why);
    if (r == 0)
        return 0;
    /* The converter counts from the start of this piece: find the element again, one
     * at a time, to name it in the box (only on this failing path). */
    size_t si = ck_dtype_size(rd->t.dtype), di = ck_dtype_size(rd->as);
    uint64_t i = 0;
    ck_err one = { 0 };
    while (i < k && ck_dtype_convert(dst + i * di, rd->as, rd->conv + i * si, rd->t.dtype, 1,
                                     &one) == 0)
        i++;
    const char *msg = i < k ? ck_err_msg(&one) : ck_err_msg(&why);
    if (i < k && strncmp(msg, "element 0 ", 10) == 0)
        msg += 10;
    return ck_err_set(err, r, "%s: tensor %s (%s, loaded as %s): element %llu of the part "
                      "asked for %s", rd->ck->dir, rd->t.name, ck_dtype_name(rd->t.dtype),
                      ck_dtype_name(rd->as), (unsigned long long)(e + i), msg);
}

/* Reads elements [a, b) of box's row-major storage into dst in the reader's dtype:
 * straight into place, or through its buffer and converted. */
static int read_elems(ck_reader *rd, const ck_box *box, uint64_t a, uint64_t b, uint8_t *dst,
                      ck_err *err)
{
    rlist_tensor(rd->rl, rd->t.name);
    ck_box cur = *box;
    if (rd->as == rd->t.dtype)
        return decompose(rd, box, &cur, 0, a, b, dst, err);
    size_t si = ck_dtype_size(rd->t.dtype), di = ck_dtype_size(rd->as);
    uint64_t step = CONV_BYTES / si;
    if (!rd->conv && posix_memalign((void **)&rd->conv, 4096, CONV_BYTES) != 0) {
        rd->conv = NULL;
        return ck_err_set(err, -ENOMEM, "tensor %s: out of memory for converting", rd->t.name);
    }
    for (uint64_t e = a; e < b; e += step) {
        uint64_t k = b - e < step ? b - e : step;
        /* Finished, not only landed: blocks read whole into the buffer are hashed
         * there, so the next piece waits for them. */
        int r = decompose(rd, box, &cur, 0, e, e + k, rd->conv, err);
        if (r == 0)
            r = rlist_finish(rd->rl, err);
        if (r == 0)
            r = convert_out(rd, dst + (e - a) * di, k, e - a, err);
        if (r < 0)
            return r;
    }
    return 0;
}

/* Checks a read of bytes [off, off + len) of box's storage in dtype `as`; 0 or -EINVAL. */
static int read_check(const ck_tensor *t, ck_dtype as, const ck_box *box, uint64_t off,
                      uint64_t len, ck_err *err)
{
    size_t is = ck_dtype_size(as);
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
    size_t is = ck_dtype_size(rd->as);
    int rc = read_check(&rd->t, rd->as, box, off, len, err);
    if (rc < 0)
        return rc;
    uint64_t before = rlist_reads(rd->rl);
    int r = read_elems(rd, box, off / is, (off + len) / is, dst, err);
    int r2 = rlist_finish(rd->rl, err);
    rd->last_reads = rlist_reads(rd->rl) - before;
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
    return ck_reader_read(rd, &box, 0, ck_box_numel(&box) * ck_dtype_size(rd->as), dst, err);
}

/* Checks one item of a batch against its tensor t. */
static int item_check(const ck_ckpt *ck, const ck_tensor *t, const ck_load_item *it,
                      ck_err *err)
{
    ck_dtype as = it->dtype == CK_AS_SAVED ? t->dtype : it->dtype;
    int r = as_check(ck, t, as, err);
    if (r < 0)
        return r;
    uint64_t want = ck_box_numel(&it->box) * ck_dtype_size(as);
    if ((r = read_check(t, as, &it->box, 0, want, err)) < 0)
        return r;
    if (want != it->len)
        return ck_err_set(err, -EINVAL, "tensor %s: the box asked for is %llu bytes of %s, the "
                          "destination %llu", it->tensor, (unsigned long long)want,
                          ck_dtype_name(as), (unsigned long long)it->len);
    return 0;
}

int ck_load_many(ck_ckpt *ck, const ck_load_item *items, size_t n, ck_err *err)
{
    ck_tensor t;
    int r = 0;
    for (size_t i = 0; i < n && r == 0; i++) {
        if (i == 0 || strcmp(items[i].tensor, items[i - 1].tensor) != 0)
            r = ck_tensor_get(ck, items[i].tensor, &t, err);
        if (r == 0)
            r = item_check(ck, &t, &items[i], err);
    }
    rlist *rl;
    if (r < 0 || (r = rlist_open(ck, true, &rl, err)) < 0)
        return r;
    ck_reader *rd = NULL;
    for (size_t i = 0; i < n && r == 0; i++) {
        const ck_load_item *it = &items[i];
        if (!rd || strcmp(rd->t.name, it->tensor) != 0) {
            ck_reader_close(rd);
            rd = NULL;
            if ((r = reader_open(ck, it->tensor, CK_AS_SAVED, rl, &rd, err)) < 0)
                break;
        }
        rd->as = it->dtype == CK_AS_SAVED ? rd->t.dtype : it->dtype;
        r = read_elems(rd, &it->box, 0, ck_box_numel(&it->box), it->dst, err);
    }
    int r2 = rlist_finish(rl, err);
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
    bool no_verify;              /* as src */
    ck__vstate *vs;              /* the handles' shared block cache, made on first need */
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
    if (r == 0) {
        (*out)->src = ck;
        (*out)->no_verify = ck->no_verify;
    }
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
    ck__vstate_free(rs->vs);
    pthread_mutex_destroy(&rs->mu);
    free(rs);
}

/* A handle of its own for the calling thread: an idle one, or a new one that shares
 * the readers' block cache. */
static int rs_take(ck_readers *rs, rs_entry **out, ck_err *err)
{
    pthread_mutex_lock(&rs->mu);
    rs_entry *e = rs->idle;
    if (e)
        rs->idle = e->next;
    pthread_mutex_unlock(&rs->mu);
    if (e) {
        *out = e;
        return 0;
    }
    if (!(e = calloc(1, sizeof *e)))
        return -ENOMEM;
    int r = rs->src ? ck__open_dup(rs->src, &e->ck, err) : ck_open_dir(rs->dir, &e->ck, err);
    if (r < 0) {
        free(e);
        return r;
    }
    e->ck->no_verify = rs->no_verify;
    if (e->ck->info.hashed && !rs->no_verify) {
        pthread_mutex_lock(&rs->mu);
        if (!rs->vs)
            r = ck__vstate_shared(e->ck->info.block_size, &rs->vs);
        pthread_mutex_unlock(&rs->mu);
        if (r < 0) {
            entry_free(e);
            return ck_err_set(err, r, "%s: out of memory for a block cache", rs->dir);
        }
        ck__vstate_lend(e->ck, rs->vs);
    }
    *out = e;
    return 0;
}

int ck_readers_read(ck_readers *rs, const char *tensor, const ck_box *box, uint64_t off,
                    uint64_t len, void *dst, ck_err *err)
{
    rs_entry *e = NULL;
    int r = rs_take(rs, &e, err);
    if (r < 0)
        return r;
    if (e->rd && strcmp(ck_reader_tensor(e->rd)->name, tensor) != 0) {
        ck_reader_close(e->rd);
        e->rd = NULL;
    }
    if (!e->rd)
        r = ck_reader_open(e->ck, tensor, CK_AS_SAVED, &e->rd, err);
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
    int r = rlist_open(ck, false, &rl, err);
    if (r < 0)
        return r;
    char name[32];
    snprintf(name, sizeof name, "with id %u", s->tensor);
    rlist_tensor(rl, name);
    r = rlist_shard(rl, s, off, len, dst, err);
    int r2 = rlist_finish(rl, err);
    rlist_close(rl);
    return r < 0 ? r : r2;
}
