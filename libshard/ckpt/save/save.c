/* save.c - writing a checkpoint and committing it (see ck/save.h).
 *
 * The commit protocol of docs/FORMAT.md, step by step, every step through the engine:
 *   1. mkdir ROOT/.pending/NAME.XXXXXX
 *   2. create, preallocate, write and fsync each data file       (ck__write_files)
 *   3. write and fsync the manifest                              (ck__manifest_write)
 *   4. fsync the pending directory: its entries are now durable
 *   5. rename it to ROOT/NAME, refusing to replace anything      (the commit point)
 *   6. fsync ROOT: the rename is durable
 *   7. record the checkpoint in the catalog                      (derived state)
 * A crash before 5 leaves only .pending debris; after 5, a complete checkpoint.
 */
#include "ck/save.h"
#include "io/rootfs.h"
#include "save/save_int.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ck/catalog.h"
#include "model/plan.h"
#include "format/owner.h"
#include "save/commit.h"
#include "save/image.h"
#include "save/part.h"
#include "save/rankfiles.h"
#include "format/copy.h"
#include "format/manifest.h"
#include "format/decl.h"
#include "model/grow.h"
#include "model/index.h"

/* The manifest's view and the writer's: the files and their runs, and the shard
 * records. */
typedef struct layout {
    ck__rank_files F;
    ck_shard *shards;
    ck_extent *ext;
} layout;

struct ck_save {
    char root[PATH_MAX];
    char name[CK_NAME_MAX];
    uint64_t step;
    ck_save_opts o;
    ck_engine *e;
    ck_decl *decl;                 /* sealed: the tensors, their names, the plan */
    const ck__plan *plan;          /* the declaration's */
    ck__index blob_index;
    ck__shard_src *src;            /* per plan shard */
    ck__blob_rec *blobs;
    uint32_t nblobs;
    size_t capblobs;
    int rootfd;                    /* the root, held open (through the engine) */
    char pending[PATH_MAX];        /* set once created */
    int lock;                      /* the save's lock while this process owns it, or -1 */
    char job[CK_JOB_HEX_MAX];      /* the job saving it, in hex (ck__save_job); "": none */
    /* Set by ck__save_share or ck__save_join (a save shared by several engines): */
    bool shared;                   /* other processes write into pending too */
    bool *adopted;                 /* per rank: its part record was adopted */
    /* Set by ck__save_prepare: */
    bool prepared;
    uint32_t block;
    const void **image;            /* per file: the whole file in memory, or NULL */
    bool *written;                 /* per file: durable */
    ck__hashpool *pool;
    void (*landed)(void *arg, const char *file, uint64_t bytes);
    void *landed_arg;
    pthread_mutex_t mu;            /* stats and written[], for concurrent rank writes */
    ck_save_stats st;
    layout L;
};

static const char *blob_name(const void *owner, uint32_t i)
{
    return ((const ck_save *)owner)->blobs[i].name;
}

/* The index of tensor name in s's declaration, or -1. */
static int64_t find_tensor(const ck_save *s, const char *name)
{
    return ck__decl_find(s->decl, name);
}

int ck_save_begin(ck_save **out, const char *root, const char *name, uint64_t step,
                  ck_decl *decl, const ck_save_opts *opts, ck_err *err)
{
    int r = ck_name_check("checkpoint", name, err);
    if (r == 0 && (r = ck_decl_seal(decl, err)) < 0)
        ck_err_set(err, r, "checkpoint %s", name);
    if (r < 0)
        return r;
    ck_save *s = calloc(1, sizeof *s);
    uint32_t n = ck__plan_nshards(ck__decl_plan(decl));
    if (!s || !(s->src = calloc(n ? n : 1, sizeof *s->src))) {
        free(s);
        return ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory", name);
    }
    if (snprintf(s->root, sizeof s->root, "%s", root) >= (int)sizeof s->root) {
        free(s->src);
        free(s);
        return ck_err_set(err, -ENAMETOOLONG, "%s: path too long", root);
    }
    snprintf(s->name, sizeof s->name, "%s", name);
    s->step = step;
    if (opts)
        s->o = *opts;
    s->e = s->o.engine ? s->o.engine : ck_engine_default();
    /* Everything of the save is reached beneath this descriptor (save/commit.h). */
    if ((s->rootfd = ck__root_open_engine(s->e, root, err)) < 0) {
        r = s->rootfd == -ENOTDIR ? -ENOENT : s->rootfd;
        free(s->src);
        free(s);
        return r;
    }
    s->decl = ck_decl_ref(decl);
    s->plan = ck__decl_plan(decl);
    pthread_mutex_init(&s->mu, NULL);
    s->st.direct = true;
    s->lock = -1;
    *out = s;
    return 0;
}

/* The plan shard that rank writes of tensor, or NULL when another replica writes it. */
static const ck__plan_shard *writes(const ck_save *s, const char *tensor, uint64_t rank,
                                   uint32_t *shard, ck_err *err)
{
    int64_t t = find_tensor(s, tensor);
    if (t < 0) {
        ck_err_set(err, -ENOENT, "checkpoint %s: no tensor %s was declared", s->name, tensor);
        return NULL;
    }
    if (ck__plan_is_boxes(s->plan, (uint32_t)t)) {
        ck_err_set(err, -EINVAL, "tensor %s is a box list: offer its boxes (ck_save_box)",
                   tensor);
        return NULL;
    }
    if (rank >= ck_mesh_world(ck__plan_mesh(s->plan))) {
        ck_err_set(err, -EINVAL, "tensor %s: rank %llu is outside the mesh", tensor,
                   (unsigned long long)rank);
        return NULL;
    }
    *shard = ck__plan_shard_of(s->plan, (uint32_t)t, rank);
    const ck__plan_shard *ps = ck__plan_shard_at(s->plan, *shard);
    return ps->writer == rank ? ps : NULL;
}

bool ck_save_writes(const ck_save *s, const char *tensor, uint64_t rank)
{
    uint32_t idx, first, count;
    int64_t t = find_tensor(s, tensor);
    if (t >= 0 && ck__plan_is_boxes(s->plan, (uint32_t)t)) {
        ck__plan_range(s->plan, (uint32_t)t, &first, &count);
        for (uint32_t i = first; i < first + count; i++) {
            const ck__plan_shard *ps = ck__plan_shard_at(s->plan, i);
            if (ps->writer == rank && ps->bytes)
                return true;
        }
        return false;
    }
    const ck__plan_shard *ps = writes(s, tensor, rank, &idx, NULL);
    return ps && ps->bytes > 0;
}

static int offer(ck_save *s, const char *tensor, uint64_t rank, ck__shard_src src,
                 ck_err *err)
{
    ck_err_clear(err);
    uint32_t idx;
    const ck__plan_shard *ps = writes(s, tensor, rank, &idx, err);
    if (!ps)
        return err && err->code ? err->code : 0;   /* a replica another rank writes */
    s->src[idx] = src;
    return 0;
}

int ck_save_shard(ck_save *s, const char *tensor, uint64_t rank, const void *data, ck_err *err)
{
    return offer(s, tensor, rank, (ck__shard_src){ .mem = data }, err);
}

int ck_save_shard_fill(ck_save *s, const char *tensor, uint64_t rank, ck_fill_fn fill,
                       void *arg, ck_err *err)
{
    return offer(s, tensor, rank, (ck__shard_src){ .fill = fill, .arg = arg }, err);
}

static int offer_box(ck_save *s, const char *tensor, uint32_t box, ck__shard_src src,
                     ck_err *err)
{
    uint32_t first, count;
    int64_t t = find_tensor(s, tensor);
    if (t < 0)
        return ck_err_set(err, -ENOENT, "checkpoint %s: no tensor %s was declared", s->name,
                          tensor);
    if (!ck__plan_is_boxes(s->plan, (uint32_t)t))
        return ck_err_set(err, -EINVAL, "tensor %s has placements, not a box list: offer "
                          "its shards (ck_save_shard)", tensor);
    ck__plan_range(s->plan, (uint32_t)t, &first, &count);
    if (box >= count)
        return ck_err_set(err, -EINVAL, "tensor %s: box %u does not exist (it has %u)", tensor,
                          box, count);
    s->src[first + box] = src;
    return 0;
}

int ck_save_box(ck_save *s, const char *tensor, uint32_t box, const void *data, ck_err *err)
{
    return offer_box(s, tensor, box, (ck__shard_src){ .mem = data }, err);
}

int ck_save_box_fill(ck_save *s, const char *tensor, uint32_t box, ck_fill_fn fill,
                     void *arg, ck_err *err)
{
    return offer_box(s, tensor, box, (ck__shard_src){ .fill = fill, .arg = arg }, err);
}

int ck_save_blob(ck_save *s, const char *name, const void *data, size_t len, ck_err *err)
{
    int r = ck_key_check("blob", name, err);
    if (r < 0)
        return r;
    if (len > CK_BLOB_MAX)
        return ck_err_set(err, -EFBIG, "blob %s: %zu bytes (at most %u; save tensors as tensors)",
                          name, len, CK_BLOB_MAX);
    if (ck__index_find(&s->blob_index, blob_name, s, name))
        return ck_err_set(err, -EEXIST, "checkpoint %s: duplicate blob name %s", s->name, name);
    if ((r = ck__blob_append(&s->blobs, &s->nblobs, &s->capblobs, name, data, len)) < 0)
        return r;
    return ck__index_add(&s->blob_index, blob_name, s, s->nblobs - 1, s->nblobs - 1);
}

static void layout_free(layout *L);

static void save_free(ck_save *s)
{
    ck__pending_unlock(s->rootfd, s->name, &s->lock);
    s->e->ops->close(s->e, s->rootfd);
    ck__hashpool_free(s->pool);
    layout_free(&s->L);
    free(s->image);
    free(s->written);
    free(s->adopted);
    pthread_mutex_destroy(&s->mu);
    ck_decl_free(s->decl);
    ck__index_free(&s->blob_index);
    free(s->src);
    for (uint32_t i = 0; i < s->nblobs; i++)
        free((void *)s->blobs[i].data);
    free(s->blobs);
    free(s);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}


static void layout_free(layout *L)
{
    ck__rank_files_free(&L->F);
    free(L->shards);
    free(L->ext);
    memset(L, 0, sizeof *L);
}

/* Files and their runs from the plan, then the shard records with their extents. */
static int build_layout(ck_save *s)
{
    layout *L = &s->L;
    const ck_mesh *mesh = ck__plan_mesh(s->plan);
    uint32_t nsh = ck__plan_nshards(s->plan);
    int r = ck__rank_files_layout(s->plan, s->pending, strlen(s->root) + 1,
                                  s->o.no_hash ? 0 : s->block, &L->F);
    if (r < 0)
        return r;
    size_t nf = L->F.n ? L->F.n : 1, ns = nsh ? nsh : 1;
    L->shards = calloc(ns, sizeof *L->shards);
    L->ext = calloc(ns, sizeof *L->ext);
    s->image = calloc(nf, sizeof *s->image);
    s->written = calloc(nf, sizeof *s->written);
    s->adopted = calloc(ck_mesh_world(mesh), sizeof *s->adopted);
    if (!L->shards || !L->ext || !s->image || !s->written || !s->adopted)
        return -ENOMEM;
    const ck_tensor *ts = ck__decl_tensors(s->decl);
    for (uint32_t t = 0; t < ck__decl_ntensors(s->decl); t++) {
        for (uint32_t j = 0; j < ts[t].n_shards; j++) {
            uint32_t i = ck__decl_first(s->decl, t) + j;
            const ck__plan_shard *ps = ck__plan_shard_at(s->plan, i);
            ck_shard *sh = &L->shards[i];
            sh->tensor = t;
            sh->idx = j;
            ck_mesh_coord(mesh, ps->writer, sh->coord);
            sh->box = ps->box;
            sh->ext = &L->ext[i];
            if (!ps->bytes)
                continue;
            sh->n_extents = 1;
            L->ext[i] = (ck_extent){ .file = L->F.file_of[ps->writer] - 1, .off = ps->file_off,
                                     .len = ps->bytes };
        }
    }
    return 0;
}

/* own: this process commits the save, so it holds the save's lock (save/commit.h). */
static int prepare_at(ck_save *s, const char *token, bool own, ck_err *err)
{
    if (s->prepared)
        return 0;
    s->block = s->o.block_size ? s->o.block_size : CK_BLOCK_SIZE_DEFAULT;
    int r = ck__pending_create(s->e, s->rootfd, s->root, s->name, token, own,
                               s->job[0] ? s->job : NULL, s->pending, &s->lock, err);
    if (r == 0)
        r = build_layout(s);
    /* The pool hashes, and fills blocks in parallel even when nothing is hashed. */
    if (r == 0 && (r = ck__hashpool_new(s->o.hash_threads, &s->pool)) < 0)
        ck_err_set(err, r, "starting worker threads: %s", strerror(-r));
    if (r == -ENOMEM)
        ck_err_set(err, r, "checkpoint %s: out of memory laying out the files", s->name);
    s->prepared = r == 0;
    return r;
}

void ck__save_job(ck_save *s, const char *job)
{
    snprintf(s->job, sizeof s->job, "%s", job);
}

int ck__save_prepare(ck_save *s, ck_err *err)
{
    return prepare_at(s, NULL, true, err);
}

/* The data file rank writes, into *f: 1, or 0 when it writes none. */
static int rank_file(const ck_save *s, uint64_t rank, uint32_t *f, ck_err *err)
{
    if (!s->prepared)
        return ck_err_set(err, -EINVAL, "checkpoint %s: ck__save_prepare first", s->name);
    if (rank >= ck_mesh_world(ck__plan_mesh(s->plan)))
        return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu is outside the mesh", s->name,
                          (unsigned long long)rank);
    if (s->L.F.file_of[rank] == 0)
        return 0;
    *f = s->L.F.file_of[rank] - 1;
    return 1;
}

void ck__save_on_landed(ck_save *s, void (*fn)(void *arg, const char *file, uint64_t bytes),
                        void *arg)
{
    s->landed = fn;
    s->landed_arg = arg;
}

int ck__save_rank_file(const ck_save *s, uint64_t rank, ck_file *out)
{
    uint32_t f = 0;
    int r = rank_file(s, rank, &f, NULL);
    if (r > 0)
        *out = s->L.F.files[f];
    return r > 0;
}

const char *ck__save_dir(const ck_save *s)
{
    return s->pending;
}

uint32_t ck__save_block_size(const ck_save *s)
{
    return s->block;
}

uint64_t ck__save_rank_bytes(const ck_save *s, uint64_t rank)
{
    return ck__plan_file_size(s->plan, rank);
}

const ck__plan *ck__save_plan(const ck_save *s)
{
    return s->plan;
}

int ck__save_rank_image(ck_save *s, uint64_t rank, const void *image, ck_err *err)
{
    int r = ck__save_prepare(s, err);
    if (r < 0)
        return r;
    if (rank >= ck_mesh_world(ck__plan_mesh(s->plan)))
        return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu is outside the mesh", s->name,
                          (unsigned long long)rank);
    uint32_t f = s->L.F.file_of[rank];
    if (f)
        s->image[f - 1] = image;
    return 0;
}

int ck__save_rank_sources(ck_save *s, uint64_t rank, const ck__shard_src *src, uint32_t nsrc,
                         ck_err *err)
{
    int r = ck__save_rank_image(s, rank, NULL, err);
    if (r < 0)
        return r;
    uint32_t n = ck__plan_nshards(s->plan);
    if (nsrc != n)
        return ck_err_set(err, -EPROTO, "checkpoint %s, rank %llu: %u sources for a plan of "
                          "%u shards", s->name, (unsigned long long)rank, nsrc, n);
    for (uint32_t i = 0; i < n; i++) {
        const ck__plan_shard *ps = ck__plan_shard_at(s->plan, i);
        if (ps->writer != rank || !ps->bytes)
            continue;
        if ((!src[i].mem && !src[i].fill) || src[i].placed)
            return ck_err_set(err, -EINVAL, "checkpoint %s: tensor %s: rank %llu gave no "
                              "source for its shard %u", s->name,
                              ck__decl_tensors(s->decl)[ps->tensor].name,
                              (unsigned long long)rank, i);
        s->src[i] = src[i];
    }
    return 0;
}

int ck__save_fill_rank(const ck_save *s, uint64_t rank, void *image, ck_err *err)
{
    if (rank >= ck_mesh_world(ck__plan_mesh(s->plan)))
        return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu is outside the mesh", s->name,
                          (unsigned long long)rank);
    uint32_t i = 0;
    int r = ck__rank_image(s->plan, rank, s->src, image, &i);
    if (r < 0) {
        const ck_tensor *t = &ck__decl_tensors(s->decl)[ck__plan_shard_at(s->plan, i)->tensor];
        char box[32] = "";
        if (ck_tensor_is_boxes(t))
            snprintf(box, sizeof box, " box %u", i - ck__decl_first(s->decl, t->id));
        if (!s->src[i].mem && !s->src[i].fill)
            ck_err_set(err, r, "checkpoint %s: tensor %s%s: rank %llu never offered its %s",
                       s->name, t->name, box, (unsigned long long)rank,
                       *box ? "bytes" : "shard");
        else
            ck_err_set(err, r, "checkpoint %s, rank %llu: filling tensor %s%s: %s", s->name,
                       (unsigned long long)rank, t->name, box, strerror(-r));
    }
    return r;
}

int ck__save_copy_rank(ck_save *s, uint64_t rank, void *image, ck_err *err)
{
    int r = ck__save_rank_image(s, rank, image, err);
    if (r == 0 && (r = ck__save_fill_rank(s, rank, image, err)) < 0)
        ck__save_rank_image(s, rank, NULL, NULL);   /* half built: not this rank's file */
    return r;
}

/* Points each run of file f at its bytes: the rank's file image, or the sources the
 * shards were offered with. */
static int bind_sources(ck_save *s, uint32_t f, ck_err *err)
{
    layout *L = &s->L;
    ck__wfile *wf = &L->F.wf[f];
    ck__src *src = (ck__src *)wf->srcs;
    for (uint32_t j = 0; j < wf->nsrcs; j++) {
        if (s->image[f]) {
            src[j].mem = (const uint8_t *)s->image[f] + src[j].file_off;
            continue;
        }
        uint32_t i = L->F.src_shard[(size_t)(src - L->F.srcs) + j];
        const ck__shard_src *ss = &s->src[i];
        if (!ss->mem && !ss->fill)
            return ck_err_set(err, -EINVAL, "checkpoint %s: tensor %s: rank %u never offered "
                              "its shard %u", s->name,
                              ck__decl_tensors(s->decl)[L->shards[i].tensor].name,
                              L->F.files[f].rank, L->shards[i].idx);
        src[j].mem = ss->mem;
        src[j].fill = ss->fill;
        src[j].arg = ss->arg;
    }
    return 0;
}

/* The writer's landed bytes of its file k, told by the file's name. */
typedef struct landing {
    ck_save *s;
    const uint32_t *ids;
} landing;

static void file_landed(void *arg, uint32_t k, uint64_t bytes)
{
    const landing *l = arg;
    l->s->landed(l->s->landed_arg, l->s->L.F.files[l->ids[k]].name, bytes);
}

/* Writes the listed files, durable when it returns 0. */
static int write_files(ck_save *s, const uint32_t *ids, uint32_t n, ck_err *err)
{
    ck__wfile *wf = malloc((n ? n : 1) * sizeof *wf);
    if (!wf)
        return -ENOMEM;
    int r = 0;
    for (uint32_t k = 0; k < n && r == 0; k++) {
        r = bind_sources(s, ids[k], err);
        wf[k] = s->L.F.wf[ids[k]];
    }
    ck__writer_stats ws = { .direct = true };
    if (r == 0) {
        ck__writer_opts wo = { .engine = s->e, .dir = s->rootfd, .pool = s->pool,
                              .no_hash = s->o.no_hash,
                              .fill_threadsafe = s->o.fill_threadsafe, .block_size = s->block,
                              .io_size = s->o.io_size, .mem_limit = s->o.mem_limit,
                              .log = s->o.log, .progress = s->o.progress, .cb_arg = s->o.cb_arg };
        landing l = { .s = s, .ids = ids };
        if (s->landed) {
            wo.landed = file_landed;
            wo.landed_arg = &l;
        }
        r = ck__write_files(&wo, wf, n, &ws, err);
    }
    free(wf);
    pthread_mutex_lock(&s->mu);
    s->st.file_bytes += ws.bytes;
    s->st.write_seconds += ws.seconds;
    s->st.direct = s->st.direct && ws.direct;
    for (uint32_t k = 0; k < n && r == 0; k++)
        s->written[ids[k]] = true;
    pthread_mutex_unlock(&s->mu);
    return r;
}

int ck__save_write_rank(ck_save *s, uint64_t rank, ck_err *err)
{
    uint32_t f = 0;
    int r = rank_file(s, rank, &f, err);
    if (r <= 0)
        return r;
    pthread_mutex_lock(&s->mu);
    bool done = s->written[f];
    pthread_mutex_unlock(&s->mu);
    if (done)
        return ck_err_set(err, -EALREADY, "checkpoint %s: rank %llu was written already",
                          s->name, (unsigned long long)rank);
    return write_files(s, &f, 1, err);
}

/* ---- one save, many processes ----
 * The ranks share ROOT/.pending/NAME.TOKEN: rank 0 creates it under a fresh token
 * (ck__save_share), the others open it (ck__save_join). Each rank writes its own file,
 * then proves it to rank 0 with its part record (save/part.h): its outcome and its
 * file's block hashes. Rank 0 needs nothing else from the others to commit. The saver
 * runs these steps for the engines that share a save (async/saver.c). */

static const char *token_of(const ck_save *s)
{
    return strrchr(s->pending, '.') + 1;
}

int ck__save_share(ck_save *s, char token[CK_TOKEN_MAX], ck_err *err)
{
    int r = prepare_at(s, NULL, true, err);
    if (r < 0)
        return r;
    s->shared = true;
    snprintf(token, CK_TOKEN_MAX, "%s", token_of(s));
    return 0;
}

int ck__save_join(ck_save *s, const char *token, uint64_t rank, ck_err *err)
{
    if (rank >= ck_mesh_world(ck__plan_mesh(s->plan)))
        return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu is outside the mesh", s->name,
                          (unsigned long long)rank);
    /* From here on the directory is the shared save's (another engine may have made it
     * already): no rank but 0, and 0 only once every part is accounted for, may
     * remove it. */
    s->shared = true;
    return prepare_at(s, token, false, err);
}

/* Bytes of rank's block hashes, known to every rank from the plan alone. */
static uint64_t n_hashes(const ck_save *s, uint64_t rank)
{
    uint32_t block = s->o.block_size ? s->o.block_size : CK_BLOCK_SIZE_DEFAULT;
    return s->o.no_hash ? 0 : (ck__plan_file_size(s->plan, rank) + block - 1) / block;
}

/* This rank's record: its outcome and, when it wrote its file, the file's hashes. */
static void part_of(const ck_save *s, uint64_t rank, const ck_err *outcome, ck__part *p)
{
    uint32_t f = s->L.F.file_of[rank];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", s->name);
    snprintf(p->token, sizeof p->token, "%s", token_of(s));
    p->rank = rank;
    p->world = ck_mesh_world(ck__plan_mesh(s->plan));
    p->code = outcome->code;
    p->file_size = ck__plan_file_size(s->plan, rank);
    p->block_size = s->block;
    p->hashed = !s->o.no_hash;
    if (!p->code && f && !s->written[f - 1]) {
        p->code = -EINVAL;
        snprintf(p->msg, sizeof p->msg, "its file was never written (ck__save_write_rank)");
    } else if (p->code) {
        snprintf(p->msg, sizeof p->msg, "%s", ck_err_msg(outcome));
    } else if (f) {
        p->n_hashes = n_hashes(s, rank);
        p->hashes = s->L.F.hashes[f - 1];
    }
}

int ck__save_part(ck_save *s, uint64_t rank, const ck_err *outcome, void **rec, size_t *len,
                 ck_err *err)
{
    if (!s->shared || !s->prepared)
        return ck_err_set(err, -EINVAL, "checkpoint %s: a part record needs ck__save_share or "
                          "ck__save_join first", s->name);
    if (rank >= ck_mesh_world(ck__plan_mesh(s->plan)))
        return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu is outside the mesh", s->name,
                          (unsigned long long)rank);
    ck__part p;
    part_of(s, rank, outcome, &p);
    *len = ck__part_size(&p);
    *rec = malloc(*len);
    int r = *rec ? ck__part_encode(&p, *rec) : -ENOMEM;
    if (r < 0) {
        free(*rec);
        *rec = NULL;
        return ck_err_set(err, r, "checkpoint %s, rank %llu: encoding its part record: %s",
                          s->name, (unsigned long long)rank, strerror(-r));
    }
    return 0;
}

/* What rank 0's own plan says a record of that rank must hold; NULL when it agrees. */
static const char *part_mismatch(const ck_save *s, const ck__part *p)
{
    if (strcmp(p->name, s->name) || strcmp(p->token, token_of(s)))
        return "it belongs to another save (checkpoint name or token)";
    if (p->world != ck_mesh_world(ck__plan_mesh(s->plan)))
        return "its world differs";
    if (p->rank >= p->world)
        return "its rank is outside the world";
    if (p->code)
        return NULL;      /* a failure carries no layout */
    if (p->file_size != ck__plan_file_size(s->plan, p->rank))
        return "its file size is not the one the plan gives that rank";
    if (p->block_size != s->block || p->hashed == s->o.no_hash)
        return "its block size or hashing differs";
    if (p->n_hashes != n_hashes(s, p->rank) && s->L.F.file_of[p->rank])
        return "its hash count is not its file's block count";
    return NULL;
}

int ck__save_adopt(ck_save *s, const void *rec, size_t len, ck_err *err)
{
    if (!s->shared || !s->prepared)
        return ck_err_set(err, -EINVAL, "checkpoint %s: adopting a part needs ck__save_share "
                          "first", s->name);
    ck__part p;
    ck_err why = { 0 };
    int r = ck__part_decode(rec, len, &p, &why);
    if (r < 0)
        return ck_err_set(err, r, "checkpoint %s: a part record was refused: %s", s->name,
                          ck_err_msg(&why));
    const char *bad = part_mismatch(s, &p);
    if (bad)
        return ck_err_set(err, -EBADMSG, "checkpoint %s: the part record of rank %llu was "
                          "refused: %s", s->name, (unsigned long long)p.rank, bad);
    if (p.code)
        return ck_err_set(err, p.code, "checkpoint %s: rank %llu could not write its part: %s",
                          s->name, (unsigned long long)p.rank, p.msg);
    if (s->adopted[p.rank])
        return ck_err_set(err, -EBADMSG, "checkpoint %s: the part record of rank %llu was "
                          "adopted already", s->name, (unsigned long long)p.rank);
    s->adopted[p.rank] = true;
    uint32_t f = s->L.F.file_of[p.rank];
    if (!f)
        return 0;
    pthread_mutex_lock(&s->mu);
    bool mine = s->written[f - 1];       /* written by this process: its hashes are ours */
    if (!mine && p.n_hashes)
        memcpy(s->L.F.hashes[f - 1], p.hashes, (size_t)p.n_hashes * CK_HASH_LEN);
    s->written[f - 1] = true;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void ck_save_abort(ck_save *s)
{
    if (!s)
        return;
    if (!s->shared)
        ck__pending_remove(s->e, s->rootfd, s->root, s->pending, s->L.F.files, s->L.F.n);
    save_free(s);
}

void ck__save_discard(ck_save *s)
{
    if (!s)
        return;
    if (s->prepared)
        ck__pending_remove(s->e, s->rootfd, s->root, s->pending, s->L.F.files, s->L.F.n);
    save_free(s);
}

/* The manifest of s, every file durable and every blob in: what ck__publish writes. */
static ck_info save_info(ck_save *s)
{
    ck_info info = { .major = CK_FORMAT_MAJOR, .minor = CK_FORMAT_MINOR, .step = s->step,
                     .mesh = *ck__plan_mesh(s->plan), .block_size = s->block,
                     .hashed = !s->o.no_hash, .n_tensors = ck__decl_ntensors(s->decl),
                     .n_shards = ck__plan_nshards(s->plan), .n_files = s->L.F.n,
                     .n_blobs = s->nblobs };
    snprintf(info.name, sizeof info.name, "%s", s->name);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    info.time_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    for (uint32_t f = 0; f < s->L.F.n; f++)
        info.data_bytes += s->L.F.files[f].size;
    for (uint32_t i = 0; i < info.n_shards; i++)
        info.tensor_bytes += ck__plan_shard_at(s->plan, i)->bytes;
    s->st.tensor_bytes = info.tensor_bytes;
    return info;
}

/* The ranks not yet durable, or adopted, refused by name; the others written. */
static int write_rest(ck_save *s, ck_err *err)
{
    uint32_t *todo = malloc((s->L.F.n ? s->L.F.n : 1) * sizeof *todo), n = 0;
    if (!todo)
        return ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory", s->name);
    for (uint32_t f = 0; f < s->L.F.n; f++)
        if (!s->written[f])
            todo[n++] = f;
    /* A shared save's other files are other processes': only their records say that
     * they are durable. */
    int r = 0;
    if (s->shared && n)
        r = ck_err_set(err, -EINVAL, "checkpoint %s: rank %u's part was never adopted (its "
                       "file is not known to be durable); nothing was published", s->name,
                       s->L.F.files[todo[0]].rank);
    if (r == 0)
        r = write_files(s, todo, n, err);
    free(todo);
    return r;
}

int ck_save_commit(ck_save *s, ck_save_stats *stats, ck_err *err)
{
    double t0 = now_s();
    bool committed = false;
    int r = ck__save_prepare(s, err);
    if (r == 0)
        r = write_rest(s, err);
    if (r == 0) {
        ck_info info = save_info(s);
        ck__manifest m = { .info = info, .tensors = ck__decl_tensors(s->decl), .shards = s->L.shards,
                          .files = s->L.F.files, .hashes = (const uint8_t *const *)s->L.F.hashes,
                          .blobs = s->blobs };
        r = ck__publish(s->e, s->rootfd, s->root, s->pending, &m, !s->o.no_catalog,
                        &committed, s->o.log, s->o.cb_arg, err);
    }
    if (!committed)
        ck__pending_remove(s->e, s->rootfd, s->root, s->pending, s->L.F.files, s->L.F.n);
    s->st.total_seconds = now_s() - t0;
    if (stats)
        *stats = s->st;
    save_free(s);
    return r;
}

/* The manifest file of the pending directory (dirfd) read whole into *out, or written
 * from in (len bytes) and fsynced: the manifest one copy of a tiered save gives the
 * others, byte for byte. */
static int manifest_bytes(const ck_save *s, int dirfd, void **out, size_t *len, ck_err *err)
{
    uint8_t *b;
    int r = ck__read_whole(dirfd, CK_MANIFEST, CK__MANIFEST_MAX, &b, len);
    bool empty = r == 0 && *len == 0;
    if (empty) {
        free(b);
        r = -EIO;
    }
    if (r < 0)
        return ck_err_set(err, r, "%s/%s: reading it back: %s", s->pending, CK_MANIFEST,
                          empty ? "empty" : r == -EIO ? "cut short while read" : ck__why(r));
    *out = b;
    return 0;
}

static int manifest_put(const ck_save *s, int dirfd, const void *in, size_t len, ck_err *err)
{
    int fd = ck__openat(dirfd, CK_MANIFEST, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0)
        return ck_err_set(err, fd, "%s/%s: %s", s->pending, CK_MANIFEST, ck__why(fd));
    int r = 0;
    for (size_t put = 0; r == 0 && put < len;) {
        ssize_t k = write(fd, (const uint8_t *)in + put, len - put);
        r = k < 0 ? -errno : k == 0 ? -EIO : 0;
        put += k > 0 ? (size_t)k : 0;
    }
    if (r == 0 && fsync(fd) < 0)
        r = -errno;
    close(fd);
    return r < 0 ? ck_err_set(err, r, "%s/%s: %s", s->pending, CK_MANIFEST, ck__why(r)) : 0;
}

int ck__save_commit_copy(ck_save *s, const char *source, const bool *mine, const void *in,
                         size_t in_len, void **out, size_t *out_len, ck_err *err)
{
    bool committed = false;
    int dirfd = -1;
    uint8_t *held = NULL;
    int r = ck__save_prepare(s, err);
    if (r == 0 && !in)
        r = write_rest(s, err);
    if (r == 0 && !(held = calloc(s->L.F.n ? s->L.F.n : 1, 1)))
        r = ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory", s->name);
    uint32_t n = 0;
    for (uint32_t f = 0; r == 0 && f < s->L.F.n; f++)
        n += held[f] = mine[s->L.F.files[f].rank] && s->written[f];
    if (r == 0 && (dirfd = ck__openat(s->rootfd, ck__rel(s->root, s->pending),
                                      O_RDONLY | O_DIRECTORY, 0)) < 0)
        r = ck_err_set(err, dirfd, "%s: %s", s->pending, ck__why(dirfd));
    ck_info info = { 0 };
    if (r == 0 && !in) {
        info = save_info(s);
        char path[PATH_MAX + CK_NAME_MAX], mrel[PATH_MAX];
        ck__manifest m = { .info = info, .tensors = ck__decl_tensors(s->decl), .shards = s->L.shards,
                          .files = s->L.F.files, .hashes = (const uint8_t *const *)s->L.F.hashes,
                          .blobs = s->blobs };
        if (ck__name_manifest(s->pending, path, sizeof path) < 0 ||
            ck__name_manifest(ck__rel(s->root, s->pending), mrel, sizeof mrel) < 0)
            r = ck_err_set(err, -ENAMETOOLONG, "%s: path too long", s->pending);
        if (r == 0)
            r = ck__manifest_write(s->e, s->rootfd, mrel, path, &m, err);
        if (r == 0)
            r = manifest_bytes(s, dirfd, out, out_len, err);
    } else if (r == 0) {
        snprintf(info.name, sizeof info.name, "%s", s->name);
        info.step = s->step;
        r = manifest_put(s, dirfd, in, in_len, err);
    }
    /* Of a node that holds every file (a save of one engine), a complete copy. */
    if (r == 0 && n < s->L.F.n)
        r = ck__copy_write(dirfd, s->pending, source, s->L.F.files, held, s->L.F.n, err);
    if (r == 0)
        r = ck__commit_dir(s->e, s->rootfd, s->root, s->pending, &info, false, &committed,
                           s->o.log, s->o.cb_arg, err);
    if (!committed && out && *out) {
        free(*out);
        *out = NULL;
    }
    if (dirfd >= 0)
        close(dirfd);
    free(held);
    if (!committed)
        ck__pending_remove(s->e, s->rootfd, s->root, s->pending, s->L.F.files, s->L.F.n);
    save_free(s);
    return r;
}

