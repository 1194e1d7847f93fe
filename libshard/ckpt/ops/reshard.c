/* reshard.c - a checkpoint re-cut for another mesh (see ck/reshard.h).
 *
 * Every tensor is first tried by reference: each target shard's row-major bytes are
 * the runs (ck__runs) of its intersections with the saved shards, sorted by where they
 * land in the new shard and mapped through the saved extents to file ranges. When
 * every range starts on a 4 KiB boundary and a shard needs at most max_extents of
 * them, the ranges become the new shard's extents in hard links of the old files.
 * Otherwise the tensor goes to a second plan whose data files are written afresh,
 * filled through ck_reader. Both kinds of files meet in one manifest, committed by
 * the same steps as a save (commit.h).
 *
 * Linked files are named ref-NNNNN.dat (by new file id) and written files
 * rank-NNNNN.dat (by new rank), so the two never collide whatever the meshes.
 */
#include "ck/reshard.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ck/load.h"
#include "model/plan.h"
#include "io/writer.h"
#include "save/commit.h"
#include "format/enc.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "save/rankfiles.h"
#include "model/grow.h"
#include "format/reader_int.h"
#include "io/rootfs.h"
#include "model/layout.h"
#include "ops/reshard.h"

typedef struct run {
    uint64_t dst, src, n;   /* elements: offset in the new shard, in the old, count */
    uint32_t shard;         /* index into the old shard table */
} run;

/* One copied shard: what its fill callback reads. */
typedef struct fill_src {
    struct rs *rs;
    uint32_t tensor;        /* index into rs->T */
    ck_box box;
} fill_src;

typedef struct rtensor {
    ck_tensor t;            /* the new record: target placements, new shard count */
    bool copy;
    uint32_t first;         /* its first shard in the plan that lays it out */
} rtensor;

typedef struct rs {
    ck_ckpt *src;
    const ck_reshard_opts *o;
    ck_engine *e;
    ck_placement pl[CK_MAX_MESH_DIMS];
    uint32_t max_ext;
    rtensor *T;
    uint32_t nt;
    size_t capt;
    ck__plan *pref, *pcopy;
    /* The new manifest. Extents grow in one array; each shard keeps its first index
     * until the array stops moving. */
    ck_shard *shards;
    uint64_t nshards;
    ck_extent *ext;
    size_t next, capext;
    size_t *ext_first;
    ck_file *files;
    uint32_t nfiles;
    uint8_t **hashes;
    uint32_t *link_of;      /* source file id -> new file id + 1; 0: not linked */
    ck__blob_rec *blobs;
    uint32_t nblobs;
    size_t capblobs;
    /* The copy. */
    fill_src *fills;
    ck_readers *readers;    /* fills run on the writer's workers, each with its own */
    pthread_mutex_t err_mu;
    ck_err fill_err;        /* the first fill error, under err_mu */
    int rootfd;             /* the target root, held open (through the engine) */
    char pending[PATH_MAX];
    int lock;               /* the new checkpoint's save lock (format/owner.h) */
    ck_reshard_stats *st;
} rs;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void say(const rs *s, const char *fmt, const char *a)
{
    if (!s->o->log)
        return;
    char msg[CK_NAME_MAX + 256];
    snprintf(msg, sizeof msg, fmt, a);
    s->o->log(s->o->cb_arg, msg);
}

/* The placements a tensor of ndim dims gets: a 0-D tensor cannot be cut. */
static void tensor_pl(const ck_placement *pl, int mesh_ndim, int ndim, ck_placement *out)
{
    for (int d = 0; d < mesh_ndim; d++)
        out[d] = ndim == 0 ? (ck_placement){ .kind = CK_REPLICATE } : pl[d];
}

typedef struct check_ctx {
    const ck_mesh *mesh;
    const ck_placement *pl;
    ck_err *err;
} check_ctx;

static int check_one(const ck_tensor *t, void *arg)
{
    check_ctx *c = arg;
    ck_placement pl[CK_MAX_MESH_DIMS];
    tensor_pl(c->pl, c->mesh->ndim, t->ndim, pl);
    return ck__layout_check(t->name, t->ndim, t->shape, ck_dtype_size(t->dtype), c->mesh, pl,
                            c->err);
}

int ck__reshard_check(ck_ckpt *src, const ck_mesh *mesh, const ck_placement *pl, ck_err *err)
{
    ck_placement def[CK_MAX_MESH_DIMS];
    if (mesh->ndim < 1 || mesh->ndim > CK_MAX_MESH_DIMS || ck_mesh_world(mesh) == 0 ||
        ck_mesh_world(mesh) > CK_MAX_WORLD)
        return ck_err_set(err, -EINVAL, "the target mesh is invalid");
    if (!pl) {
        ck_placements_default(mesh->ndim, def);
        pl = def;
    }
    check_ctx c = { .mesh = mesh, .pl = pl, .err = err };
    return ck_tensors_each(src, check_one, &c, err);
}

static int collect_tensor(const ck_tensor *t, void *arg)
{
    rs *s = arg;
    if (ck__grow(&s->T, &s->capt, s->nt + 1, sizeof *s->T) < 0)
        return -ENOMEM;
    s->T[s->nt++] = (rtensor){ .t = *t };
    return 0;
}

static int by_id(const void *a, const void *b)
{
    const rtensor *x = a, *y = b;
    return x->t.id < y->t.id ? -1 : x->t.id > y->t.id;
}

static int collect_blob(const char *name, const void *data, size_t len, void *arg)
{
    rs *s = arg;
    return ck__blob_append(&s->blobs, &s->nblobs, &s->capblobs, name, data, len);
}

static int push_ext(rs *s, ck_extent x)
{
    if (ck__grow(&s->ext, &s->capext, s->next + 1, sizeof *s->ext) < 0)
        return -ENOMEM;
    s->ext[s->next++] = x;
    return 0;
}

static int by_dst(const void *a, const void *b)
{
    const run *x = a, *y = b;
    return x->dst < y->dst ? -1 : x->dst > y->dst;
}

/* The extents that hold box b of tensor t, appended to s->ext: 1 when they qualify
 * (few, each 4 KiB-aligned), 0 when the box must be copied (s->next is restored),
 * or -errno. */
static int ref_extents(rs *s, const ck_tensor *t, const ck_shard *sh, uint32_t nsh,
                       const ck_box *b, ck_err *err)
{
    size_t is = ck_dtype_size(t->dtype), mark = s->next;
    run runs[64];
    uint32_t nr = 0, max = s->max_ext < 64 ? s->max_ext : 64;
    uint64_t got = 0;
    for (uint32_t i = 0; i < nsh; i++) {
        ck_box x;
        if (!ck__box_intersect(b, &sh[i].box, &x))
            continue;
        ck__runs it;
        ck__runs_init(&it, &x, &sh[i].box, b);
        uint64_t so, d, n;
        while (ck__runs_next(&it, &so, &d, &n)) {
            if (nr == max)
                return 0;
            runs[nr++] = (run){ .dst = d, .src = so, .n = n, .shard = i };
            got += n;
        }
    }
    if (got != ck_box_numel(b))
        return ck_err_set(err, -EBADMSG, "tensor %s: the saved shards cover %llu of the %llu "
                          "elements of a target shard", t->name, (unsigned long long)got,
                          (unsigned long long)ck_box_numel(b));
    qsort(runs, nr, sizeof *runs, by_dst);
    for (uint32_t k = 0; k < nr; k++) {
        const ck_shard *os = &sh[runs[k].shard];
        uint64_t off = runs[k].src * is, len = runs[k].n * is, pos = 0;
        for (uint32_t i = 0; i < os->n_extents && len > 0; pos += os->ext[i++].len) {
            const ck_extent *e = &os->ext[i];
            if (off >= pos + e->len)
                continue;
            uint64_t in = off - pos, n = e->len - in < len ? e->len - in : len;
            ck_extent *prev = s->next > mark ? &s->ext[s->next - 1] : NULL;
            if (prev && prev->file == e->file && prev->off + prev->len == e->off + in) {
                prev->len += n;
            } else if ((e->off + in) % CK_ALIGN || s->next - mark == s->max_ext) {
                s->next = mark;
                return 0;
            } else {
                int r = push_ext(s, (ck_extent){ .file = e->file, .off = e->off + in, .len = n });
                if (r < 0)
                    return r;
            }
            off += n;
            len -= n;
        }
        if (len > 0)
            return ck_err_set(err, -EBADMSG, "tensor %s: shard %u: its extents end before "
                              "byte %llu", t->name, os->idx, (unsigned long long)off);
    }
    return 1;
}

/* Lays out tensor k: by reference when every target shard qualifies, else into the
 * copy plan. Shard records are appended in index order. */
static int lay_out(rs *s, uint32_t k, bool force_copy, ck_err *err)
{
    rtensor *rt = &s->T[k];
    ck_tensor *t = &rt->t;
    const ck_mesh *mesh = s->o->mesh;
    size_t is = ck_dtype_size(t->dtype);
    uint32_t first, count;
    int r = ck__plan_add(s->pref, t->name, t->ndim, t->shape, is, t->pl, &first, &count, err);
    if (r < 0)
        return r;
    ck_shard *old = NULL;
    uint32_t nold = 0;
    size_t mark = s->next;
    bool ref = !force_copy;
    if (ref && (r = ck_shards_get(s->src, t, &old, &nold, err)) < 0)
        return r;
    for (uint32_t j = 0; ref && j < count; j++) {
        const ck__plan_shard *ps = ck__plan_shard_at(s->pref, first + j);
        s->ext_first[s->nshards + j] = s->next;
        if (ps->bytes == 0)
            continue;
        r = ref_extents(s, t, old, nold, &ps->box, err);
        if (r < 0) {
            free(old);
            return r;
        }
        ref = r == 1;
    }
    free(old);
    const ck__plan *p = s->pref;
    if (!ref) {
        s->next = mark;
        if ((r = ck__plan_add(s->pcopy, t->name, t->ndim, t->shape, is, t->pl, &first, &count,
                             err)) < 0)
            return r;
        p = s->pcopy;
        rt->copy = true;
    }
    rt->first = first;
    t->n_shards = count;
    for (uint32_t j = 0; j < count; j++) {
        const ck__plan_shard *ps = ck__plan_shard_at(p, first + j);
        ck_shard *sh = &s->shards[s->nshards + j];
        *sh = (ck_shard){ .tensor = t->id, .idx = j, .box = ps->box };
        ck_mesh_coord(mesh, ps->writer, sh->coord);
        if (ref) {
            size_t end = j + 1 < count ? s->ext_first[s->nshards + j + 1] : s->next;
            sh->n_extents = (uint32_t)(end - s->ext_first[s->nshards + j]);
        } else {
            s->ext_first[s->nshards + j] = 0;
        }
    }
    s->nshards += count;
    s->st->tensors_linked += ref;
    return 0;
}

/* Hard-links every source file a referenced extent points into, renumbering the
 * extents, and carries its block hashes over. */
static int link_files(rs *s, bool hashed, ck_err *err)
{
    uint32_t nsrc = ck_get_info(s->src)->n_files;
    uint32_t block = ck_get_info(s->src)->block_size;
    for (size_t i = 0; i < s->next; i++)
        s->link_of[s->ext[i].file] = 1;
    for (uint32_t f = 0; f < nsrc; f++) {
        if (!s->link_of[f])
            continue;
        const ck_file *sf = ck_file_get(s->src, f);
        ck_file *nf = &s->files[s->nfiles];
        ck__name_data_file(true, s->nfiles, nf->name);
        nf->size = sf->size;
        nf->rank = 0;
        char from[PATH_MAX], to[PATH_MAX + CK_FILE_NAME_MAX];
        ck_file_path(s->src, f, from, sizeof from);
        snprintf(to, sizeof to, "%s/%s", s->pending, nf->name);
        int r = s->e->ops->link(s->e, ck__file_dirfd(s->src, f), sf->name, s->rootfd,
                                ck__rel(s->o->root, to));
        if (r < 0)
            return r == -EXDEV ? r : ck_err_set(err, r, "link %s to %s: %s", from, to, ck__why(r));
        s->link_of[f] = ++s->nfiles;
        if (!hashed)
            continue;
        uint64_t nb = (sf->size + block - 1) / block;
        s->hashes[s->nfiles - 1] = malloc(nb * CK_HASH_LEN + 1);
        if (!s->hashes[s->nfiles - 1])
            return -ENOMEM;
        for (uint64_t b = 0; b < nb; b++)
            if ((r = ck_hash_get(s->src, f, b, s->hashes[s->nfiles - 1] + b * CK_HASH_LEN,
                                 err)) < 0)
                return r;
    }
    for (size_t i = 0; i < s->next; i++)
        s->ext[i].file = s->link_of[s->ext[i].file] - 1;
    /* A file is recorded as written by a rank of the new mesh: the first whose shard
     * points into it, so that verify's rank check holds on any mesh. */
    for (uint64_t i = s->nshards; i-- > 0;)
        for (uint32_t x = 0; x < s->shards[i].n_extents; x++)
            s->files[s->ext[s->ext_first[i] + x].file].rank =
                (uint32_t)ck_mesh_rank(s->o->mesh, s->shards[i].coord);
    s->st->files_linked = s->nfiles;
    return 0;
}

/* A ck_fill_fn, run on the writer's worker threads. */
static int fill(void *arg, uint64_t off, void *dst, size_t len)
{
    fill_src *f = arg;
    rs *s = f->rs;
    ck_err e = { 0 };
    int r = ck_readers_read(s->readers, s->T[f->tensor].t.name, &f->box, off, len, dst, &e);
    if (r < 0) {
        pthread_mutex_lock(&s->err_mu);
        if (!s->fill_err.code)
            s->fill_err = e;
        pthread_mutex_unlock(&s->err_mu);
    }
    return r;
}

/* Writes one data file per rank of the copy plan, filled through ck_reader. */
static int write_copies(rs *s, bool hashed, uint32_t block, ck_err *err)
{
    uint32_t ncp = ck__plan_nshards(s->pcopy), first_file = s->nfiles;
    ck__rank_files rf;
    ck__hashpool *pool = NULL;
    int r = ck__rank_files_layout(s->pcopy, s->pending, strlen(s->o->root) + 1,
                                  hashed ? block : 0, &rf);
    if (r == 0 && rf.n == 0) {
        ck__rank_files_free(&rf);
        return 0;
    }
    if (r == 0 && !(s->fills = calloc(ncp ? ncp : 1, sizeof *s->fills)))
        r = -ENOMEM;
    if (r < 0)
        goto out;
    /* The copies' files follow the linked ones; their hashes move to the manifest's. */
    for (uint32_t f = 0; f < rf.n; f++) {
        s->files[s->nfiles] = rf.files[f];
        s->hashes[s->nfiles++] = rf.hashes[f];
        rf.hashes[f] = NULL;
    }
    /* Each copied shard's run reads the old data; its record gets its one extent. */
    for (uint32_t k = 0, sh0 = 0; k < s->nt; sh0 += s->T[k++].t.n_shards) {
        const rtensor *rt = &s->T[k];
        if (!rt->copy)
            continue;
        for (uint32_t j = 0; j < rt->t.n_shards; j++) {
            uint32_t i = rt->first + j;
            const ck__plan_shard *ps = ck__plan_shard_at(s->pcopy, i);
            if (!ps->bytes)
                continue;
            s->fills[i] = (fill_src){ .rs = s, .tensor = k, .box = ps->box };
            rf.srcs[rf.shard_src[i]].fill = fill;
            rf.srcs[rf.shard_src[i]].arg = &s->fills[i];
            s->ext_first[sh0 + j] = s->next;
            s->shards[sh0 + j].n_extents = 1;
            uint32_t file = first_file + rf.file_of[ps->writer] - 1;
            if ((r = push_ext(s, (ck_extent){ .file = file, .off = ps->file_off,
                                              .len = ps->bytes })) < 0)
                goto out;
            s->st->bytes_copied += ps->bytes;
        }
    }
    /* The pool hashes, and runs the fills in parallel: reads of different blocks then
     * overlap each other and the writes. */
    if ((r = ck__hashpool_new(s->o->hash_threads, &pool)) < 0 ||
        (r = ck_readers_open_ckpt(s->src, &s->readers, err)) < 0) {
        ck_err_set(err, r, "starting the copy workers: %s", strerror(-r));
        goto out;
    }
    ck__writer_opts wo = { .engine = s->e, .dir = s->rootfd, .pool = pool, .no_hash = !hashed,
                          .fill_threadsafe = true, .block_size = block,
                          .mem_limit = s->o->mem_limit, .log = s->o->log,
                          .progress = s->o->progress, .cb_arg = s->o->cb_arg };
    ck__writer_stats ws = { 0 };
    r = ck__write_files(&wo, rf.wf, rf.n, &ws, err);
    if (r < 0 && s->fill_err.code)
        ck_err_set(err, r, "%s", ck_err_msg(&s->fill_err));
    s->st->files_written = rf.n;
    s->st->file_bytes = ws.bytes;
    s->st->direct = ws.direct;
out:
    if (r == -ENOMEM)
        ck_err_set(err, r, "checkpoint %s: out of memory laying out the copies", s->o->name);
    ck__hashpool_free(pool);
    ck_readers_close(s->readers);
    s->readers = NULL;
    ck__rank_files_free(&rf);
    return r;
}

static void rs_free(rs *s)
{
    if (s->hashes)
        for (uint32_t f = 0; f < s->nfiles; f++)
            free(s->hashes[f]);
    free(s->hashes);
    for (uint32_t i = 0; i < s->nblobs; i++)
        free((void *)s->blobs[i].data);
    free(s->blobs);
    ck__plan_free(s->pref);
    ck__plan_free(s->pcopy);
    free(s->T);
    free(s->shards);
    free(s->ext);
    free(s->ext_first);
    free(s->files);
    free(s->link_of);
    free(s->fills);
    ck__pending_unlock(s->rootfd, s->o->name, &s->lock);
    if (s->rootfd >= 0)
        s->e->ops->close(s->e, s->rootfd);
}

/* One whole attempt: lay out, link, copy, publish. -EXDEV without a message when a
 * link was refused across file systems, so that the caller can retry as a copy. */
static int attempt(ck_ckpt *src, const ck_reshard_opts *o, bool force_copy,
                   ck_reshard_stats *st, ck_err *err)
{
    const ck_info *in = ck_get_info(src);
    rs S = { .src = src, .o = o, .e = o->engine ? o->engine : ck_engine_default(), .st = st,
             .max_ext = o->max_extents ? o->max_extents : 16, .lock = -1, .rootfd = -1,
             .err_mu = PTHREAD_MUTEX_INITIALIZER };
    rs *s = &S;
    bool committed = false;
    if (o->pl)
        memcpy(S.pl, o->pl, (size_t)o->mesh->ndim * sizeof *S.pl);
    else
        ck_placements_default(o->mesh->ndim, S.pl);
    int r = ck_tensors_each(src, collect_tensor, s, err);
    if (r == 0)
        r = ck_blobs_each(src, collect_blob, s, err);
    if (r < 0 || (r = ck__plan_new(o->mesh, &s->pref)) < 0 ||
        (r = ck__plan_new(o->mesh, &s->pcopy)) < 0)
        goto out;
    qsort(s->T, s->nt, sizeof *s->T, by_id);
    /* Shard counts are known before any layout: allocate the records once. */
    uint64_t nsh = 0;
    for (uint32_t k = 0; k < s->nt; k++) {
        rtensor *rt = &s->T[k];
        rt->t.id = k;
        tensor_pl(S.pl, o->mesh->ndim, rt->t.ndim, rt->t.pl);
        uint64_t n = 1;
        for (int d = 0; d < o->mesh->ndim; d++)
            if (rt->t.pl[d].kind == CK_SHARD)
                n *= o->mesh->size[d];
        nsh += n;
    }
    uint32_t nfmax = in->n_files + (uint32_t)ck_mesh_world(o->mesh);
    s->shards = calloc(nsh ? nsh : 1, sizeof *s->shards);
    s->ext_first = calloc(nsh ? nsh : 1, sizeof *s->ext_first);
    s->files = calloc(nfmax, sizeof *s->files);
    s->hashes = calloc(nfmax, sizeof *s->hashes);
    s->link_of = calloc(in->n_files ? in->n_files : 1, sizeof *s->link_of);
    if (!s->shards || !s->ext_first || !s->files || !s->hashes || !s->link_of) {
        r = ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory", o->name);
        goto out;
    }
    for (uint32_t k = 0; k < s->nt && r == 0; k++)
        r = lay_out(s, k, force_copy || o->mode == CK_RESHARD_COPY, err);
    if (r < 0)
        goto out;
    /* A linked file's hashes carry over; with none recorded the new checkpoint can
     * have none either, as hashing its links would mean reading them. */
    bool hashed = in->hashed || s->next == 0;
    if ((r = s->rootfd = ck__root_open_engine(s->e, o->root, err)) < 0 ||
        (r = ck__pending_create(s->e, s->rootfd, o->root, o->name, NULL, true, NULL,
                                s->pending, &s->lock, err)) < 0)
        goto out;
    if ((r = link_files(s, hashed, err)) < 0 || (r = write_copies(s, hashed, in->block_size, err)) < 0)
        goto out;
    for (uint64_t i = 0; i < s->nshards; i++)
        s->shards[i].ext = s->ext + s->ext_first[i];
    ck_info info = { .major = CK_FORMAT_MAJOR, .minor = CK_FORMAT_MINOR, .step = in->step,
                     .mesh = *o->mesh, .block_size = in->block_size, .hashed = hashed,
                     .n_tensors = s->nt, .n_shards = s->nshards, .n_files = s->nfiles,
                     .n_blobs = s->nblobs, .tensor_bytes = in->tensor_bytes };
    snprintf(info.name, sizeof info.name, "%s", o->name);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    info.time_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    for (uint32_t f = 0; f < s->nfiles; f++)
        info.data_bytes += s->files[f].size;
    st->bytes_linked = info.tensor_bytes - st->bytes_copied;
    st->tensors_copied = s->nt - st->tensors_linked;
    ck_tensor *tens = malloc((s->nt ? s->nt : 1) * sizeof *tens);
    if (!tens) {
        r = -ENOMEM;
        goto out;
    }
    for (uint32_t k = 0; k < s->nt; k++)
        tens[k] = s->T[k].t;
    ck__manifest m = { .info = info, .tensors = tens, .shards = s->shards, .files = s->files,
                      .hashes = (const uint8_t *const *)s->hashes, .blobs = s->blobs };
    r = ck__publish(s->e, s->rootfd, o->root, s->pending, &m, !o->no_catalog, &committed,
                    o->log, o->cb_arg, err);
    free(tens);
out:
    if (!committed && s->pending[0])
        ck__pending_remove(s->e, s->rootfd, o->root, s->pending, s->files, s->nfiles);
    rs_free(s);
    return r;
}

int ck_reshard(ck_ckpt *src, const ck_reshard_opts *o, ck_reshard_stats *st, ck_err *err)
{
    ck_reshard_stats local;
    if (!st)
        st = &local;
    double t0 = now_s();
    int r = ck_name_check("checkpoint", o->name, err);
    if (r < 0)
        return r;
    if ((r = ck__reshard_check(src, o->mesh, o->pl, err)) < 0)
        return r;
    /* Taken already (anything there, a link too: the commit's rename would refuse it):
     * said before any work; the commit checks again under the name's lock. */
    struct stat sb;
    int rootfd = ck__root_open(o->root, err);
    if (rootfd < 0)
        return rootfd;
    r = ck__statat(rootfd, o->name, &sb);
    close(rootfd);
    if (r == 0)
        return ck_err_set(err, -EEXIST, "%s: a checkpoint named %s already exists", o->root,
                          o->name);
    *st = (ck_reshard_stats){ 0 };
    r = attempt(src, o, false, st, err);
    if (r == -EXDEV) {
        rs S = { .o = o };
        say(&S, "%s is on another file system than the source: hard links are impossible, "
            "copying instead (as --copy)", o->root);
        *st = (ck_reshard_stats){ .exdev_fallback = true };
        r = attempt(src, o, true, st, err);
        st->exdev_fallback = true;
    }
    st->seconds = now_s() - t0;
    return r;
}
