/* checkpoint.c - asynchronous collective saves of sharded state dicts (see
 * sh/checkpoint.h).
 *
 * A save's stall holds no collective: each rank hands its own part over alone, and
 * the ranks agree that the save happened later, at a sh_checkpoint_progress, on the
 * training thread (MPI needs no thread support: docs/decisions/0047-ranks-agree-at-progress.md).
 *
 * Connected, every rank has a ck_client and stages its own part in ckptd's shared
 * memory (a lazy save: on the client's thread, until the fence). At the first
 * progress after the part is staged (after the fence, for a lazy save) one all-reduce
 * says whether every rank's part got there; then rank 0 asks for the commit and
 * watches for it.
 *
 * Embedded, every rank builds the same ck_save and the core runs the shared save over
 * this world's collectives (ck_group). The pending directory's token is rank 0's
 * nonce (drawn at sh_checkpoint_new) and the save's number, so no broadcast is needed
 * to start a save. On every rank a save goes
 *   IDLE -> WRITING: a thread copies the shards into the file's image (lazy; else the
 *           caller did) and writes and fsyncs it;
 *        -> at the first progress where no rank is still WRITING (an all-reduce):
 *           ck_save_finish_group gathers every part's outcome and hashes to rank 0;
 *        -> COMMITTING on rank 0 (its thread runs ck_save_commit), IDLE elsewhere.
 * A rank whose part could not even be started says so in that all-reduce, and then
 * every rank lets the save go. A part still being written part_timeout_s after the
 * save's start (by any rank's clock: the all-reduce carries a "late" flag, so no
 * clocks are compared) fails the save on every rank, at the same all-reduce; the
 * checkpointer is dead from then on (see dead, stuck).
 */
#include "sh/checkpoint.h"

#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ck/catalog.h"
#include "ck/client.h"
#include "ck/load.h"
#include "ck/save.h"
#include "ck/staging.h"
#include "sh/comm.h"
#include "dev.h"
#include "stage.h"

typedef enum phase { IDLE, WRITING, COMMITTING } phase;

struct sh_checkpoint {
    sh_world *w;
    char root[PATH_MAX];
    ck_group group;                /* the world's broadcast and gather, lent to the core */
    sh_adamw *optim;               /* its step fences lazy saves */
    uint64_t nonce, seq;           /* the pending directories' tokens */
    ck_client *cl;                 /* connected; NULL when embedded */
    ck_client_save *sv;            /* connected: this rank's part of the save in flight */
    bool agreed;                   /* connected: every rank staged it, commit asked */
    char name[CK_NAME_MAX];        /* the save in flight; "" when none */
    uint64_t bytes;
    struct timespec t0;
    sh_checkpoint_done *report;    /* rank 0: finished saves not yet polled */
    int nreport;
    /* This rank's part of the save in flight: */
    bool fence_due;                /* lazy, and not fenced yet */
    ck_err part;                   /* part.code: it could not be handed over */
    double fence_ms;
    double timeout_ms;             /* embedded: a part's bound, from the save's start */
    ck_err dead;                   /* dead.code: a part timed out; every call fails so */
    bool stuck;                    /* this rank's writer outlived the bound: it still
                                    * holds c, which is never freed */
    /* Embedded: */
    ck_save *save;
    ck_staging image;              /* this rank's data file, kept from save to save */
    bool image_pinned;             /* registered for DMA (stage->pin) while mapped */
    phase phase;
    pthread_t th;
    bool th_running;
    bool th_copies;                /* the thread copies first (lazy) */
    atomic_bool th_done;
    int th_rc;
    ck_err th_err;
    pthread_mutex_t mu;            /* copied; part, while the thread may set it */
    pthread_cond_t cv;
    bool copied;                   /* the part is handed over, or failed */
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

static int fence_for_optim(void *arg, ck_err *err);

/* A GPU rank registers staging for DMA when it is mapped and until it is unmapped, so
 * a save's fill finds it registered (stage.h: pin answers -EEXIST) and its stall is
 * the copy alone, not cudaHostRegister of gigabytes. */
static int stage_mapped(void *arg, void *base, size_t len)
{
    const sh_stage_ops *o = arg;
    return o->pin(o->arg, base, len);
}

static void stage_unmapping(void *arg, void *base, size_t len)
{
    (void)len;
    const sh_stage_ops *o = arg;
    o->unpin(o->arg, base);
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
    c->image = CK_STAGING_NONE;
    c->timeout_ms = (o->part_timeout_s > 0 ? o->part_timeout_s : 1800.0) * 1e3;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    int rc = 0;
    if (snprintf(c->root, sizeof c->root, "%s", o->root) >= (int)sizeof c->root)
        rc = ck_err_set(err, -ENAMETOOLONG, "checkpoint root %s: path too long", o->root);
    /* Rank 0 makes the root; broadcasting the outcome also keeps the other ranks from
     * looking for it before it exists. The nonce names this run's pending directories. */
    int64_t msg[2] = { 0, 0 };
    if (!rc && c->group.rank == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        msg[1] = (int64_t)(((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^
                           ((uint64_t)ts.tv_sec << 20));
        if (mkdir(c->root, 0755) && errno != EEXIST)
            msg[0] = -errno;
    }
    if (!rc)
        rc = sh_broadcast(sh_world_comm(w), msg, 2, CK_I64, 0, NULL, err);
    if (!rc && msg[0])
        rc = ck_err_set(err, (int)msg[0], "checkpoint root %s: %s", c->root,
                        strerror((int)-msg[0]));
    c->nonce = (uint64_t)msg[1];
    if (!rc && sh_world_device(w) == SH_CUDA && (rc = sh_stage_cuda_new(&c->stage)))
        rc = ck_err_set(err, rc, "checkpoints on rank %d: no CUDA stream for device copies",
                        sh_world_rank(w));
    const char *env = getenv("CKPTD_SOCKET");
    if (!rc && (o->daemon || (env && *env)))
        rc = ck_client_open(&c->cl, c->root, &(ck_client_opts){
                                .socket = o->daemon,
                                .staging_mapped = c->stage ? stage_mapped : NULL,
                                .staging_unmapping = stage_unmapping,
                                .staging_arg = c->stage }, err);
    if (rc) {
        sh_checkpoint_free(c);
        return rc;
    }
    c->optim = o->optim;
    if (c->optim)
        sh_adamw_set_fence(c->optim, fence_for_optim, c);
    *out = c;
    return 0;
}

/* The save in flight is over on this rank; rank 0 queues its report. */
static int over(sh_checkpoint *c, int code, const char *why, ck_err *err)
{
    int rc = 0;
    if (c->group.rank == 0) {
        sh_checkpoint_done d = { .rc = code, .bytes = c->bytes,
                                 .seconds = since_ms(&c->t0) / 1e3 };
        snprintf(d.name, sizeof d.name, "%s", c->name);
        snprintf(d.msg, sizeof d.msg, "%s", code ? why : "");
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

/* ---- the fence ---- */

/* Waits until this rank's sources are no longer read by the save in flight. Every
 * rank passes here at the same point of its program (the optimizer's step), whatever
 * became of its part, so fence_due says the same on every rank. */
static void fence_wait(sh_checkpoint *c)
{
    if (!c->fence_due)
        return;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_err why = { 0 };
    if (c->cl) {
        if (c->sv && !c->part.code && ck_client_save_fence(c->sv, &why))
            c->part = why;
    } else {
        pthread_mutex_lock(&c->mu);
        while (!c->copied)
            pthread_cond_wait(&c->cv, &c->mu);
        pthread_mutex_unlock(&c->mu);
    }
    c->fence_due = false;
    c->fence_ms = since_ms(&t0);
}

/* This rank's error of the save in flight, so far. */
static int part_error(sh_checkpoint *c, ck_err *err)
{
    pthread_mutex_lock(&c->mu);
    int rc = c->part.code ? ck_err_set(err, c->part.code, "%s", ck_err_msg(&c->part)) : 0;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int sh_checkpoint_fence(sh_checkpoint *c, ck_err *err)
{
    fence_wait(c);
    return c->name[0] ? part_error(c, err) : 0;
}

/* The optimizer's fence: it may step once the sources are free, whatever became of
 * the save, whose failure rank 0 reports through poll. */
static int fence_for_optim(void *arg, ck_err *err)
{
    (void)err;
    fence_wait(arg);
    return 0;
}

double sh_checkpoint_fence_ms(const sh_checkpoint *c)
{
    return c->fence_ms;
}

bool sh_checkpoint_dead_everywhere(const sh_checkpoint *c)
{
    return c && c->dead.code != 0;
}

/* ---- agreement ---- */

/* Collective, where some rank could not hand its part over: rank 0 learns the first
 * such rank's error and reports the save failed; every rank lets its part go. */
typedef struct fail_msg {
    int64_t code;
    char msg[CK_ERR_MSG_MAX];
} fail_msg;

static void drop(sh_checkpoint *c);

static int fail_all(sh_checkpoint *c, ck_err *err)
{
    fail_msg mine = { .code = c->part.code }, *all = NULL;
    if (c->part.code)
        snprintf(mine.msg, sizeof mine.msg, "rank %" PRIu64 ": %s", c->group.rank,
                 ck_err_msg(&c->part));
    if (c->group.rank == 0 && !(all = calloc(c->group.world, sizeof *all)))
        return ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory", c->name);
    int rc = group_gather(c->w, &mine, all, sizeof mine, err);
    drop(c);
    const fail_msg *first = NULL;
    for (uint64_t k = 0; !rc && all && k < c->group.world && !first; k++)
        if (all[k].code)
            first = &all[k];
    if (!rc && first)
        rc = over(c, (int)first->code, first->msg, err);
    free(all);
    c->name[0] = '\0';
    return rc;
}

/* Collective: MAX over the ranks of v[0..n). */
static int all_max(sh_checkpoint *c, int32_t *v, int n, ck_err *err)
{
    return sh_all_reduce(sh_world_comm(c->w), v, v, (size_t)n, CK_I32, SH_MAX, NULL, err);
}

/* ---- connected ---- */

/* Collective, once every part's fate is known here (after the fence): every rank
 * learns whether all were staged; then rank 0 asks for the commit. */
static int agree_staged(sh_checkpoint *c, ck_err *err)
{
    int32_t bad = c->part.code ? 1 : 0;
    int rc = all_max(c, &bad, 1, err);
    if (rc)
        return rc;
    if (bad)
        return fail_all(c, err);
    c->agreed = true;
    ck_err why = { 0 };
    if (c->group.rank == 0 && ck_client_commit(c->sv, &why)) {
        int code = why.code;
        ck_client_save_free(c->sv);
        c->sv = NULL;
        return over(c, code, ck_err_msg(&why), err);
    }
    return 0;
}

/* Collective: waits for the save in flight; rank 0 learns how it ended. */
static int retire(sh_checkpoint *c, ck_err *err)
{
    if (!c->name[0])
        return 0;
    fence_wait(c);
    if (!c->agreed) {
        int rc = agree_staged(c, err);
        if (rc || !c->sv)
            return rc;
    }
    ck_err why = { 0 };
    int code = c->group.rank == 0 && c->sv ? ck_client_wait(c->sv, &why) : 0;
    ck_client_save_free(c->sv);
    c->sv = NULL;
    return over(c, code, ck_err_msg(&why), err);
}

/* Room for one fill source per shard of sd, before any is handed out (the core keeps
 * the pointers until the shards are staged, which a lazy save does after returning;
 * the next save, which reuses them, waits for that). */
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

/* Declares this rank's part, offers its shards and, on rank 0, the blobs. */
static int declare(sh_checkpoint *c, ck_client_save **sv, const char *name, uint64_t step,
                   const sh_state_dict *const *sd, int nsd, bool shards, const sh_blob *blobs,
                   int nblobs, ck_err *err)
{
    const ck_mesh *mesh = &sd[0]->entry[0].mesh;
    int rc = ck_client_begin(c->cl, sv, name, step, mesh, c->group.rank, ck_mesh_world(mesh),
                             err);
    for (int d = 0; !rc && d < nsd; d++)
        for (size_t i = 0; !rc && i < sd[d]->n; i++) {
            const sh_shard_entry *e = &sd[d]->entry[i];
            rc = ck_client_tensor(*sv, e->name, e->dtype, e->ndim, e->shape, e->placement,
                                  err);
        }
    if (!rc && shards)
        rc = reserve_sources(c, sd, nsd, err);
    for (int d = 0; !rc && shards && d < nsd; d++)
        for (size_t i = 0; !rc && i < sd[d]->n; i++) {
            const sh_shard_entry *e = &sd[d]->entry[i];
            if (!ck_box_numel(&e->box))
                continue;
            sh_stage_src *src = device_source(c, e);
            rc = src ? ck_client_shard_fill(*sv, e->name, sh_stage_fill, src, err)
                     : ck_client_shard(*sv, e->name, e->data, err);
        }
    for (int b = 0; !rc && c->group.rank == 0 && b < nblobs; b++)
        rc = ck_client_blob(*sv, blobs[b].name, blobs[b].data, blobs[b].len, err);
    return rc;
}

/* ---- embedded ---- */

static int fill_part(sh_checkpoint *c, ck_err *err);
static int join_part(sh_checkpoint *c, ck_err *err);

/* The part is handed over (copied and joined) or failed: the fence may let the
 * sources change, and sees why it failed. */
static void set_copied(sh_checkpoint *c, const ck_err *e)
{
    pthread_mutex_lock(&c->mu);
    if (e->code)
        c->part = *e;
    c->copied = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* The part off the training thread: (lazy) the copy, then the pending directory and
 * the write. Until it joined the directory, a failure leaves the rank without a part
 * to gather (c->part, set before the fence or the all-reduce can look). */
static void *write_part(void *arg)
{
    sh_checkpoint *c = arg;
    ck_err e = { 0 };
    int rc = c->th_copies ? fill_part(c, &e) : 0;
    if (!rc)
        rc = join_part(c, &e);
    set_copied(c, &e);
    if (!rc) {
        rc = ck_save_write_rank(c->save, c->group.rank, &e);
        c->th_err = e;
        c->th_rc = rc;
    }
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
    if (e) {
        atomic_store(&c->th_done, true);
        return ck_err_set(err, -e, "checkpoint %s: starting a thread: %s", c->name,
                          strerror(e));
    }
    c->th_running = true;
    c->phase = ph;
    return 0;
}

static void join(sh_checkpoint *c)
{
    if (c->th_running)
        pthread_join(c->th, NULL);
    c->th_running = false;
}

/* The same ck_save on every rank: the tensors in order, this rank's shards, rank 0's
 * blobs. */
static int build(sh_checkpoint *c, ck_save **out, const char *name, uint64_t step,
                 const sh_state_dict *const *sd, int nsd, const sh_blob *blobs, int nblobs,
                 ck_err *err)
{
    int rc = ck_save_begin(out, c->root, name, step, &sd[0]->entry[0].mesh, NULL, err);
    if (!rc)
        rc = reserve_sources(c, sd, nsd, err);
    for (int d = 0; !rc && d < nsd; d++)
        for (size_t i = 0; !rc && i < sd[d]->n; i++) {
            const sh_shard_entry *e = &sd[d]->entry[i];
            rc = ck_save_tensor(*out, e->name, e->dtype, e->ndim, e->shape, e->placement,
                                err);
            sh_stage_src *src = !rc && ck_box_numel(&e->box) ? device_source(c, e) : NULL;
            if (src)
                rc = ck_save_shard_fill(*out, e->name, c->group.rank, sh_stage_fill, src,
                                        err);
            else if (!rc && ck_box_numel(&e->box))
                rc = ck_save_shard(*out, e->name, c->group.rank, e->data, err);
        }
    for (int b = 0; !rc && c->group.rank == 0 && b < nblobs; b++)
        rc = ck_save_blob(*out, blobs[b].name, blobs[b].data, blobs[b].len, err);
    return rc;
}

static void image_release(sh_checkpoint *c)
{
    if (c->image_pinned)
        stage_unmapping(c->stage, c->image.map, c->image.size);
    c->image_pinned = false;
    ck_staging_unmap(&c->image);
}

/* The staging image of this rank's file: at least size bytes, faulted in (and, on a
 * GPU rank, registered for DMA). */
static int image_fit(sh_checkpoint *c, uint64_t size, ck_err *err)
{
    if (c->image.map && c->image.size >= size)
        return 0;
    image_release(c);
    int rc = ck_staging_map(&c->image, size, 0, err);
    c->image_pinned = !rc && c->stage && stage_mapped(c->stage, c->image.map,
                                                      c->image.size) == 0;
    return rc;
}

/* This rank's shards into its file's image (fitted first): the copy, which needs the
 * save's plan only. */
static int fill_part(sh_checkpoint *c, ck_err *err)
{
    int rc = image_fit(c, ck_save_rank_bytes(c->save, c->group.rank), err);
    return rc ? rc : ck_save_fill_rank(c->save, c->group.rank, c->image.map, err);
}

/* Joins the group's pending directory and binds the image as this rank's file. */
static int join_part(sh_checkpoint *c, ck_err *err)
{
    char token[16];
    snprintf(token, sizeof token, "%012" PRIx64,
             (uint64_t)((c->nonce + c->seq * 0x9E3779B97F4A7C15ull) & 0xffffffffffffull));
    int rc = ck_save_join_group(c->save, &c->group, token, err);
    return rc ? rc : ck_save_rank_image(c->save, c->group.rank, c->image.map, err);
}

/* This rank's part of save c->save: copied into the image (lazy: on the thread), then
 * joined and written by the thread. Until it is joined, a failure leaves the rank
 * without a part to gather (c->part says why, the all-reduce tells the others); after,
 * it is the part's outcome, gathered by ck_save_finish_group. */
static void start_part(sh_checkpoint *c, bool lazy)
{
    c->th_copies = lazy;
    c->copied = !lazy;
    if (!lazy && fill_part(c, &c->part))
        return;
    ck_err why = { 0 };
    if (start(c, write_part, WRITING, &why))
        set_copied(c, &why);
}

/* After a part timed out, every collective call fails the same way on every rank. */
static int dead(const sh_checkpoint *c, ck_err *err)
{
    return c->dead.code ? ck_err_set(err, c->dead.code, "%s", ck_err_msg(&c->dead)) : 0;
}

/* Collective, when a part outlived the bound: every rank learns the first late rank,
 * its host and how many are late, and fails with the same error from now on. A late
 * rank's writer cannot be stopped (it may be blocked in the kernel): it keeps c. */
static int time_out(sh_checkpoint *c, int late, ck_err *err)
{
    int32_t n = atomic_load(&c->th_done) ? 0 : 1;
    int64_t host[8] = { 0 };
    if (c->group.rank == (uint64_t)late)
        gethostname((char *)host, sizeof host - 1);
    int rc = sh_all_reduce(sh_world_comm(c->w), &n, &n, 1, CK_I32, SH_SUM, NULL, err);
    if (!rc)
        rc = sh_broadcast(sh_world_comm(c->w), host, 8, CK_I64, late, NULL, err);
    if (rc)
        return rc;
    ((char *)host)[sizeof host - 1] = '\0';
    if (atomic_load(&c->th_done)) {
        join(c);
        ck_save_abort(c->save);     /* shared: what it wrote stays debris */
        c->save = NULL;
    } else {
        c->stuck = true;            /* c->save stays its writer's, which still uses it */
    }
    c->phase = IDLE;
    char others[48] = "";
    if (n > 1)
        snprintf(others, sizeof others, " (and %d other rank%s)", n - 1, n > 2 ? "s" : "");
    ck_err_set(&c->dead, -ETIMEDOUT, "checkpoint %s: rank %d on host %s%s did not write its "
               "part within %.0f s of the save's start (its storage hangs?); nothing was "
               "published, and this run saves no more checkpoints", c->name, late,
               (char *)host, others, c->timeout_ms / 1e3);
    c->name[0] = '\0';
    return ck_err_set(err, c->dead.code, "%s", ck_err_msg(&c->dead));
}

/* Collective: moves the save in flight on; with block, until it is over. Ranks agree
 * on the step at which to finish by an all-reduce of "my part is still being
 * written" and "I have no part". */
static int advance(sh_checkpoint *c, bool block, ck_err *err)
{
    int rc = 0;
    if (c->phase == WRITING) {
        /* v: someone still writing, someone without a part, someone's clock past the
         * bound, world - the first rank still writing. Blocking, the ranks ask again
         * until every part is written or the bound passes. */
        int32_t v[4];
        for (;;) {
            bool writing = !atomic_load(&c->th_done);
            v[0] = writing;
            v[1] = c->part.code ? 1 : 0;
            v[2] = since_ms(&c->t0) > c->timeout_ms;
            v[3] = writing ? (int32_t)(c->group.world - c->group.rank) : 0;
            rc = all_max(c, v, 4, err);
            if (rc || !v[0] || v[2] || !block)
                break;
            nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
        }
        if (!rc && v[0] && v[2])
            return time_out(c, (int)(c->group.world - (uint64_t)v[3]), err);
        if (rc || v[0])
            return rc;
        join(c);
        c->phase = IDLE;
        if (v[1])
            return fail_all(c, err);
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
            return over(c, code, ck_err_msg(&why), err);
        }
    }
    if (c->phase == COMMITTING && (block || atomic_load(&c->th_done))) {
        join(c);
        c->phase = IDLE;
        rc = over(c, c->th_rc, ck_err_msg(&c->th_err), err);
    }
    return rc;
}

/* ---- both ---- */

/* Lets go of this rank's part of a failed save. What it wrote into a shared directory
 * stays as debris for recovery. */
static void drop(sh_checkpoint *c)
{
    fence_wait(c);
    ck_client_save_free(c->sv);
    c->sv = NULL;
    join(c);
    c->phase = IDLE;
    ck_save_abort(c->save);
    c->save = NULL;
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

int sh_checkpoint_reserve(sh_checkpoint *c, const sh_state_dict *const *sd, int nsd,
                          const sh_blob *blobs, int nblobs, ck_err *err)
{
    uint64_t bytes;
    int rc = check_entries("reserve", sd, nsd, &bytes, err);
    if (rc)
        return rc;
    if (c->cl) {
        ck_client_save *sv = NULL;
        rc = declare(c, &sv, "reserve", 0, sd, nsd, false, blobs, nblobs, err);
        if (!rc)
            rc = ck_client_save_reserve(sv, true, err);
        ck_client_save_free(sv);
        return rc;
    }
    if (c->phase != IDLE)
        return ck_err_set(err, -EBUSY, "checkpoint staging: reserve it before the first save "
                          "or once the last is over (sh_checkpoint_wait)");
    ck_save *s = NULL;
    rc = build(c, &s, "reserve", 0, sd, nsd, NULL, 0, err);
    if (!rc)
        rc = image_fit(c, ck_save_rank_bytes(s, c->group.rank), err);
    ck_save_abort(s);
    return rc;
}

static int save(sh_checkpoint *c, const char *name, uint64_t step,
                const sh_state_dict *const *sd, int nsd, const sh_blob *blobs, int nblobs,
                bool lazy, double *stall_ms, ck_err *err)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = dead(c, err);
    if (rc) {
        *stall_ms = 0;
        return rc;
    }
    if (lazy && !c->optim)
        rc = ck_err_set(err, -EINVAL, "checkpoint %s: a lazy save needs the optimizer that "
                        "writes its sources (sh_checkpoint_opts.optim), which fences it",
                        name);
    /* One save in flight: the next one waits for it (collectively, only if it is still
     * in flight). */
    if (!rc)
        rc = c->cl ? retire(c, err) : advance(c, true, err);
    uint64_t bytes = 0;
    if (!rc)
        rc = check_entries(name, sd, nsd, &bytes, err);
    if (rc) {
        *stall_ms = since_ms(&t0);
        return rc;
    }
    snprintf(c->name, sizeof c->name, "%s", name);
    c->t0 = t0;
    c->bytes = bytes;
    c->seq++;
    c->agreed = false;
    c->fence_due = lazy;
    c->fence_ms = 0;
    ck_err_clear(&c->part);
    /* A failure is the part's outcome, in c->part: the ranks agree on it at a later
     * progress, and rank 0 reports it through poll. */
    if (c->cl) {
        if (!declare(c, &c->sv, name, step, sd, nsd, true, blobs, nblobs, &c->part)) {
            if (lazy)
                ck_client_save_lazy(c->sv, &c->part);
            else
                ck_client_save_async(c->sv, &c->part);
        }
    } else {
        c->phase = WRITING;
        c->copied = true;
        atomic_store(&c->th_done, true);
        if (!build(c, &c->save, name, step, sd, nsd, blobs, nblobs, &c->part))
            start_part(c, lazy);
    }
    *stall_ms = since_ms(&t0);
    return 0;
}

int sh_checkpoint_save_async(sh_checkpoint *c, const char *name, uint64_t step,
                             const sh_state_dict *const *sd, int nsd, const sh_blob *blobs,
                             int nblobs, double *stall_ms, ck_err *err)
{
    return save(c, name, step, sd, nsd, blobs, nblobs, false, stall_ms, err);
}

int sh_checkpoint_save_lazy(sh_checkpoint *c, const char *name, uint64_t step,
                            const sh_state_dict *const *sd, int nsd, const sh_blob *blobs,
                            int nblobs, double *stall_ms, ck_err *err)
{
    return save(c, name, step, sd, nsd, blobs, nblobs, true, stall_ms, err);
}

int sh_checkpoint_progress(sh_checkpoint *c, ck_err *err)
{
    if (c->dead.code)
        return dead(c, err);
    if (!c->cl)
        return advance(c, false, err);
    /* A lazy part's fate is known at its fence. name, agreed and fence_due say the same
     * on every rank (c->sv does not: a rank may have failed to begin its part). */
    return c->name[0] && !c->agreed && !c->fence_due ? agree_staged(c, err) : 0;
}

int sh_checkpoint_poll(sh_checkpoint *c, sh_checkpoint_done *done, ck_err *err)
{
    if (c->sv && c->agreed && c->group.rank == 0) {
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
    if (c->dead.code)
        return dead(c, err);
    return c->cl ? retire(c, err) : advance(c, true, err);
}

void sh_checkpoint_free(sh_checkpoint *c)
{
    if (!c)
        return;
    if (c->optim)
        sh_adamw_set_fence(c->optim, NULL, NULL);
    if (c->stuck)
        return;     /* its writer still uses c, its save and its image: all are let go */
    /* No collective here: the save in flight is let go, and what it wrote is debris
     * for recovery (connected: the client waits for its staged part). */
    fence_wait(c);
    if (c->sv && c->agreed && c->group.rank == 0)
        ck_client_wait(c->sv, NULL);
    ck_client_save_free(c->sv);
    ck_client_close(c->cl);
    join(c);
    if (c->phase == WRITING)
        ck_save_abort(c->save);     /* a commit frees its save itself */
    image_release(c);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
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

/* Host staging for the device entries of a load, reused from entry to entry: pinned
 * where the runtime gives it (the copy up is then a DMA), else plain memory. */
typedef struct load_stage {
    void *p;
    size_t cap;
    bool pinned;
} load_stage;

static int load_stage_fit(load_stage *b, size_t bytes)
{
    if (b->cap >= bytes)
        return 0;
    if (b->pinned)
        sh_pinned_free(b->p);
    else
        free(b->p);
    *b = (load_stage){0};
    if (sh_pinned_alloc(&b->p, bytes, false) == 0) {
        b->pinned = true;
    } else if (!(b->p = malloc(bytes))) {
        return -ENOMEM;
    }
    b->cap = bytes;
    return 0;
}

static void load_stage_free(load_stage *b)
{
    if (b->pinned)
        sh_pinned_free(b->p);
    else
        free(b->p);
}

/* A shard in device memory is read into the host staging, then copied to the device;
 * the copy is waited for before the staging is reused. */
static int read_entry(ck_ckpt *ck, ck_reader *rd, const sh_shard_entry *e, size_t bytes,
                      load_stage *stage, ck_err *err)
{
    if (e->device != SH_CUDA)
        return ck_reader_read(rd, &e->box, 0, bytes, e->data, err);
    const sh_dev_ops *d = sh_dev_for(SH_CUDA);
    int rc = d ? load_stage_fit(stage, bytes) : -ENOTSUP;
    if (rc)
        return ck_err_set(err, rc, "checkpoint %s: loading '%s' onto the device: %s",
                          ck_get_info(ck)->name, e->name,
                          d ? "out of memory" : "this build has no CUDA");
    rc = ck_reader_read(rd, &e->box, 0, bytes, stage->p, err);
    if (!rc) {
        rc = d->copy(e->data, stage->p, bytes);
        if (!rc)
            rc = d->sync();
        if (rc)
            ck_err_set(err, rc, "checkpoint %s: copying '%s' to the device",
                       ck_get_info(ck)->name, e->name);
    }
    return rc;
}

int sh_checkpoint_load_state_dict(ck_ckpt *ck, const sh_state_dict *sd, ck_err *err)
{
    load_stage stage = {0};
    int rc = 0;
    for (size_t i = 0; !rc && i < sd->n; i++) {
        const sh_shard_entry *e = &sd->entry[i];
        ck_reader *rd;
        rc = ck_reader_open(ck, e->name, &rd, err);
        if (rc) {
            ck_err_set(err, rc, "checkpoint %s", ck_get_info(ck)->name);
            break;
        }
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
            rc = read_entry(ck, rd, e, n * ck_dtype_size(e->dtype), &stage, err);
        ck_reader_close(rd);
    }
    load_stage_free(&stage);
    return rc;
}
