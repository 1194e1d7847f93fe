/* verify.c - structural and deep checks of a checkpoint (see ck/verify.h). */
#include "ck/verify.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <pthread.h>
#include <time.h>

#include "io/hash.h"
#include "format/reader_int.h"
#include "io/rootfs.h"
#include "model/grow.h"
#include "model/say.h"
#include "io/engine.h"

/* One extent of one shard, for the overlap check and to name the tensors that a
 * corrupt block holds. */
typedef struct ext_ref {
    uint32_t file;
    uint64_t off, len;
    uint32_t tensor;     /* index into tnames */
    uint32_t shard;
} ext_ref;

typedef struct vstate {
    ck_ckpt *ck;
    const ck_verify_opts *o;
    ck_verify_result *res;
    ext_ref *ext;
    size_t next, capext;
    char (*tnames)[CK_NAME_MAX];
    uint32_t ntn;
    size_t captn;
} vstate;

__attribute__((format(printf, 2, 3)))
static void problem(vstate *v, const char *fmt, ...)
{
    v->res->problems++;
    va_list ap;
    va_start(ap, fmt);
    ck__vsay(v->o->problem, v->o->cb_arg, fmt, ap);
    va_end(ap);
}

static void check_files(vstate *v)
{
    const ck_info *in = ck_get_info(v->ck);
    uint64_t world = ck_mesh_world(&in->mesh);
    for (uint32_t f = 0; f < in->n_files; f++) {
        const ck_file *cf = ck_file_get(v->ck, f);
        char path[PATH_MAX];
        ck_file_path(v->ck, f, path, sizeof path);
        struct stat st;
        int r;
        if (!ck_file_held(v->ck, f)) {
            /* Not in this partial copy: only its manifest records are checked. */
        } else if ((r = ck__statat(ck__file_dirfd(v->ck, f), cf->name, &st)) < 0) {
            problem(v, "data file %s: %s", path, r == -ENOENT ? "missing" : ck__why(r));
        } else if (!S_ISREG(st.st_mode)) {
            /* Never read: a link leads out of the checkpoint, a FIFO would hang. */
            problem(v, "data file %s: not a regular file (%s%s)", path, ck__ftype(st.st_mode),
                    S_ISLNK(st.st_mode) ? ", never followed" : "");
        } else if ((uint64_t)st.st_size != cf->size) {
            problem(v, "data file %s: %llu bytes, the manifest says %llu (%s)", path,
                    (unsigned long long)st.st_size, (unsigned long long)cf->size,
                    (uint64_t)st.st_size < cf->size ? "truncated" : "grown");
        }
        if (cf->rank >= world)
            problem(v, "data file %s: written by rank %u, outside the %llu-rank mesh", path,
                    cf->rank, (unsigned long long)world);
        for (uint32_t g = 0; g < f; g++)
            if (!strcmp(ck_file_get(v->ck, g)->name, cf->name))
                problem(v, "data files %u and %u are both named %s", g, f, cf->name);
    }
    v->res->files = ck_get_copy(v->ck)->files_held;
}

static int add_tname(vstate *v, const char *name)
{
    if (ck__grow(&v->tnames, &v->captn, (size_t)v->ntn + 1, sizeof *v->tnames) < 0)
        return -ENOMEM;
    snprintf(v->tnames[v->ntn++], CK_NAME_MAX, "%s", name);
    return 0;
}

static int add_ext(vstate *v, const ck_extent *e, uint32_t tensor, uint32_t shard)
{
    if (ck__grow(&v->ext, &v->capext, v->next + 1, sizeof *v->ext) < 0)
        return -ENOMEM;
    v->ext[v->next++] = (ext_ref){ .file = e->file, .off = e->off, .len = e->len,
                                   .tensor = tensor, .shard = shard };
    return 0;
}

static void fmt_box(const ck_box *b, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < b->ndim && n < len; d++)
        n += (size_t)snprintf(buf + n, len - n, "%s%llu:+%llu", d ? ", " : "",
                              (unsigned long long)b->off[d], (unsigned long long)b->len[d]);
    if (n < len)
        snprintf(buf + n, len - n, "]");
}

/* Exact cover, for both kinds of tensor: the one tiling check of the core
 * (ck_boxes_check), over the shards' boxes. */
static void check_cover(vstate *v, const ck_tensor *t, const ck_shard *sh, uint32_t n)
{
    ck_box *b = malloc((n ? n : 1) * sizeof *b);
    if (!b) {
        problem(v, "tensor %s: out of memory checking its cover", t->name);
        return;
    }
    for (uint32_t i = 0; i < n; i++)
        b[i] = sh[i].box;
    ck_err e = { 0 };
    if (ck_boxes_check(t->name, t->ndim, t->shape, n, b, &e) < 0)
        problem(v, "%s", ck_err_msg(&e));
    free(b);
}

static void check_tensor(vstate *v, const ck_tensor *t, uint32_t tix)
{
    const ck_info *in = ck_get_info(v->ck);
    ck_shard *sh = NULL;
    uint32_t n = 0;
    ck_err e = { 0 };
    if (ck_shards_get(v->ck, t, &sh, &n, &e) < 0) {
        problem(v, "tensor %s: %s", t->name, ck_err_msg(&e));
        return;
    }
    v->res->shards += n;
    for (uint32_t i = 0; i < n; i++) {
        ck_box want;
        if (!ck_tensor_is_boxes(t))
            ck_shard_box(t->ndim, t->shape, &in->mesh, t->pl, sh[i].coord, &want);
        if (!ck_tensor_is_boxes(t) && !ck_box_equal(&want, &sh[i].box)) {
            char a[256], b[256];
            fmt_box(&sh[i].box, a, sizeof a);
            fmt_box(&want, b, sizeof b);
            problem(v, "tensor %s: shard %u holds %s, but its placements give its rank %s",
                    t->name, i, a, b);
        }
        for (uint32_t x = 0; x < sh[i].n_extents; x++)
            if (add_ext(v, &sh[i].ext[x], tix, i) < 0)
                problem(v, "out of memory collecting extents");
    }
    check_cover(v, t, sh, n);
    free(sh);
}

static int cmp_ext(const void *a, const void *b)
{
    const ext_ref *x = a, *y = b;
    if (x->file != y->file)
        return x->file < y->file ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

static void check_extent_overlap(vstate *v)
{
    if (v->next < 2)
        return;                 /* and v->ext may be NULL, which qsort must not get */
    qsort(v->ext, v->next, sizeof *v->ext, cmp_ext);
    for (size_t i = 1; i < v->next; i++) {
        const ext_ref *a = &v->ext[i - 1], *b = &v->ext[i];
        if (a->file == b->file && a->len && b->len && b->off < a->off + a->len)
            problem(v, "file %s: bytes [%llu, %llu) belong to both tensor %s shard %u and "
                    "tensor %s shard %u", ck_file_get(v->ck, a->file)->name,
                    (unsigned long long)b->off,
                    (unsigned long long)(a->off + a->len < b->off + b->len ? a->off + a->len
                                                                          : b->off + b->len),
                    v->tnames[a->tensor], a->shard, v->tnames[b->tensor], b->shard);
    }
}

/* Walks the tensor table by hand (not ck_tensors_each) so that a bad record is one
 * problem among others, not the end of the walk. */
static int check_tensors(vstate *v, ck_err *err)
{
    ck_ckpt *ck = v->ck;
    MDB_cursor *cur;
    int rc = mdb_cursor_open(ck->txn, ck->db_tensors, &cur);
    if (rc != MDB_SUCCESS)
        return ck_err_set(err, ck__mdb_err(rc), "%s: %s", ck->mpath, mdb_strerror(rc));
    uint64_t count = 0, claimed = 0;
    uint32_t *ids = NULL;
    size_t nids = 0, capids = 0;
    MDB_val k, val;
    int r = 0;
    for (rc = mdb_cursor_get(cur, &k, &val, MDB_FIRST); rc == MDB_SUCCESS && r == 0;
         rc = mdb_cursor_get(cur, &k, &val, MDB_NEXT)) {
        count++;
        ck_tensor t;
        ck_err e = { 0 };
        if (ck__decode_tensor(ck, &k, &val, &t, &e) < 0) {
            problem(v, "%s", ck_err_msg(&e));
            continue;
        }
        for (size_t i = 0; i < nids; i++)
            if (ids[i] == t.id)
                problem(v, "tensors %s and %s share the id %u (duplicate tensor)", v->tnames[i],
                        t.name, t.id);
        if (ck__grow(&ids, &capids, nids + 1, sizeof *ids) < 0 || add_tname(v, t.name) < 0) {
            r = -ENOMEM;
            break;
        }
        ids[nids++] = t.id;
        claimed += t.n_shards;
        check_tensor(v, &t, (uint32_t)(nids - 1));
    }
    if (r == 0 && rc != MDB_NOTFOUND && rc != MDB_SUCCESS)
        problem(v, "%s: reading the tensor table: %s", ck->mpath, mdb_strerror(rc));
    mdb_cursor_close(cur);
    free(ids);
    v->res->tensors = count;
    if (r == 0 && count != ck->info.n_tensors)
        problem(v, "%s: the header says %llu tensors, the table holds %llu", ck->mpath,
                (unsigned long long)ck->info.n_tensors, (unsigned long long)count);
    /* Shard records no tensor claims are orphans: a duplicate id hides another
     * tensor's shards this way. */
    MDB_stat ms;
    if (r == 0 && mdb_stat(ck->txn, ck->db_shards, &ms) == MDB_SUCCESS && ms.ms_entries != claimed)
        problem(v, "%s: the shard table holds %llu records, the tensors claim %llu", ck->mpath,
                (unsigned long long)ms.ms_entries, (unsigned long long)claimed);
    return r;
}

/* ---- deep: re-read and re-hash every block ---- */

typedef struct deep deep;

typedef struct dslot {
    deep *d;
    uint8_t *buf;
    uint32_t file;
    uint64_t block;
    uint32_t len;
    bool reading;        /* driver thread only */
    bool hashing;        /* under d->mu */
    bool ready;          /* under d->mu: hashed, not yet compared */
    uint8_t got[CK_HASH_LEN];
} dslot;

struct deep {
    vstate *v;
    ck_engine *e;
    ck_ioq *q;
    ck__hashpool *pool;
    dslot *slots;
    unsigned nslots;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int *fds;
    uint64_t *limit;     /* per file: bytes to read, min(recorded, on disk) */
    uint32_t block_size;
    unsigned inflight;
    uint64_t done, total;
};

static void on_dhashed(void *arg)
{
    dslot *s = arg;
    pthread_mutex_lock(&s->d->mu);
    s->hashing = false;
    s->ready = true;
    pthread_cond_signal(&s->d->cv);
    pthread_mutex_unlock(&s->d->mu);
}

/* The tensors whose extents meet bytes [a, z) of file, for a message. */
static void names_in_range(vstate *v, uint32_t file, uint64_t a, uint64_t z, char *buf,
                           size_t len)
{
    size_t n = 0;
    unsigned listed = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < v->next && n < len; i++) {
        const ext_ref *x = &v->ext[i];
        if (x->file != file || x->off >= z || x->off + x->len <= a)
            continue;
        if (listed++ == 8) {
            snprintf(buf + n, len - n, ", ...");
            break;
        }
        n += (size_t)snprintf(buf + n, len - n, "%s%s (shard %u)", listed > 1 ? ", " : "",
                              v->tnames[x->tensor], x->shard);
    }
    if (!listed)
        snprintf(buf, len, "no tensor (alignment padding)");
}

static void compare(deep *d, dslot *s)
{
    vstate *v = d->v;
    uint8_t want[CK_HASH_LEN];
    ck_err e = { 0 };
    uint64_t a = s->block * d->block_size, z = a + s->len;
    const char *fname = ck_file_get(v->ck, s->file)->name;
    v->res->blocks_hashed++;
    v->res->bytes_hashed += s->len;
    if (ck_hash_get(v->ck, s->file, s->block, want, &e) < 0) {
        problem(v, "file %s block %llu: %s", fname, (unsigned long long)s->block, ck_err_msg(&e));
    } else if (memcmp(want, s->got, CK_HASH_LEN) != 0) {
        char names[1024];
        names_in_range(v, s->file, a, z, names, sizeof names);
        problem(v, "file %s block %llu (bytes %llu-%llu): SHA-256 mismatch; it holds %s",
                fname, (unsigned long long)s->block, (unsigned long long)a,
                (unsigned long long)z, names);
    }
}

static int deep_setup(deep *d, ck_err *err)
{
    vstate *v = d->v;
    const ck_info *in = ck_get_info(v->ck);
    d->e = ck_engine_default();
    d->block_size = in->block_size;
    uint64_t mem = v->o->mem_limit ? v->o->mem_limit : (64u << 20);
    uint64_t n = mem / d->block_size;
    d->nslots = (unsigned)(n < 2 ? 2 : n > 128 ? 128 : n);
    d->slots = calloc(d->nslots, sizeof *d->slots);
    d->fds = malloc((in->n_files ? in->n_files : 1) * sizeof *d->fds);
    d->limit = calloc(in->n_files ? in->n_files : 1, sizeof *d->limit);
    if (!d->slots || !d->fds || !d->limit)
        return -ENOMEM;
    for (unsigned i = 0; i < d->nslots; i++) {
        d->slots[i].d = d;
        if (posix_memalign((void **)&d->slots[i].buf, 4096, d->block_size) != 0)
            return -ENOMEM;
    }
    for (uint32_t f = 0; f < in->n_files; f++) {
        bool direct;
        /* Not in a partial copy: nothing to read. Not a regular file, or gone: the
         * structural check reported it; not read. */
        d->fds[f] = -ENOENT;
        if (ck_file_held(v->ck, f))
            d->fds[f] = ck__engine_open_data(d->e, ck__file_dirfd(v->ck, f), ck_file_get(v->ck, f)->name,
                                             O_RDONLY, 0, &direct);
        struct stat st;
        if (d->fds[f] < 0 || fstat(d->fds[f], &st) < 0)
            continue;
        /* A file shorter than recorded was reported by the structural check; hash what
         * is there and no more, so an absurd recorded size cannot make this run away. */
        uint64_t size = ck_file_get(v->ck, f)->size;
        d->limit[f] = (uint64_t)st.st_size < size ? (uint64_t)st.st_size : size;
        if (d->limit[f] < size)
            problem(v, "file %s: only its first %llu of %llu bytes can be hashed",
                    ck_file_get(v->ck, f)->name, (unsigned long long)d->limit[f],
                    (unsigned long long)size);
        d->total += d->limit[f];
    }
    int r = ck__hashpool_new(v->o->threads, &d->pool);
    if (r == 0)
        r = d->e->ops->ioq_open(d->e, d->nslots, NULL, 0, &d->q);
    if (r < 0)
        return ck_err_set(err, r, "deep verify setup: %s", strerror(-r));
    return 0;
}

static void deep_reap(deep *d, bool wait)
{
    ck_io_done done[64];
    int got = d->e->ops->ioq_reap(d->q, done, 64, wait ? 1 : 0);
    for (int i = 0; i < got; i++) {
        dslot *s = &d->slots[done[i].user];
        const char *fname = ck_file_get(d->v->ck, s->file)->name;
        s->reading = false;
        d->inflight--;
        if (done[i].res < 0 || (uint32_t)done[i].res < s->len) {
            if (done[i].res < 0)
                problem(d->v, "file %s block %llu: read: %s", fname,
                        (unsigned long long)s->block, strerror(-done[i].res));
            else
                problem(d->v, "file %s block %llu: the file ends early (truncated)", fname,
                        (unsigned long long)s->block);
            continue;
        }
        pthread_mutex_lock(&d->mu);
        s->hashing = true;
        pthread_mutex_unlock(&d->mu);
        if (ck__hashpool_submit(d->pool, s->buf, s->len, s->got, on_dhashed, s) < 0) {
            pthread_mutex_lock(&d->mu);
            s->hashing = false;
            pthread_mutex_unlock(&d->mu);
            problem(d->v, "file %s block %llu: out of memory queueing the hash", fname,
                    (unsigned long long)s->block);
        }
    }
}

static int deep_check(vstate *v, ck_err *err)
{
    deep d = { .v = v };
    pthread_mutex_init(&d.mu, NULL);
    pthread_cond_init(&d.cv, NULL);
    const ck_info *in = ck_get_info(v->ck);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int r = deep_setup(&d, err);
    uint32_t f = 0;
    uint64_t b = 0;
    bool more = true;
    while (r == 0) {
        /* Hand every idle slot the next block. */
        for (unsigned i = 0; i < d.nslots && more; i++) {
            dslot *s = &d.slots[i];
            pthread_mutex_lock(&d.mu);
            bool busy = s->reading || s->hashing || s->ready;
            pthread_mutex_unlock(&d.mu);
            if (busy)
                continue;
            while (f < in->n_files && (d.fds[f] < 0 || b * d.block_size >= d.limit[f])) {
                f++;
                b = 0;
            }
            if (f == in->n_files) {
                more = false;
                break;
            }
            uint64_t size = d.limit[f];
            *s = (dslot){ .d = &d, .buf = s->buf, .file = f, .block = b, .reading = true,
                          .len = (uint32_t)(size - b * d.block_size < d.block_size
                                                ? size - b * d.block_size : d.block_size) };
            ck_io io = { .fd = d.fds[f], .write = false, .buf_index = -1, .buf = s->buf,
                         .len = s->len, .off = b * d.block_size, .user = i };
            r = d.e->ops->ioq_submit(d.q, &io, 1);
            if (r < 0) {
                ck_err_set(err, r, "deep verify: submitting a read: %s", strerror(-r));
                s->reading = false;
                break;
            }
            d.inflight++;
            b++;
        }
        /* Compare what the workers finished. */
        bool idle = true, any_ready = false;
        pthread_mutex_lock(&d.mu);
        for (unsigned i = 0; i < d.nslots; i++) {
            dslot *s = &d.slots[i];
            if (s->ready) {
                s->ready = false;
                any_ready = true;
                pthread_mutex_unlock(&d.mu);
                compare(&d, s);
                d.done += s->len;
                if (v->o->progress)
                    v->o->progress(v->o->cb_arg, d.done, d.total);
                pthread_mutex_lock(&d.mu);
            }
            idle = idle && !s->reading && !s->hashing && !s->ready;
        }
        if (!more && idle) {
            pthread_mutex_unlock(&d.mu);
            break;
        }
        if (d.inflight == 0 && !any_ready) {
            /* Only hashes are outstanding. */
            bool hashed = false;
            for (unsigned i = 0; i < d.nslots; i++)
                hashed = hashed || d.slots[i].ready;
            if (!hashed)
                pthread_cond_wait(&d.cv, &d.mu);
        }
        pthread_mutex_unlock(&d.mu);
        if (d.inflight > 0)
            deep_reap(&d, !any_ready);
    }
    /* Nothing may still read a buffer we free. */
    while (d.q && d.inflight > 0)
        deep_reap(&d, true);
    ck__hashpool_free(d.pool);
    if (d.q)
        d.e->ops->ioq_close(d.q);
    for (uint32_t i = 0; d.fds && i < in->n_files; i++)
        if (d.fds[i] >= 0)
            d.e->ops->close(d.e, d.fds[i]);
    for (unsigned i = 0; d.slots && i < d.nslots; i++)
        free(d.slots[i].buf);
    free(d.slots);
    free(d.fds);
    free(d.limit);
    pthread_mutex_destroy(&d.mu);
    pthread_cond_destroy(&d.cv);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    v->res->deep_seconds = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    return r;
}

int ck_verify(ck_ckpt *ck, const ck_verify_opts *o, ck_verify_result *res, ck_err *err)
{
    ck_verify_opts none = { 0 };
    vstate v = { .ck = ck, .o = o ? o : &none, .res = res };
    memset(res, 0, sizeof *res);
    check_files(&v);
    int r = check_tensors(&v, err);
    if (r == 0)
        check_extent_overlap(&v);
    if (r == 0 && v.o->deep) {
        if (!ck_get_info(ck)->hashed)
            res->unhashed = true;
        else
            r = deep_check(&v, err);
    }
    free(v.ext);
    free(v.tnames);
    return r;
}
