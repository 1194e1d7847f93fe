/* save.c - writing a checkpoint and committing it (see ck/save.h).
 *
 * The commit protocol of docs/FORMAT.md, step by step, every step through the engine:
 *   1. mkdir ROOT/.pending/NAME.XXXXXX
 *   2. create, preallocate, write and fsync each data file       (ck_write_files)
 *   3. write and fsync the manifest                              (ck_manifest_write)
 *   4. fsync the pending directory: its entries are now durable
 *   5. rename it to ROOT/NAME, refusing to replace anything      (the commit point)
 *   6. fsync ROOT: the rename is durable
 *   7. record the checkpoint in the catalog                      (derived state)
 * A crash before 5 leaves only .pending debris; after 5, a complete checkpoint.
 */
#include "ck/save.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ck/catalog.h"
#include "ck/plan.h"
#include "manifest.h"

typedef struct shard_src {
    const void *mem;
    ck_fill_fn fill;
    void *arg;
} shard_src;

struct ck_save {
    char root[PATH_MAX];
    char name[CK_NAME_MAX];
    uint64_t step;
    ck_save_opts o;
    ck_engine *e;
    ck_plan *plan;
    ck_tensor *tensors;
    uint32_t ntensors, captensors;
    uint32_t *tensor_first;        /* first plan shard of each tensor */
    uint32_t *index;               /* open-addressing name -> tensor+1 */
    uint32_t index_cap;
    shard_src *src;                /* per plan shard */
    uint32_t capsrc;
    ck_blob_rec *blobs;
    uint32_t nblobs, capblobs;
    char pending[PATH_MAX];        /* set once created */
};

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    while (*s)
        h = (h ^ (uint8_t)*s++) * 0x100000001b3ull;
    return h;
}

/* The slot of name in the index: its entry, or the empty one where it would go. */
static uint32_t *index_slot(const ck_save *s, const char *name)
{
    uint32_t mask = s->index_cap - 1;
    for (uint32_t i = (uint32_t)fnv1a(name) & mask;; i = (i + 1) & mask) {
        uint32_t *e = &s->index[i];
        if (*e == 0 || strcmp(s->tensors[*e - 1].name, name) == 0)
            return e;
    }
}

static int index_grow(ck_save *s)
{
    uint32_t cap = s->index_cap ? s->index_cap * 2 : 256;
    uint32_t *old = s->index, oldcap = s->index_cap;
    s->index = calloc(cap, sizeof *s->index);
    if (!s->index) {
        s->index = old;
        return -ENOMEM;
    }
    s->index_cap = cap;
    for (uint32_t i = 0; i < oldcap; i++)
        if (old[i])
            *index_slot(s, s->tensors[old[i] - 1].name) = old[i];
    free(old);
    return 0;
}

static const ck_tensor *find_tensor(const ck_save *s, const char *name, uint32_t *idx)
{
    if (!s->index_cap)
        return NULL;
    uint32_t e = *index_slot(s, name);
    if (!e)
        return NULL;
    *idx = e - 1;
    return &s->tensors[e - 1];
}

int ck_save_begin(ck_save **out, const char *root, const char *name, uint64_t step,
                  const ck_mesh *mesh, const ck_save_opts *opts, ck_err *err)
{
    int r = ck_name_check("checkpoint", name, err);
    if (r < 0)
        return r;
    if (mesh->ndim < 1 || mesh->ndim > CK_MAX_MESH_DIMS || ck_mesh_world(mesh) == 0 ||
        ck_mesh_world(mesh) > CK_MAX_WORLD)
        return ck_err_set(err, -EINVAL, "checkpoint %s: invalid mesh", name);
    struct stat st;
    if (stat(root, &st) < 0 || !S_ISDIR(st.st_mode))
        return ck_err_set(err, -ENOENT, "%s: the checkpoint root is not a directory", root);
    ck_save *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    if (snprintf(s->root, sizeof s->root, "%s", root) >= (int)sizeof s->root) {
        free(s);
        return ck_err_set(err, -ENAMETOOLONG, "%s: path too long", root);
    }
    snprintf(s->name, sizeof s->name, "%s", name);
    s->step = step;
    if (opts)
        s->o = *opts;
    s->e = s->o.engine ? s->o.engine : ck_engine_default();
    r = ck_plan_new(mesh, &s->plan);
    if (r < 0) {
        free(s);
        return r;
    }
    *out = s;
    return 0;
}

int ck_save_tensor(ck_save *s, const char *name, ck_dtype dtype, int ndim,
                   const uint64_t *shape, const ck_placement *pl, ck_err *err)
{
    int r = ck_name_check("tensor", name, err);
    if (r < 0)
        return r;
    uint32_t dummy;
    if (find_tensor(s, name, &dummy))
        return ck_err_set(err, -EEXIST, "checkpoint %s: duplicate tensor name %s", s->name, name);
    if (ck_dtype_size(dtype) == 0)
        return ck_err_set(err, -EINVAL, "tensor %s: unknown dtype code %d", name, (int)dtype);
    if (ndim < 0 || ndim > CK_MAX_NDIM)
        return ck_err_set(err, -EINVAL, "tensor %s: %d dims (at most %d)", name, ndim,
                          CK_MAX_NDIM);
    if (s->ntensors == s->captensors) {
        uint32_t cap = s->captensors ? s->captensors * 2 : 64;
        ck_tensor *t = realloc(s->tensors, cap * sizeof *t);
        uint32_t *f = t ? realloc(s->tensor_first, cap * sizeof *f) : NULL;
        if (t)
            s->tensors = t;
        if (!f)
            return -ENOMEM;
        s->tensor_first = f;
        s->captensors = cap;
    }
    if ((s->ntensors + 1) * 2 > s->index_cap && (r = index_grow(s)) < 0)
        return r;
    uint32_t first, count;
    r = ck_plan_add(s->plan, name, ndim, shape, ck_dtype_size(dtype), pl, &first, &count, err);
    if (r < 0)
        return r;
    if (first + count > s->capsrc) {
        uint32_t cap = s->capsrc ? s->capsrc : 64;
        while (cap < first + count)
            cap *= 2;
        shard_src *p = realloc(s->src, cap * sizeof *p);
        if (!p)
            return -ENOMEM;
        memset(p + s->capsrc, 0, (cap - s->capsrc) * sizeof *p);
        s->src = p;
        s->capsrc = cap;
    }
    ck_tensor *t = &s->tensors[s->ntensors];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->id = s->ntensors;
    t->dtype = dtype;
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    memcpy(t->pl, pl, (size_t)ck_plan_mesh(s->plan)->ndim * sizeof *pl);
    t->n_shards = count;
    s->tensor_first[s->ntensors] = first;
    *index_slot(s, name) = ++s->ntensors;
    return 0;
}

/* The plan shard that rank writes of tensor, or NULL when another replica writes it. */
static const ck_plan_shard *writes(const ck_save *s, const char *tensor, uint64_t rank,
                                   uint32_t *shard, ck_err *err)
{
    uint32_t t;
    if (!find_tensor(s, tensor, &t)) {
        ck_err_set(err, -ENOENT, "checkpoint %s: no tensor %s was declared", s->name, tensor);
        return NULL;
    }
    if (rank >= ck_mesh_world(ck_plan_mesh(s->plan))) {
        ck_err_set(err, -EINVAL, "tensor %s: rank %llu is outside the mesh", tensor,
                   (unsigned long long)rank);
        return NULL;
    }
    *shard = ck_plan_shard_of(s->plan, t, rank);
    const ck_plan_shard *ps = ck_plan_shard_at(s->plan, *shard);
    return ps->writer == rank ? ps : NULL;
}

bool ck_save_writes(const ck_save *s, const char *tensor, uint64_t rank)
{
    uint32_t idx;
    const ck_plan_shard *ps = writes(s, tensor, rank, &idx, NULL);
    return ps && ps->bytes > 0;
}

static int offer(ck_save *s, const char *tensor, uint64_t rank, shard_src src, ck_err *err)
{
    ck_err_clear(err);
    uint32_t idx;
    const ck_plan_shard *ps = writes(s, tensor, rank, &idx, err);
    if (!ps)
        return err && err->code ? err->code : 0;   /* a replica another rank writes */
    s->src[idx] = src;
    return 0;
}

int ck_save_shard(ck_save *s, const char *tensor, uint64_t rank, const void *data, ck_err *err)
{
    return offer(s, tensor, rank, (shard_src){ .mem = data }, err);
}

int ck_save_shard_fill(ck_save *s, const char *tensor, uint64_t rank, ck_fill_fn fill,
                       void *arg, ck_err *err)
{
    return offer(s, tensor, rank, (shard_src){ .fill = fill, .arg = arg }, err);
}

int ck_save_blob(ck_save *s, const char *name, const void *data, size_t len, ck_err *err)
{
    int r = ck_name_check("blob", name, err);
    if (r < 0)
        return r;
    if (len > CK_BLOB_MAX)
        return ck_err_set(err, -EFBIG, "blob %s: %zu bytes (at most %u; save tensors as tensors)",
                          name, len, CK_BLOB_MAX);
    for (uint32_t i = 0; i < s->nblobs; i++)
        if (!strcmp(s->blobs[i].name, name))
            return ck_err_set(err, -EEXIST, "checkpoint %s: duplicate blob name %s", s->name, name);
    if (s->nblobs == s->capblobs) {
        uint32_t cap = s->capblobs ? s->capblobs * 2 : 16;
        ck_blob_rec *b = realloc(s->blobs, cap * sizeof *b);
        if (!b)
            return -ENOMEM;
        s->blobs = b;
        s->capblobs = cap;
    }
    void *copy = malloc(len ? len : 1);
    if (!copy)
        return -ENOMEM;
    memcpy(copy, data, len);
    ck_blob_rec *b = &s->blobs[s->nblobs++];
    snprintf(b->name, sizeof b->name, "%s", name);
    b->data = copy;
    b->len = len;
    return 0;
}

static void save_free(ck_save *s)
{
    ck_plan_free(s->plan);
    free(s->tensors);
    free(s->tensor_first);
    free(s->index);
    free(s->src);
    for (uint32_t i = 0; i < s->nblobs; i++)
        free((void *)s->blobs[i].data);
    free(s->blobs);
    free(s);
}

/* Removes what the save wrote under .pending; best effort, through the engine so
 * that a "crashed" engine leaves the debris a real crash would. */
static void remove_pending(ck_save *s, const ck_file *files, uint32_t nfiles)
{
    if (!s->pending[0])
        return;
    char path[PATH_MAX + CK_FILE_NAME_MAX];
    for (uint32_t f = 0; f < nfiles; f++) {
        snprintf(path, sizeof path, "%s/%s", s->pending, files[f].name);
        s->e->ops->unlink(s->e, path);
    }
    snprintf(path, sizeof path, "%s/%s", s->pending, CK_MANIFEST);
    s->e->ops->unlink(s->e, path);
    s->e->ops->rmdir(s->e, s->pending);
}

void ck_save_abort(ck_save *s)
{
    if (s)
        save_free(s);
}

static int make_pending(ck_save *s, ck_err *err)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/%s", s->root, CK_PENDING);
    int r = s->e->ops->mkdir(s->e, dir, 0755);
    if (r < 0 && r != -EEXIST)
        return ck_err_set(err, r, "%s: mkdir: %s", dir, strerror(-r));
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t tag = (uint64_t)getpid() << 32 ^ (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 20;
    for (int tries = 0; tries < 16; tries++, tag += 0x9E3779B97F4A7C15ull) {
        if (snprintf(s->pending, sizeof s->pending, "%s/%s.%012llx", dir, s->name,
                     (unsigned long long)(tag & 0xffffffffffffull)) >= (int)sizeof s->pending)
            return ck_err_set(err, -ENAMETOOLONG, "%s: path too long", dir);
        r = s->e->ops->mkdir(s->e, s->pending, 0755);
        if (r != -EEXIST)
            break;
    }
    if (r < 0) {
        ck_err_set(err, r, "%s: mkdir: %s", s->pending, strerror(-r));
        s->pending[0] = '\0';
    }
    return r;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The manifest's view and the writer's: files, their sources, and the shard records. */
typedef struct layout {
    ck_file *files;
    uint32_t nfiles;
    ck_wfile *wfiles;
    ck_src *srcs;
    char (*paths)[PATH_MAX];
    ck_shard *shards;
    ck_extent *ext;
    uint8_t **hashes;
} layout;

static void layout_free(layout *L)
{
    if (L->hashes)
        for (uint32_t f = 0; f < L->nfiles; f++)
            free(L->hashes[f]);
    free(L->hashes);
    free(L->files);
    free(L->wfiles);
    free(L->srcs);
    free(L->paths);
    free(L->shards);
    free(L->ext);
}

static int build_layout(ck_save *s, layout *L, uint32_t block, ck_err *err)
{
    const ck_mesh *mesh = ck_plan_mesh(s->plan);
    uint64_t world = ck_mesh_world(mesh);
    uint32_t nsh = ck_plan_nshards(s->plan);
    uint32_t *file_of = calloc(world, sizeof *file_of);   /* rank -> file id + 1 */
    if (!file_of)
        return -ENOMEM;
    for (uint64_t r = 0; r < world; r++)
        if (ck_plan_file_size(s->plan, r) > 0)
            file_of[r] = ++L->nfiles;
    uint32_t nf = L->nfiles ? L->nfiles : 1;
    L->files = calloc(nf, sizeof *L->files);
    L->wfiles = calloc(nf, sizeof *L->wfiles);
    L->paths = calloc(nf, sizeof *L->paths);
    L->hashes = calloc(nf, sizeof *L->hashes);
    L->srcs = calloc(nsh ? nsh : 1, sizeof *L->srcs);
    L->shards = calloc(nsh ? nsh : 1, sizeof *L->shards);
    L->ext = calloc(nsh ? nsh : 1, sizeof *L->ext);
    int r = 0;
    if (!L->files || !L->wfiles || !L->paths || !L->hashes || !L->srcs || !L->shards || !L->ext) {
        r = -ENOMEM;
        goto out;
    }
    for (uint64_t rank = 0; rank < world; rank++) {
        uint32_t f = file_of[rank];
        if (!f--)
            continue;
        ck_file *cf = &L->files[f];
        snprintf(cf->name, sizeof cf->name, "rank-%05llu.dat", (unsigned long long)rank);
        cf->size = ck_plan_file_size(s->plan, rank);
        cf->rank = (uint32_t)rank;
        snprintf(L->paths[f], PATH_MAX, "%s/%s", s->pending, cf->name);
        L->wfiles[f].path = L->paths[f];
        L->wfiles[f].size = cf->size;
        if (!s->o.no_hash) {
            L->hashes[f] = malloc(((cf->size + block - 1) / block) * CK_HASH_LEN + 1);
            if (!L->hashes[f]) {
                r = -ENOMEM;
                goto out;
            }
            L->wfiles[f].hashes = L->hashes[f];
        }
    }
    /* Plan shards are in (tensor, index) order, so each file's runs come out sorted:
     * a rank's file offsets grow as the plan assigns them. Count, then place. */
    uint32_t *pos = calloc(nf, sizeof *pos);
    if (!pos) {
        r = -ENOMEM;
        goto out;
    }
    for (uint32_t i = 0; i < nsh; i++) {
        const ck_plan_shard *ps = ck_plan_shard_at(s->plan, i);
        if (ps->bytes)
            L->wfiles[file_of[ps->writer] - 1].nsrcs++;
    }
    uint32_t acc = 0;
    for (uint32_t f = 0; f < L->nfiles; f++) {
        pos[f] = acc;
        L->wfiles[f].srcs = L->srcs + acc;
        acc += L->wfiles[f].nsrcs;
    }
    for (uint32_t t = 0; t < s->ntensors && r == 0; t++) {
        const ck_tensor *ten = &s->tensors[t];
        for (uint32_t j = 0; j < ten->n_shards; j++) {
            uint32_t i = s->tensor_first[t] + j;
            const ck_plan_shard *ps = ck_plan_shard_at(s->plan, i);
            ck_shard *sh = &L->shards[i];
            sh->tensor = t;
            sh->idx = j;
            ck_mesh_coord(mesh, ps->writer, sh->coord);
            sh->box = ps->box;
            sh->ext = &L->ext[i];
            if (!ps->bytes)
                continue;
            const shard_src *src = &s->src[i];
            if (!src->mem && !src->fill) {
                char c[64];
                ck_mesh_format(mesh, c, 0);
                r = ck_err_set(err, -EINVAL, "checkpoint %s: tensor %s: rank %llu never offered "
                               "its shard %u", s->name, ten->name,
                               (unsigned long long)ps->writer, j);
                break;
            }
            uint32_t f = file_of[ps->writer] - 1;
            sh->n_extents = 1;
            L->ext[i] = (ck_extent){ .file = f, .off = ps->file_off, .len = ps->bytes };
            L->srcs[pos[f]++] = (ck_src){ .file_off = ps->file_off, .len = ps->bytes,
                                          .mem = src->mem, .fill = src->fill, .arg = src->arg };
        }
    }
    free(pos);
out:
    free(file_of);
    return r;
}

int ck_save_commit(ck_save *s, ck_save_stats *stats, ck_err *err)
{
    double t0 = now_s();
    ck_save_stats st = { 0 };
    layout L = { 0 };
    ck_hashpool *pool = NULL;
    uint32_t block = s->o.block_size ? s->o.block_size : CK_BLOCK_SIZE_DEFAULT;
    char final[PATH_MAX + CK_NAME_MAX], path[PATH_MAX + CK_NAME_MAX];
    struct stat sb;
    int r;
    bool committed = false;

    snprintf(final, sizeof final, "%s/%s", s->root, s->name);
    if (lstat(final, &sb) == 0) {
        r = ck_err_set(err, -EEXIST, "%s: a checkpoint named %s already exists", s->root, s->name);
        goto out;
    }
    if ((r = make_pending(s, err)) < 0 || (r = build_layout(s, &L, block, err)) < 0)
        goto out;
    if (!s->o.no_hash && (r = ck_hashpool_new(s->o.hash_threads, &pool)) < 0) {
        ck_err_set(err, r, "starting hash threads: %s", strerror(-r));
        goto out;
    }
    ck_writer_opts wo = { .engine = s->e, .pool = pool, .block_size = block,
                          .io_size = s->o.io_size, .mem_limit = s->o.mem_limit,
                          .log = s->o.log, .progress = s->o.progress, .cb_arg = s->o.cb_arg };
    ck_writer_stats ws;
    r = ck_write_files(&wo, L.wfiles, L.nfiles, &ws, err);
    st.file_bytes = ws.bytes;
    st.write_seconds = ws.seconds;
    st.direct = ws.direct;
    if (r < 0)
        goto out;

    ck_info info = { .major = CK_FORMAT_MAJOR, .minor = CK_FORMAT_MINOR, .step = s->step,
                     .mesh = *ck_plan_mesh(s->plan), .block_size = block,
                     .hashed = !s->o.no_hash, .n_tensors = s->ntensors,
                     .n_shards = ck_plan_nshards(s->plan), .n_files = L.nfiles,
                     .n_blobs = s->nblobs };
    snprintf(info.name, sizeof info.name, "%s", s->name);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    info.time_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    for (uint32_t f = 0; f < L.nfiles; f++)
        info.data_bytes += L.files[f].size;
    for (uint32_t i = 0; i < info.n_shards; i++)
        info.tensor_bytes += ck_plan_shard_at(s->plan, i)->bytes;
    st.tensor_bytes = info.tensor_bytes;
    ck_manifest m = { .info = info, .tensors = s->tensors, .shards = L.shards,
                      .files = L.files, .hashes = (const uint8_t *const *)L.hashes,
                      .blobs = s->blobs };
    snprintf(path, sizeof path, "%s/%s", s->pending, CK_MANIFEST);
    if ((r = ck_manifest_write(s->e, path, &m, err)) < 0)
        goto out;
    if ((r = ck_engine_fsync_path(s->e, s->pending)) < 0) {
        ck_err_set(err, r, "%s: fsync: %s", s->pending, strerror(-r));
        goto out;
    }
    if ((r = s->e->ops->rename(s->e, s->pending, final)) < 0) {
        ck_err_set(err, r, "%s: commit rename to %s: %s", s->pending, final,
                   r == -EEXIST ? "a checkpoint of that name appeared meanwhile" : strerror(-r));
        goto out;
    }
    committed = true;
    if ((r = ck_engine_fsync_path(s->e, s->root)) < 0) {
        ck_err_set(err, r, "%s: committed, but the fsync of the root failed: %s", s->root,
                   strerror(-r));
        goto out;
    }
    if (!s->o.no_catalog) {
        /* The catalog is derived: a failure here leaves a committed checkpoint that
         * reconciling (ckptd at start, ckpt-inspect --rebuild-catalog) will list. */
        if ((r = s->e->ops->step(s->e, "catalog")) < 0 ||
            (r = ck_catalog_put(s->root, &info, err)) < 0)
            ck_err_set(err, r, "%s: committed, but not yet in the catalog", final);
    }
out:
    if (!committed)
        remove_pending(s, L.files, L.nfiles);
    ck_hashpool_free(pool);
    layout_free(&L);
    save_free(s);
    st.total_seconds = now_s() - t0;
    if (stats)
        *stats = st;
    return r;
}
