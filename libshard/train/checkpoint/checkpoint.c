/* checkpoint.c - asynchronous collective saves of sharded state dicts (see
 * sh/checkpoint.h): a thin caller of the checkpoint client (ck/client.h).
 *
 * Every rank hands its own part to its client and the engine does the rest: ckptd
 * through its socket, or the embedded engine of this process, the ranks' engines
 * meeting through the root (ck_client_opts.nodes = the world, one process per rank).
 * There is one path; the two engines differ only in where the saver runs.
 *
 * A save's stall holds no collective: each rank hands its part over alone (a lazy save
 * on the client's thread, until the optimizer's fence), and the ranks agree that the
 * save happened later, at a sh_checkpoint_progress, on the training thread (so the MPI
 * library needs no thread support: docs/decisions/0047-ranks-agree-at-progress.md). At
 * the first progress after the part is staged (after the fence, for a lazy save) one
 * all-reduce says whether every rank's part got there; then rank 0 asks for the commit
 * and watches for it. Every bound (a part that never arrives, an engine that died,
 * storage that hangs) is the engine's and the client's, and ends the save with its
 * reason, which rank 0 reports through poll.
 */
#include "sh/checkpoint.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ck/catalog.h"
#include "ck/steps.h"
#include "ck/client.h"
#include "ck/load.h"
#include "sh/comm.h"
#include "device/device.h"
#include "device/stage.h"

struct sh_checkpoint {
    sh_world *w;
    uint64_t rank, world;
    sh_adamw *optim;               /* its step fences lazy saves */
    ck_client *cl;                 /* ckptd, or this process's embedded engine */
    ck_job_id job;                 /* rank 0's, given to every rank: every save's job */
    ck_level level;                /* asked of every save; and rank 0's last one reached */
    ck_level reached;
    char note[CK_ERR_MSG_MAX];
    ck_decl *decl;                 /* the last save's: kept while the state keeps its shape */
    ck_client_save *sv;            /* this rank's part of the save in flight */
    bool agreed;                   /* every rank staged it, commit asked */
    char name[CK_NAME_MAX];        /* the save in flight; "" when none */
    uint64_t bytes;
    struct timespec t0;
    sh_checkpoint_done *report;    /* rank 0: finished saves not yet polled */
    int nreport;
    /* This rank's part of the save in flight: */
    bool fence_due;                /* lazy, and not fenced yet */
    ck_err part;                   /* part.code: it could not be handed over */
    double fence_ms;
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
    c->rank = (uint64_t)sh_world_rank(w);
    c->world = (uint64_t)sh_world_size(w);
    int rc = 0;
    if (strlen(o->root) >= PATH_MAX)
        rc = ck_err_set(err, -ENAMETOOLONG, "checkpoint root %s: path too long", o->root);
    /* Rank 0 makes the root and the job's id (ck/client.h: the engines put only the
     * ranks of one job in one save); broadcasting both also keeps the other ranks from
     * looking for the root before it exists. */
    const char *env = getenv("CKPTD_SOCKET");
    bool connected = o->daemon || (env && *env);
    int64_t made = 0, job[1 + CK_JOB_ID_LEN / 8] = { 0 };
    _Static_assert(CK_JOB_ID_LEN % 8 == 0, "a job id travels as int64s");
    if (!rc && c->rank == 0)
        made = ck_root_make(o->root, err);
    if (!rc && !made && c->rank == 0 && ck_job_id_new(&c->job, err) < 0)
        made = err->code;
    /* Embedded, no ckptd's start recovers the root: rank 0 does, before any save of this
     * run, so that what dead runs left (their pending saves, their engines' heartbeats)
     * goes. It never touches what live writers own. */
    ck_err rec = { 0 };
    if (!rc && !made && c->rank == 0 && !connected &&
        ck_root_recover(o->root, NULL, NULL, NULL, &rec) < 0)
        fprintf(stderr, "checkpoints: recovering %s: %s (its debris stays)\n", o->root,
                ck_err_msg(&rec));
    job[0] = made;
    memcpy(&job[1], c->job.bytes, CK_JOB_ID_LEN);
    if (!rc)
        rc = sh_broadcast(sh_world_comm(w), job, sizeof job / sizeof job[0], CK_I64, 0, NULL,
                          err);
    made = job[0];
    memcpy(c->job.bytes, &job[1], CK_JOB_ID_LEN);
    if (!rc && made)     /* rank 0's err says why in full */
        rc = c->rank == 0 ? (int)made
                          : ck_err_set(err, (int)made, "checkpoint root %s: %s", o->root,
                                       strerror((int)-made));
    if (!rc && sh_world_device(w) == SH_CUDA && (rc = sh_stage_cuda_new(&c->stage)))
        rc = ck_err_set(err, rc, "checkpoints on rank %d: no CUDA stream for device copies",
                        sh_world_rank(w));
    /* Embedded, each rank is a process with an engine of its own, and the world's
     * engines meet through the root; through ckptd, $CKPTD_NODES counts the daemons. */
    double pt = o->part_timeout_s > 0 ? o->part_timeout_s : 1800.0;
    c->level = o->level;
    if (!rc)
        rc = ck_client_open(&c->cl, o->root, &(ck_client_opts){
                                .socket = o->daemon,
                                .embedded = !connected,
                                .nodes = connected ? 0 : (unsigned)c->world,
                                .part_timeout = (unsigned)(pt < 1 ? 1 : pt),
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
    if (c->rank == 0) {
        sh_checkpoint_done d = { .rc = code, .bytes = c->bytes,
                                 .seconds = since_ms(&c->t0) / 1e3 };
        snprintf(d.name, sizeof d.name, "%s", c->name);
        snprintf(d.msg, sizeof d.msg, "%s", code ? why : c->note);
        d.level = code ? CK_LEVEL_DEFAULT : c->reached;
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
    if (c->sv && !c->part.code && ck_client_wait(c->sv, CK_CLIENT_STAGED, &why))
        c->part = why;
    c->fence_due = false;
    c->fence_ms = since_ms(&t0);
}

int sh_checkpoint_fence(sh_checkpoint *c, ck_err *err)
{
    fence_wait(c);
    return c->name[0] && c->part.code ? ck_err_set(err, c->part.code, "%s",
                                                   ck_err_msg(&c->part)) : 0;
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

/* ---- agreement ---- */

/* Lets go of this rank's part of a save (the client waits, within its bound, until the
 * engine no longer reads its staging). */
static void drop(sh_checkpoint *c)
{
    fence_wait(c);
    ck_client_save_free(c->sv);
    c->sv = NULL;
}

/* Collective, where some rank could not hand its part over: rank 0 learns the first
 * such rank's error and reports the save failed; every rank lets its part go. */
typedef struct fail_msg {
    int64_t code;
    char msg[CK_ERR_MSG_MAX];
} fail_msg;

static int fail_all(sh_checkpoint *c, ck_err *err)
{
    fail_msg mine = { .code = c->part.code }, *all = NULL;
    if (c->part.code)
        snprintf(mine.msg, sizeof mine.msg, "rank %" PRIu64 ": %s", c->rank,
                 ck_err_msg(&c->part));
    if (c->rank == 0 && !(all = calloc(c->world, sizeof *all)))
        return ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory", c->name);
    int rc = sh_gather(sh_world_comm(c->w), &mine, all, sizeof mine / 8, CK_I64, 0, NULL,
                       err);
    drop(c);
    const fail_msg *first = NULL;
    for (uint64_t k = 0; !rc && all && k < c->world && !first; k++)
        if (all[k].code)
            first = &all[k];
    if (!rc && first)
        rc = over(c, (int)first->code, first->msg, err);
    free(all);
    c->name[0] = '\0';
    return rc;
}

/* Collective, once every part's fate is known here (after the fence): every rank
 * learns whether all were staged; then rank 0 asks for the commit. */
static int agree_staged(sh_checkpoint *c, ck_err *err)
{
    int32_t bad = c->part.code ? 1 : 0;
    int rc = sh_all_reduce(sh_world_comm(c->w), &bad, &bad, 1, CK_I32, SH_MAX, NULL, err);
    if (rc)
        return rc;
    if (bad)
        return fail_all(c, err);
    c->agreed = true;
    ck_err why = { 0 };
    if (c->rank == 0 && ck_client_commit(c->sv, &why)) {
        int code = why.code;
        drop(c);
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
    int code = c->rank == 0 && c->sv ? ck_client_wait(c->sv, CK_CLIENT_COMMITTED, &why) : 0;
    c->reached = code || !c->sv ? CK_LEVEL_DEFAULT
                                : ck_client_level_reached(c->sv, c->note, sizeof c->note);
    drop(c);
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

/* The declaration of sd's tensors into c->decl: the one c has while they keep their
 * names, dtypes, shapes and placements, so that its plan is made once. */
static int decl_of(sh_checkpoint *c, const sh_state_dict *const *sd, int nsd, ck_err *err)
{
    ck_decl *d;
    int rc = ck_decl_new(&d, &sd[0]->entry[0].mesh, err);
    for (int k = 0; !rc && k < nsd; k++)
        for (size_t i = 0; !rc && i < sd[k]->n; i++) {
            const sh_shard_entry *e = &sd[k]->entry[i];
            rc = ck_decl_tensor(d, e->name, e->dtype, e->ndim, e->shape, e->placement, err);
        }
    if (rc || (c->decl && ck_decl_equal(c->decl, d))) {
        ck_decl_free(d);
        return rc;
    }
    ck_decl_free(c->decl);
    c->decl = d;
    return ck_decl_seal(d, err);
}

/* Begins this rank's part, offers its shards and, on rank 0, the blobs. */
static int declare(sh_checkpoint *c, ck_client_save **sv, const char *name, uint64_t step,
                   const sh_state_dict *const *sd, int nsd, const sh_blob *blobs,
                   int nblobs, ck_err *err)
{
    int rc = decl_of(c, sd, nsd, err);
    if (!rc)
        rc = ck_client_begin(c->cl, sv, name, step, c->decl, c->rank, &c->job, err);
    if (!rc)
        ck_client_level(*sv, c->level);
    if (!rc)
        rc = reserve_sources(c, sd, nsd, err);
    for (int d = 0; !rc && d < nsd; d++)
        for (size_t i = 0; !rc && i < sd[d]->n; i++) {
            const sh_shard_entry *e = &sd[d]->entry[i];
            if (!ck_box_numel(&e->box))
                continue;
            sh_stage_src *src = device_source(c, e);
            rc = src ? ck_client_shard_fill(*sv, e->name, sh_stage_fill, src, err)
                     : ck_client_shard(*sv, e->name, e->data, err);
        }
    for (int b = 0; !rc && c->rank == 0 && b < nblobs; b++)
        rc = ck_client_blob(*sv, blobs[b].name, blobs[b].data, blobs[b].len, err);
    return rc;
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
    if ((rc = decl_of(c, sd, nsd, err)))
        return rc;
    /* Rank 0's part carries the blobs too. */
    bytes = ck_decl_file_bytes(c->decl, c->rank);
    for (int b = 0; c->rank == 0 && b < nblobs; b++)
        bytes += blobs[b].len;
    ck_client_reserve(c->cl, bytes, true);
    return 0;
}

static int save(sh_checkpoint *c, const char *name, uint64_t step,
                const sh_state_dict *const *sd, int nsd, const sh_blob *blobs, int nblobs,
                bool lazy, double *stall_ms, ck_err *err)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = 0;
    if (lazy && !c->optim)
        rc = ck_err_set(err, -EINVAL, "checkpoint %s: a lazy save needs the optimizer that "
                        "writes its sources (sh_checkpoint_opts.optim), which fences it",
                        name);
    /* One save in flight: the next one waits for it (collectively, only if it is still
     * in flight). */
    if (!rc)
        rc = retire(c, err);
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
    c->agreed = false;
    c->fence_due = lazy;
    c->fence_ms = 0;
    ck_err_clear(&c->part);
    /* A failure is the part's outcome, in c->part: the ranks agree on it at a later
     * progress, and rank 0 reports it through poll. */
    if (!declare(c, &c->sv, name, step, sd, nsd, blobs, nblobs, &c->part))
        ck_client_submit(c->sv, &(ck_submit){ .mode = lazy ? CK_SUBMIT_LAZY : CK_SUBMIT_COPY },
                         &c->part);
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
    /* A lazy part's fate is known at its fence. name, agreed and fence_due say the same
     * on every rank (c->sv does not: a rank may have failed to begin its part). */
    return c->name[0] && !c->agreed && !c->fence_due ? agree_staged(c, err) : 0;
}

int sh_checkpoint_poll(sh_checkpoint *c, sh_checkpoint_done *done, ck_err *err)
{
    if (c->sv && c->agreed && c->rank == 0) {
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
    return retire(c, err);
}

void sh_checkpoint_free(sh_checkpoint *c)
{
    if (!c)
        return;
    if (c->optim)
        sh_adamw_set_fence(c->optim, NULL, NULL);
    /* No collective here: the save in flight is let go, and what it wrote is debris for
     * recovery (the client waits for a staged part, within its bound). */
    fence_wait(c);
    if (c->sv && c->agreed && c->rank == 0)
        ck_client_wait(c->sv, CK_CLIENT_COMMITTED, NULL);
    ck_client_save_free(c->sv);
    ck_client_close(c->cl);
    ck_decl_free(c->decl);
    free(c->report);
    free(c->src);
    sh_stage_cuda_free(c->stage);
    free(c);
}

/* Gives every rank rank 0's pick: its code (0, or the error, whose message rank 0 has
 * in why) and the name. Rank 0 alone looks, so that a save committing meanwhile (ckptd
 * finishing a dead run's last checkpoint) cannot make ranks disagree. */
static int agree(sh_world *w, int code, char name[CK_NAME_MAX], const ck_err *why, ck_err *err)
{
    int32_t msg[1 + CK_NAME_MAX / 4] = { code };
    memcpy(&msg[1], name, CK_NAME_MAX);
    int rc = sh_broadcast(sh_world_comm(w), msg, sizeof msg / 4, CK_I32, 0, NULL, err);
    if (rc)
        return rc;
    if (msg[0])
        return ck_err_set(err, msg[0], "%s", why->msg[0] ? why->msg : "no committed checkpoint "
                          "to resume from (rank 0 looked)");
    snprintf(name, CK_NAME_MAX, "%s", (const char *)&msg[1]);
    return 0;
}

int sh_checkpoint_latest(sh_world *w, const char *root, const char *prefix,
                         char name[CK_NAME_MAX], ck_err *err)
{
    ck_err why = { 0 };
    char best[CK_NAME_MAX] = "";
    int code = sh_world_rank(w) == 0 ? ck_root_newest(root, prefix, best, NULL, &why) : 0;
    int rc = agree(w, code, best, &why, err);
    if (!rc)
        snprintf(name, CK_NAME_MAX, "%s", best);
    return rc;
}

int sh_checkpoint_restore(sh_world *w, const char *root, const char *daemon, const char *prefix,
                          const sh_state_dict *const *sd, int nsd, char name[CK_NAME_MAX],
                          ck_ckpt **out, ck_err *err)
{
    const char *env = getenv("CKPTD_SOCKET");
    const char *sock = daemon ? daemon : env && *env ? env : NULL;
    ck_client *cl = NULL;
    ck_err why = { 0 };
    char best[CK_NAME_MAX] = "", said[CK_ERR_MSG_MAX] = "";
    *out = NULL;
    int code = sock ? ck_client_open(&cl, root, &(ck_client_opts){ .socket = sock }, &why) : 0;
    if (!sock && sh_world_rank(w) == 0)
        code = ck_root_newest(root, prefix, best, NULL, &why);
    else if (!code && sh_world_rank(w) == 0)
        code = ck_client_resolve(cl, prefix, true, best, said, sizeof said, &why);
    if (!code && said[0])
        printf("restore: %s\n", said);
    int rc = agree(w, code, best, &why, err);
    if (!rc && sock && !cl)            /* this rank's daemon did not answer */
        rc = ck_err_set(err, code, "%s", ck_err_msg(&why));
    if (!rc && !sock)
        rc = ck_open(root, best, out, err);
    else if (!rc)
        rc = ck_client_restore_open(cl, best, out, err);
    /* Through ckptd, the files this rank's entries read are brought to its node first. */
    size_t n = 0, k = 0;
    for (int i = 0; i < nsd; i++)
        n += sd[i]->n;
    ck_load_item *items = !rc && cl ? calloc(n ? n : 1, sizeof *items) : NULL;
    if (!rc && cl && !items)
        rc = ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory", best);
    for (int i = 0; items && i < nsd; i++)
        for (size_t j = 0; j < sd[i]->n; j++)
            if (ck_box_numel(&sd[i]->entry[j].box))
                items[k++] = (ck_load_item){ .tensor = sd[i]->entry[j].name,
                                             .box = sd[i]->entry[j].box };
    if (items && (rc = ck_client_restore_fetch(cl, out, items, k, err)) < 0)
        ck_err_set(err, rc, "checkpoint %s: rank %d", best, sh_world_rank(w));
    free(items);
    ck_client_close(cl);
    if (rc) {
        ck_close(*out);
        *out = NULL;
        return rc;
    }
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
        /* Into the entry's dtype: a checkpoint of another precision converts. */
        rc = ck_reader_open(ck, e->name, e->dtype, &rd, err);
        if (rc) {
            ck_err_set(err, rc, "checkpoint %s", ck_get_info(ck)->name);
            break;
        }
        const ck_tensor *t = ck_reader_tensor(rd);
        bool same = t->ndim == e->ndim;
        for (int d = 0; same && d < t->ndim; d++)
            same = t->shape[d] == e->shape[d];
        uint64_t n = ck_box_numel(&e->box);
        if (!same)
            rc = ck_err_set(err, -EINVAL, "checkpoint %s: tensor '%s' has another shape than "
                            "the model's (a different configuration?)",
                            ck_get_info(ck)->name, e->name);
        else if (n)
            rc = read_entry(ck, rd, e, n * ck_dtype_size(e->dtype), &stage, err);
        ck_reader_close(rd);
    }
    load_stage_free(&stage);
    return rc;
}
