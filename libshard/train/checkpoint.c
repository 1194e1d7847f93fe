/* checkpoint.c - asynchronous collective saves of sharded state dicts (see
 * sh/checkpoint.h).
 *
 * Connected, every rank has a ck_client and stages its own part in ckptd's shared
 * memory; rank 0 asks for the commit and watches for it.
 *
 * Embedded, every rank builds the same ck_save and the core runs the shared save over
 * this world's collectives (ck_group). On every rank a save goes
 *   IDLE -> WRITING: save_async copies the shards into the file's image, a thread
 *           writes and fsyncs it;
 *        -> at the first progress where no rank is still WRITING (an all-reduce):
 *           ck_save_finish_group gathers every part's outcome and hashes to rank 0;
 *        -> COMMITTING on rank 0 (its thread runs ck_save_commit), IDLE elsewhere.
 * Every collective runs on the training thread, at a step boundary, so the MPI
 * library needs no thread support and no rank waits on another's disk.
 */
#include "sh/checkpoint.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ck/catalog.h"
#include "ck/client.h"
#include "ck/load.h"
#include "ck/save.h"
#include "sh/comm.h"
#include "dev.h"
#include "stage.h"

typedef enum phase { IDLE, WRITING, COMMITTING } phase;

struct sh_checkpoint {
    sh_world *w;
    char root[PATH_MAX];
    ck_group group;                /* the world's broadcast and gather, lent to the core */
    ck_client *cl;                 /* connected; NULL when embedded */
    ck_client_save *sv;            /* connected: this rank's part of the save in flight */
    char name[CK_NAME_MAX];        /* the save in flight; "" when none */
    uint64_t bytes;
    struct timespec t0;
    sh_checkpoint_done *report;    /* rank 0: finished saves not yet polled */
    int nreport;
    /* Embedded: */
    ck_save *save;
    uint8_t *image;                /* this rank's data file, kept from save to save */
    size_t image_cap;
    phase phase;
    pthread_t th;
    atomic_bool th_done;
    int th_rc;
    ck_err th_err;
    /* A GPU rank's shards are offered through fill callbacks that copy them from the
     * device into the staging (stage.h); one source per shard of the save in flight. */
    sh_stage_ops *stage;
    sh_stage_src *src;
    size_t nsrc, src_cap;
};

static double since_ms(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

/* ---- the core's view of the world ---- */

static int group_words(size_t len, ck_err *err)
{
    return len % 8 ? ck_err_set(err, -EINVAL, "checkpoint collective of %zu bytes, not a "
                                "multiple of 8", len) : 0;
}

static int group_broadcast(void *arg, void *buf, size_t len, ck_err *err)
{
    int rc = group_words(len, err);
    return rc ? rc : sh_broadcast(sh_world_comm(arg), buf, len / 8, CK_I64, 0, NULL, err);
}

static int group_gather(void *arg, const void *mine, void *all, size_t len, ck_err *err)
{
    int rc = group_words(len, err);
    return rc ? rc : sh_gather(sh_world_comm(arg), mine, all, len / 8, CK_I64, 0, NULL, err);
}

int sh_checkpoint_new(sh_world *w, const sh_checkpoint_opts *o, sh_checkpoint **out,
                      ck_err *err)
{
    *out = NULL;
    sh_checkpoint *c = calloc(1, sizeof *c);
    if (!c)
        return ck_err_set(err, -ENOMEM, "checkpoints: out of memory");
    c->w = w;
    c->group = (ck_group){ (uint64_t)sh_world_rank(w), (uint64_t)sh_world_size(w),
                           group_broadcast, group_gather, w };
    int rc = 0;
    if (snprintf(c->root, sizeof c->root, "%s", o->root) >= (int)sizeof c->root)
        rc = ck_err_set(err, -ENAMETOOLONG, "checkpoint root %s: path too long", o->root);
    /* Rank 0 makes the root; broadcasting the outcome also keeps the other ranks from
     * looking for it before it exists. */
    int32_t made = 0;
    if (!rc && c->group.rank == 0 && mkdir(c->root, 0755) && errno != EEXIST)
        made = -errno;
    if (!rc)
        rc = sh_broadcast(sh_world_comm(w), &made, 1, CK_I32, 0, NULL, err);
    if (!rc && made)
        rc = ck_err_set(err, made, "checkpoint root %s: %s", c->root, strerror(-made));
    if (!rc && sh_world_device(w) == SH_CUDA && (rc = sh_stage_cuda_new(&c->stage)))
        rc = ck_err_set(err, rc, "checkpoints on rank %d: no CUDA stream for device copies",
                        sh_world_rank(w));
    const char *env = getenv("CKPTD_SOCKET");
    if (!rc && (o->daemon || (env && *env)))
        rc = ck_client_open(&c->cl, c->root, &(ck_client_opts){ .socket = o->daemon }, err);
    if (rc) {
        sh_checkpoint_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* The save in flight is over on this rank; rank 0 queues its report. */
static int over(sh_checkpoint *c, int code, const ck_err *why, ck_err *err)
{
    int rc = 0;
    if (c->group.rank == 0) {
        sh_checkpoint_done d = { .rc = code, .bytes = c->bytes,
                                 .seconds = since_ms(&c->t0) / 1e3 };
        snprintf(d.name, sizeof d.name, "%s", c->name);
        snprintf(d.msg, sizeof d.msg, "%s", code ? ck_err_msg(why) : "");
        sh_checkpoint_done *r = realloc(c->report, sizeof *r * (size_t)(c->nreport + 1));
        if (r) {
            c->report = r;
            r[c->nreport++] = d;
        } else {
            rc = ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory for its report",
                            c->name);
        }
    }
    c->name[0] = '\0';
    return rc;
}

/* ---- connected ---- */

/* Waits for the save in flight; rank 0 learns how it ended. */
static int retire(sh_checkpoint *c, ck_err *err)
{
    if (!c->sv)
        return 0;
    ck_err why = { 0 };
    int code = c->group.rank == 0 ? ck_client_wait(c->sv, &why) : 0;
    ck_client_save_free(c->sv);
    c->sv = NULL;
    return over(c, code, &why, err);
}

/* Room for one fill source per shard of sd, before any is handed out (the core keeps
 * the pointers until the shards are staged). */
static int reserve_sources(sh_checkpoint *c, const sh_state_dict *const *sd, int nsd,
                           ck_err *err)
{
    size_t n = 0;
    for (int d = 0; d < nsd; d++)
        n += sd[d]->n;
    c->nsrc = 0;
    if (n <= c->src_cap)
        return 0;
    sh_stage_src *s = realloc(c->src, n * sizeof *s);
    if (!s)
        return ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory", c->name);
    c->src = s;
    c->src_cap = n;
    return 0;
}

/* The fill source of a shard in device memory; NULL for one in host memory. */
static sh_stage_src *device_source(sh_checkpoint *c, const sh_shard_entry *e)
{
    if (e->device != SH_CUDA)
        return NULL;
    sh_stage_src *s = &c->src[c->nsrc++];
    *s = (sh_stage_src){c->stage, e->data};
    return s;
}

/* Declares this rank's part, offers its shards and, on rank 0, the blobs; save_async
 * then copies them into ckptd's staging. */
static int stage_part(sh_checkpoint *c, uint64_t step, const sh_state_dict *const *sd,
                      int nsd, const sh_blob *blobs, int nblobs, ck_err *err)
{
    const ck_mesh *mesh = &sd[0]->entry[0].mesh;
    int rc = ck_client_begin(c->cl, &c->sv, c->name, step, mesh, c->group.rank,
                             ck_mesh_world(mesh), err);
    for (int d = 0; !rc && d < nsd; d++)
        for (size_t i = 0; !rc && i < sd[d]->n; i++) {
            const sh_shard_entry *e = &sd[d]->entry[i];
            rc = ck_client_tensor(c->sv, e->name, e->dtype, e->ndim, e->shape, e->placement,
                                  err);
        }
    if (!rc)
        rc = reserve_sources(c, sd, nsd, err);
    for (int d = 0; !rc && d < nsd; d++)
        for (size_t i = 0; !rc && i < sd[d]->n; i++) {
            const sh_shard_entry *e = &sd[d]->entry[i];
            if (!ck_box_numel(&e->box))
                continue;
            sh_stage_src *src = device_source(c, e);
            rc = src ? ck_client_shard_fill(c->sv, e->name, sh_stage_fill, src, err)
                     : ck_client_shard(c->sv, e->name, e->data, err);
        }
    for (int b = 0; !rc && c->group.rank == 0 && b < nblobs; b++)
        rc = ck_client_blob(c->sv, blobs[b].name, blobs[b].data, blobs[b].len, err);
    if (!rc)
        rc = ck_client_save_async(c->sv, err);
    return rc;
}

/* ---- embedded ---- */

static void *write_part(void *arg)
{
    sh_checkpoint *c = arg;
    c->th_rc = ck_save_write_rank(c->save, c->group.rank, &c->th_err);
    atomic_store(&c->th_done, true);
    return NULL;
}

static void *commit_all(void *arg)
{
    sh_checkpoint *c = arg;
    c->th_rc = ck_save_commit(c->save, NULL, &c->th_err);
    c->save = NULL;     /* commit frees it, in every case */
    atomic_store(&c->th_done, true);
    return NULL;
}

static int start(sh_checkpoint *c, void *(*fn)(void *), phase ph, ck_err *err)
{
    atomic_store(&c->th_done, false);
    c->th_rc = 0;
    ck_err_clear(&c->th_err);
    int e = pthread_create(&c->th, NULL, fn, c);
    if (e)
        return ck_err_set(err, -e, "checkpoint %s: starting a thread: %s", c->name,
                          strerror(e));
    c->phase = ph;
    return 0;
}

/* The same ck_save on every rank: the tensors in order, this rank's shards, rank 0's
 * blobs. */
static int build(sh_checkpoint *c, uint64_t step, const sh_state_dict *const *sd, int nsd,
                 const sh_blob *blobs, int nblobs, ck_err *err)
{
    int rc = ck_save_begin(&c->save, c->root, c->name, step, &sd[0]->entry[0].mesh, NULL,
                           err);
    if (!rc)
        rc = reserve_sources(c, sd, nsd, err);
    for (int d = 0; !rc && d < nsd; d++)
        for (size_t i = 0; !rc && i < sd[d]->n; i++) {
            const sh_shard_entry *e = &sd[d]->entry[i];
            rc = ck_save_tensor(c->save, e->name, e->dtype, e->ndim, e->shape, e->placement,
                                err);
            sh_stage_src *src = !rc && ck_box_numel(&e->box) ? device_source(c, e) : NULL;
            if (src)
                rc = ck_save_shard_fill(c->save, e->name, c->group.rank, sh_stage_fill, src,
                                        err);
            else if (!rc && ck_box_numel(&e->box))
                rc = ck_save_shard(c->save, e->name, c->group.rank, e->data, err);
        }
    for (int b = 0; !rc && c->group.rank == 0 && b < nblobs; b++)
        rc = ck_save_blob(c->save, blobs[b].name, blobs[b].data, blobs[b].len, err);
    return rc;
}

/* Copies this rank's shards into its file's image (the stall) and starts writing it.
 * The image is kept for the next save, whose copy then lands in touched pages. */
static int write_own(sh_checkpoint *c, ck_err *err)
{
    size_t size = (size_t)ck_save_rank_bytes(c->save, c->group.rank);
    if (size > c->image_cap) {
        free(c->image);
        c->image_cap = 0;
        if (posix_memalign((void **)&c->image, CK_ALIGN, size)) {
            c->image = NULL;
            return ck_err_set(err, -ENOMEM, "checkpoint %s: no memory for a %zu-byte "
                              "staging image", c->name, size);
        }
        c->image_cap = size;
    }
    int rc = ck_save_copy_rank(c->save, c->group.rank, c->image, err);
    return rc ? rc : start(c, write_part, WRITING, err);
}

/* Collective: moves the save in flight on; with block, until it is over. Ranks agree
 * on the step at which to finish by an all-reduce of "my part is still being
 * written". */
static int advance(sh_checkpoint *c, bool block, ck_err *err)
{
    int rc = 0;
    if (c->phase == WRITING) {
        if (block)
            pthread_join(c->th, NULL);
        int32_t busy = atomic_load(&c->th_done) ? 0 : 1;
        rc = sh_all_reduce(sh_world_comm(c->w), &busy, &busy, 1, CK_I32, SH_MAX, NULL, err);
        if (rc || busy)
            return rc;
        if (!block)
            pthread_join(c->th, NULL);
        c->phase = IDLE;
        ck_err outcome = c->th_err;
        outcome.code = c->th_rc;
        ck_save *s = c->save;
        c->save = NULL;
        if (c->group.rank != 0) {
            c->name[0] = '\0';
            return ck_save_finish_group(s, &c->group, &outcome, err);
        }
        /* A failed part fails the save, not the training: rank 0 reports it. */
        ck_err why = { 0 };
        int code = ck_save_finish_group(s, &c->group, &outcome, &why);
        if (!code) {
            c->save = s;
            code = start(c, commit_all, COMMITTING, &why);
        }
        if (code) {
            ck_save_abort(c->save);
            c->save = NULL;
            return over(c, code, &why, err);
        }
    }
    if (c->phase == COMMITTING && (block || atomic_load(&c->th_done))) {
        pthread_join(c->th, NULL);
        c->phase = IDLE;
        rc = over(c, c->th_rc, &c->th_err, err);
    }
    return rc;
}

/* ---- both ---- */

/* Collective: every rank learns whether every rank got this far, so that none trains
 * on believing in a save that cannot commit. */
static int agree(sh_checkpoint *c, int rc, ck_err *err)
{
    int32_t bad = rc ? 1 : 0;
    ck_err why = { 0 };
    int e = sh_all_reduce(sh_world_comm(c->w), &bad, &bad, 1, CK_I32, SH_MAX, NULL, &why);
    if (rc)
        return rc;      /* this rank's own error says more than the collective's */
    if (e)
        return ck_err_set(err, e, "checkpoint %s: %s", c->name, ck_err_msg(&why));
    return bad ? ck_err_set(err, -EIO, "checkpoint %s: another rank failed to stage its "
                            "part", c->name) : 0;
}

/* The save failed on every rank: let go of this rank's part. What it wrote into a
 * shared directory stays as debris for recovery. */
static void drop(sh_checkpoint *c)
{
    ck_client_save_free(c->sv);
    c->sv = NULL;
    if (c->phase == WRITING)
        pthread_join(c->th, NULL);
    c->phase = IDLE;
    ck_save_abort(c->save);
    c->save = NULL;
    c->name[0] = '\0';
}

static int check_entries(const char *name, const sh_state_dict *const *sd, int nsd,
                         uint64_t *bytes, ck_err *err)
{
    if (nsd < 1 || sd[0]->n < 1)
        return ck_err_set(err, -EINVAL, "checkpoint %s: nothing to save", name);
    const sh_shard_entry *first = &sd[0]->entry[0];
    *bytes = 0;
    for (int d = 0; d < nsd; d++)
        for (size_t i = 0; i < sd[d]->n; i++) {
            const sh_shard_entry *e = &sd[d]->entry[i];
            if (!ck_mesh_equal(&e->mesh, &first->mesh))
                return ck_err_set(err, -EINVAL, "checkpoint %s: tensor '%s' is on another "
                                  "mesh than '%s' (a checkpoint has one mesh)", name, e->name,
                                  first->name);
            ck_box full;
            ck_box_full(e->ndim, e->shape, &full);
            *bytes += ck_box_numel(&full) * ck_dtype_size(e->dtype);
        }
    return 0;
}

int sh_checkpoint_save_async(sh_checkpoint *c, const char *name, uint64_t step,
                             const sh_state_dict *const *sd, int nsd, const sh_blob *blobs,
                             int nblobs, double *stall_ms, ck_err *err)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* One save in flight: the next one waits for it. */
    int rc = c->cl ? retire(c, err) : advance(c, true, err);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->t0 = t0;
    if (!rc)
        rc = check_entries(name, sd, nsd, &c->bytes, err);
    if (!rc)
        rc = c->cl ? stage_part(c, step, sd, nsd, blobs, nblobs, err)
                   : build(c, step, sd, nsd, blobs, nblobs, err);
    rc = agree(c, rc, err);
    if (!rc && !c->cl) {
        rc = ck_save_prepare_group(c->save, &c->group, err);
        if (!rc)
            rc = write_own(c, err);
        rc = agree(c, rc, err);
    }
    if (!rc && c->cl && c->group.rank == 0)
        rc = ck_client_commit(c->sv, err);
    if (rc)
        drop(c);
    *stall_ms = since_ms(&t0);
    return rc;
}

int sh_checkpoint_progress(sh_checkpoint *c, ck_err *err)
{
    return c->cl ? 0 : advance(c, false, err);
}

int sh_checkpoint_poll(sh_checkpoint *c, sh_checkpoint_done *done, ck_err *err)
{
    if (c->sv && c->group.rank == 0) {
        ck_client_state st;
        ck_err why = { 0 };
        ck_client_poll(c->sv, &st, &why);
        int rc = st == CK_CLIENT_COMMITTED || st == CK_CLIENT_FAILED ? retire(c, err) : 0;
        if (rc)
            return rc;
    }
    if (!c->nreport)
        return 0;
    *done = c->report[0];
    memmove(c->report, c->report + 1, sizeof *c->report * (size_t)--c->nreport);
    return 1;
}

int sh_checkpoint_wait(sh_checkpoint *c, ck_err *err)
{
    return c->cl ? retire(c, err) : advance(c, true, err);
}

void sh_checkpoint_free(sh_checkpoint *c)
{
    if (!c)
        return;
    retire(c, NULL);
    ck_client_close(c->cl);
    if (c->phase != IDLE) {
        /* Only on an error path, so no collective: let go, recovery removes the rest. */
        pthread_join(c->th, NULL);
        if (c->phase == WRITING)
            ck_save_abort(c->save);     /* a commit frees its save itself */
    }
    free(c->image);
    free(c->report);
    free(c->src);
    sh_stage_cuda_free(c->stage);
    free(c);
}

int sh_checkpoint_latest(sh_world *w, const char *root, char name[CK_NAME_MAX], ck_err *err)
{
    /* Rank 0 alone looks, so that a save committing meanwhile (ckptd finishing a dead
     * run's last checkpoint) cannot make ranks disagree. */
    int32_t msg[1 + CK_NAME_MAX / 4] = { -ENOENT };
    char *best = (char *)&msg[1];
    if (sh_world_rank(w) == 0) {
        ck_scan sc;
        ck_err e2 = { 0 };
        uint64_t top = 0;
        if (ck_root_scan(root, &sc, &e2) == 0) {
            for (size_t i = 0; i < sc.n_committed; i++) {
                ck_ckpt *ck;
                if (ck_open(root, sc.committed[i], &ck, &e2))
                    continue;       /* unreadable: not a candidate for resuming */
                uint64_t step = ck_get_info(ck)->step;
                if (msg[0] || step > top) {
                    msg[0] = 0;
                    top = step;
                    snprintf(best, CK_NAME_MAX, "%s", sc.committed[i]);
                }
                ck_close(ck);
            }
            ck_scan_free(&sc);
        }
    }
    int rc = sh_broadcast(sh_world_comm(w), msg, sizeof msg / 4, CK_I32, 0, NULL, err);
    if (rc)
        return rc;
    if (msg[0])
        return ck_err_set(err, msg[0], "no committed checkpoint under %s", root);
    snprintf(name, CK_NAME_MAX, "%s", best);
    return 0;
}

/* A shard in device memory is read into host memory, then copied to the device. */
static int read_entry(ck_ckpt *ck, ck_reader *rd, const sh_shard_entry *e, size_t bytes,
                      ck_err *err)
{
    if (e->device != SH_CUDA)
        return ck_reader_read(rd, &e->box, 0, bytes, e->data, err);
    const sh_dev_ops *d = sh_dev_for(SH_CUDA);
    void *host = malloc(bytes);
    if (!d || !host) {
        free(host);
        return ck_err_set(err, d ? -ENOMEM : -ENOTSUP, "checkpoint %s: loading '%s' onto "
                          "the device: %s", ck_get_info(ck)->name, e->name,
                          d ? "out of memory" : "this build has no CUDA");
    }
    int rc = ck_reader_read(rd, &e->box, 0, bytes, host, err);
    if (!rc) {
        rc = d->copy(e->data, host, bytes);
        if (!rc)
            rc = d->sync();
        if (rc)
            ck_err_set(err, rc, "checkpoint %s: copying '%s' to the device",
                       ck_get_info(ck)->name, e->name);
    }
    free(host);
    return rc;
}

int sh_checkpoint_load_state_dict(ck_ckpt *ck, const sh_state_dict *sd, ck_err *err)
{
    for (size_t i = 0; i < sd->n; i++) {
        const sh_shard_entry *e = &sd->entry[i];
        ck_reader *rd;
        int rc = ck_reader_open(ck, e->name, &rd, err);
        if (rc)
            return ck_err_set(err, rc, "checkpoint %s", ck_get_info(ck)->name);
        const ck_tensor *t = ck_reader_tensor(rd);
        bool same = t->dtype == e->dtype && t->ndim == e->ndim;
        for (int d = 0; same && d < t->ndim; d++)
            same = t->shape[d] == e->shape[d];
        uint64_t n = ck_box_numel(&e->box);
        if (!same)
            rc = ck_err_set(err, -EINVAL, "checkpoint %s: tensor '%s' has another dtype or "
                            "shape than the model's (a different configuration?)",
                            ck_get_info(ck)->name, e->name);
        else if (n)
            rc = read_entry(ck, rd, e, n * ck_dtype_size(e->dtype), err);
        ck_reader_close(rd);
        if (rc)
            return rc;
    }
    return 0;
}
