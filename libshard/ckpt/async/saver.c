/* saver.c - the async save engine (see async/saver.h): its worker threads and jobs, and
 * the calls ckptd and the embedded client make. One save's states are saver_state.c's,
 * the meeting of engines that share a save saver_meet.c's (async/saver_int.h). */
#include "async/saver_int.h"

#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sys/stat.h>

#include "io/rootfs.h"
#include "format/decl.h"
#include "save/part.h"

static void run_write(ck__saver *sv, sv_ckpt *c, uint64_t rank)
{
    int r = 0;
    ck_err err = { 0 };
    if (c->state == C_COLLECTING) {
        pthread_mutex_unlock(&sv->mu);
        r = ck__save_write_rank(c->s, rank, &err);
        pthread_mutex_lock(&sv->mu);
        r = c->role->written(sv, c, rank, r, &err);
    }
    c->writes--;
    part *p = &c->parts[rank];
    if (r < 0 && c->state == C_COLLECTING) {
        char msg[CK_ERR_MSG_MAX + 64];
        if (c->heard)
            snprintf(msg, sizeof msg, "checkpoint %s: %s", c->name, ck_err_msg(&err));
        else
            snprintf(msg, sizeof msg, "rank %llu: %s", (unsigned long long)rank, ck_err_msg(&err));
        ck__sv_fail(sv, c, r, msg);
    }
    if (c->state == C_FAILED) {
        ck__sv_finish_failed(sv, c);
        return;
    }
    p->state = P_DURABLE;
    c->durable++;
    c->bytes_written += c->parts[rank].image_bytes;
    ck__sv_emit(sv, CK_SAVER_DURABLE, c, rank);
    c->role->commit(sv, c);
}

static void run_commit(ck__saver *sv, sv_ckpt *c)
{
    ck_err err = { 0 };
    ck_save_stats st;
    if (sv->o.local_root) {
        ck__sv_tier_commit(sv, c);
        return;
    }
    pthread_mutex_unlock(&sv->mu);
    int r = ck_save_commit(c->s, &st, &err);
    pthread_mutex_lock(&sv->mu);
    c->s = NULL;    /* freed by the commit, whatever its result */
    if (r == 0) {
        ck__sv_log(sv, "checkpoint %s committed: %llu ranks, %llu bytes, %.3f s", c->name,
              (unsigned long long)c->world, (unsigned long long)st.file_bytes,
              ck__sv_now() - c->t0);
        ck__sv_emit(sv, CK_SAVER_COMMITTED, c, 0);
        /* The members know the commit by ROOT/NAME, not by the meeting. */
        if (c->meet[0])
            ck__meet_remove(sv->root, c->meet);
        ck__sv_unlink(sv, c);
        ck__sv_free_parts(c, true);
        return;
    }
    c->state = C_COLLECTING;
    ck__sv_fail(sv, c, r, ck_err_msg(&err));
}

static void run_abort(ck__saver *sv, sv_ckpt *c)
{
    ck_save *s = c->s;
    c->s = NULL;
    const sv_role *role = c->role;
    pthread_mutex_unlock(&sv->mu);
    role->abort(s);
    pthread_mutex_lock(&sv->mu);
    c->writes--;
    ck__sv_finish_failed(sv, c);
}

static void *worker(void *arg)
{
    ck__saver *sv = arg;
    pthread_mutex_lock(&sv->mu);
    for (;;) {
        while (!sv->head && !sv->stop)
            pthread_cond_wait(&sv->work, &sv->mu);
        sv_job *j = sv->head;
        if (!j)
            break;
        sv->head = j->next;
        if (!sv->head)
            sv->tail = NULL;
        if (j->kind == JOB_COMMIT)
            run_commit(sv, j->c);
        else if (j->kind == JOB_ABORT)
            run_abort(sv, j->c);
        else if (j->kind == JOB_REPLICATE)
            ck__sv_tier_replicate(sv, j->c);
        else
            run_write(sv, j->c, j->rank);
        free(j);
    }
    pthread_mutex_unlock(&sv->mu);
    return NULL;
}

/* ---- saves shared by several daemons: the meeting thread ---- */

int ck__saver_new(const ck__saver_opts *o, ck__saver **out, ck_err *err)
{
    ck__saver *sv = calloc(1, sizeof *sv);
    if (!sv)
        return ck_err_set(err, -ENOMEM, "out of memory");
    sv->o = *o;
    snprintf(sv->root, sizeof sv->root, "%s", o->root);
    sv->o.root = sv->root;
    pthread_mutex_init(&sv->mu, NULL);
    pthread_cond_init(&sv->work, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&sv->idle, &ca);      /* ck__saver_free's limit is monotonic */
    pthread_cond_init(&sv->meet_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (!sv->o.poll_ms)
        sv->o.poll_ms = 20;
    sv->beat_every = sv->o.dead_after / 4.0;
    sv->beat_every = sv->beat_every > 1.0 ? 1.0 : sv->beat_every < 0.05 ? 0.05 : sv->beat_every;
    if (o->node_id && ck__node_id_check(o->node_id, err) < 0) {
        ck__saver_free(sv);
        return -EINVAL;
    }
    unsigned n = o->writers ? o->writers : 4;
    sv->th = calloc(n, sizeof *sv->th);
    if (!sv->th) {
        ck__saver_free(sv);
        return ck_err_set(err, -ENOMEM, "out of memory");
    }
    for (; sv->nth < n; sv->nth++) {
        int r = pthread_create(&sv->th[sv->nth], NULL, worker, sv);
        if (r) {
            ck__saver_free(sv);
            return ck_err_set(err, -r, "starting writer threads: %s", strerror(r));
        }
    }
    if (o->node_id) {
        int r = pthread_create(&sv->meet_th, NULL, ck__sv_meet_thread, sv);
        if (r) {
            ck__saver_free(sv);
            return ck_err_set(err, -r, "starting the meeting thread: %s", strerror(r));
        }
        sv->meet_running = true;
    }
    *out = sv;
    return 0;
}

unsigned ck__saver_active(ck__saver *sv)
{
    unsigned n = 0;
    pthread_mutex_lock(&sv->mu);
    for (sv_ckpt *c = sv->list; c; c = c->next)
        n += c->state != C_FAILED;
    pthread_mutex_unlock(&sv->mu);
    return n;
}

/* From here on the save completes without any client (the role says when it
 * collects). */
static bool committable(const sv_ckpt *c)
{
    return c->state == C_COMMITTING || c->state == C_SETTLING ||
           (c->state == C_COLLECTING && c->role->committable(c));
}

bool ck__saver_free(ck__saver *sv)
{
    if (!sv)
        return true;
    pthread_mutex_lock(&sv->mu);
    sv->closing = true;
    for (sv_ckpt *c = sv->list; c; c = c->next)
        if (!committable(c))
            ck__sv_fail(sv, c, -ECANCELED, "the save engine is shutting down before every rank "
                 "staged its part and the commit was asked for");
    double until = ck__sv_now() + sv->o.close_timeout;
    for (;;) {
        unsigned busy = 0;
        for (sv_ckpt *c = sv->list; c; c = c->next)
            busy += c->state != C_FAILED || !(c->fail_reported || c->stuck_reported);
        if (!busy)
            break;
        if (sv->o.close_timeout > 0 && ck__sv_now() >= until) {
            /* Writes that never return: their threads, and what they use, stay. */
            ck__sv_log(sv, "%u save(s) still writing %.0f s after the engine began to close "
                  "(the storage under %s hangs?): the engine is left behind", busy,
                  sv->o.close_timeout, sv->root);
            /* The idle threads end (the heartbeat stops: peers see this engine gone);
             * the stuck ones keep the engine. */
            sv->stop = true;
            pthread_cond_broadcast(&sv->work);
            pthread_cond_broadcast(&sv->meet_cv);
            pthread_mutex_unlock(&sv->mu);
            return false;
        }
        if (sv->o.close_timeout > 0) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&sv->idle, &sv->mu, &ts);
        } else {
            pthread_cond_wait(&sv->idle, &sv->mu);
        }
    }
    sv->stop = true;
    pthread_cond_broadcast(&sv->work);
    pthread_cond_broadcast(&sv->meet_cv);
    bool stuck = false;
    for (sv_ckpt *c = sv->list; c; c = c->next)
        stuck |= c->stuck_reported && c->writes;
    pthread_mutex_unlock(&sv->mu);
    if (stuck) {
        ck__sv_log(sv, "closing with writes that never returned: the engine is left behind");
        return false;
    }
    for (unsigned i = 0; i < sv->nth; i++)
        pthread_join(sv->th[i], NULL);
    if (sv->meet_running) {
        pthread_join(sv->meet_th, NULL);
        ck__beat_remove(sv->root, sv->o.node_id);
    }
    while (sv->graves) {
        grave *g = sv->graves;
        sv->graves = g->next;
        ck__meet_remove(sv->root, g->dir);
        free(g);
    }
    while (sv->list) {
        sv_ckpt *c = sv->list;
        sv->list = c->next;
        ck__sv_free_parts(c, true);
    }
    free(sv->th);
    pthread_cond_destroy(&sv->work);
    pthread_cond_destroy(&sv->idle);
    pthread_cond_destroy(&sv->meet_cv);
    pthread_mutex_destroy(&sv->mu);
    free(sv);
    return true;
}

/* What a later part must agree on with the first: the ranks that are threads of one
 * process share one declaration, the others' are compared. */
static int same_save(const sv_ckpt *c, const ck__begin *b, ck_err *err)
{
    uint32_t t = 0;
    const char *what = b->step != c->step ? "step"
                     : (b->nodes > 1 ? b->nodes : 1) != c->nodes ? "daemon count (nodes)"
                     : b->no_hash != c->no_hash ? "hashing" : NULL;
    if (what)
        return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu declares other %s than the "
                          "ranks before it", c->name, (unsigned long long)b->rank, what);
    if ((what = ck__decl_diff(b->decl, c->decl, &t)) && ck__decl_ntensors(b->decl) > t &&
        strcmp(what, "mesh") && strcmp(what, "tensor count"))
        return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu declares tensor %s with "
                          "other %s than the ranks before it", c->name,
                          (unsigned long long)b->rank, ck__decl_tensors(b->decl)[t].name, what);
    if (what)
        return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu declares other %s than the "
                          "ranks before it", c->name, (unsigned long long)b->rank, what);
    return 0;
}

/* The commit level b asks for, its default resolved. */
static uint8_t asked_level(const ck__saver *sv, const ck__begin *b)
{
    /* Without a local tier every save commits to the durable root: every level. */
    return b->level ? b->level : sv->o.local_root ? CK_LEVEL_LOCAL : CK_LEVEL_DURABLE;
}

/* A writer's landed bytes of one of c's files (without the engine's lock: c outlives
 * its writes, and its name and these fields never change). */
static void file_landed(void *arg, const char *file, uint64_t bytes)
{
    const sv_ckpt *c = arg;
    c->landed(c->landed_arg, c->name, file, bytes);
}

/* Called and returns with the lock held, which it lets go while planning: the first
 * part's declaration is sealed here (ckptd's planner thread, for a declaration it
 * decoded) unless it was already (a client's, planned once for all its saves). */
static int begin_save(ck__saver *sv, const ck__begin *b, sv_ckpt **out, ck_err *err)
{
    sv_ckpt *c = calloc(1, sizeof *c);
    if (!c)
        return ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory", b->name);
    snprintf(c->name, sizeof c->name, "%s", b->name);
    c->job = b->job;
    ck__job_hex(&b->job, c->job_hex);
    c->state = C_PLANNING;
    c->meet_lock = c->meet_rootfd = -1;
    c->step = b->step;
    c->world = ck__begin_world(b);
    c->decl = ck_decl_ref(b->decl);
    c->no_hash = b->no_hash;
    c->t0 = ck__sv_now();
    c->nodes = b->nodes > 1 ? b->nodes : 1;
    c->level = asked_level(sv, b);
    c->reached = sv->o.local_root ? 0 : CK_LEVEL_DURABLE;
    /* The engine that has rank 0 (or every rank) coordinates; the others look for it. */
    c->role = c->nodes == 1 || b->rank == 0 ? &ck__sv_coordinator : &ck__sv_finder;
    c->deadline = c->t0 + sv->o.part_timeout;
    c->next = sv->list;
    sv->list = c;
    pthread_mutex_unlock(&sv->mu);
    c->parts = calloc(c->world, sizeof *c->parts);
    int r = 0;
    if (!c->parts)
        r = ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory for %llu ranks",
                       b->name, (unsigned long long)c->world);
    /* The only fills a saver's save meets are the guarded copies of an embedded
     * client's synchronous part (ck__saver_stage_sources), made for several threads. */
    ck_save_opts so = { .engine = sv->o.engine, .hash_threads = sv->o.hash_threads,
                        .io_size = sv->o.io_size, .mem_limit = sv->o.mem_limit,
                        .no_hash = b->no_hash, .fill_threadsafe = true, .log = sv->o.log,
                        .cb_arg = sv->o.arg };
    if (r == 0)
        r = ck_save_begin(&c->s, ck__sv_data_root(sv), b->name, b->step, b->decl, &so, err);
    if (r == 0)
        ck__save_job(c->s, c->job_hex);
    /* A tiered save of several engines whose ranks wait for its replicas may be
     * replicated as it is written: the writers say what landed (decision 0204). One
     * that asks for local alone is not: its replication follows its commit, and takes
     * nothing from its write. */
    if (r == 0 && sv->o.landed && sv->o.local_root && c->nodes > 1 && sv->o.replicas > 1 &&
        c->level >= CK_LEVEL_REPLICATED) {
        c->landed = sv->o.landed;
        c->landed_arg = sv->o.arg;
        ck__save_on_landed(c->s, file_landed, c);
    }
    if (r == 0)
        r = c->role->open(sv, c, err);
    if (r < 0 && c->s) {
        c->role->abort(c->s);
        c->s = NULL;
    }
    pthread_mutex_lock(&sv->mu);
    pthread_cond_broadcast(&sv->idle);      /* joins of this name wait for the plan */
    if (r < 0) {
        ck__sv_unlink(sv, c);
        ck__sv_free_parts(c, true);
        return r;
    }
    c->state = C_COLLECTING;
    *out = c;
    return 0;
}

int ck__saver_join(ck__saver *sv, const ck__begin *d, uint64_t *image_bytes, ck_err *err)
{
    if (d->rank >= ck__begin_world(d))
        return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu outside a mesh of %llu ranks",
                          d->name, (unsigned long long)d->rank,
                          (unsigned long long)ck__begin_world(d));
    uint64_t blob_bytes;
    if (!ck__begin_blob_bytes(d, &blob_bytes))
        return ck_err_set(err, -EINVAL, "checkpoint %s: blob sizes overflow", d->name);
    if (d->nodes > 1 && !sv->o.node_id)
        return ck_err_set(err, -EINVAL, "checkpoint %s: declared for %u daemons, but this "
                          "engine serves one node only (run ckptd on each node)", d->name,
                          d->nodes);
    if (ck__sv_tier_check(sv, d, err) < 0)
        return err->code;
    if (!ck__job_set(&d->job))
        return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu declares no job id (all "
                          "zero; ck_job_id_new makes one)", d->name,
                          (unsigned long long)d->rank);
    pthread_mutex_lock(&sv->mu);
    int r = 0;
    sv_ckpt *c;
    /* A plan in the making, or a failed save still being taken apart (a retry must
     * find it reported): wait for either to settle. */
    while ((c = ck__sv_find(sv, d->name, &d->job)) &&
           (c->state == C_PLANNING || (c->state == C_FAILED && !c->fail_reported)))
        pthread_cond_wait(&sv->idle, &sv->mu);
    if (c && c->state == C_FAILED && c->fail_reported && c->parts[d->rank].state != P_NONE) {
        /* This rank was part of the failed attempt: it is a retry. */
        ck__sv_unlink(sv, c);
        ck__sv_free_parts(c, true);
        c = NULL;
    }
    if (c && c->state == C_FAILED)
        r = ck_err_set(err, c->fail_code, "checkpoint %s failed before rank %llu joined: %s",
                       c->name, (unsigned long long)d->rank, c->fail_msg);
    else if (c && c->state == C_COMMITTING)
        r = ck_err_set(err, -EALREADY, "checkpoint %s is being committed; rank %llu is late",
                       c->name, (unsigned long long)d->rank);
    else if (c && (r = same_save(c, d, err)) == 0 && c->parts[d->rank].state != P_NONE)
        r = ck_err_set(err, -EALREADY, "checkpoint %s: rank %llu joined already", c->name,
                       (unsigned long long)d->rank);
    else if (c && sv->o.local_root && asked_level(sv, d) != c->level)
        /* Into the tiers, where the level decides what the save waits for. */
        r = ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu asks for commit level %s, the "
                       "ranks before it on this daemon for %s: every rank of a save asks for "
                       "the same level", c->name, (unsigned long long)d->rank,
                       ck_level_name((ck_level)asked_level(sv, d)),
                       ck_level_name((ck_level)c->level));
    bool fresh = r == 0 && !c;
    if (fresh && (r = begin_save(sv, d, &c, err)) < 0)
        fresh = false;
    if (r == 0 && !fresh && d->rank == 0)
        r = c->role->rank0(sv, c, err);
    if (r < 0)
        goto out;
    part *p = &c->parts[d->rank];
    uint64_t bytes = ck__save_rank_bytes(c->s, d->rank);
    if (bytes > d->staging_size || blob_bytes > d->staging_size - bytes) {
        r = ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu: its staging area holds %llu "
                       "bytes, its part needs %llu (file image) + %llu (blobs)", c->name,
                       (unsigned long long)d->rank, (unsigned long long)d->staging_size,
                       (unsigned long long)bytes, (unsigned long long)blob_bytes);
        goto out;
    }
    if (d->nblobs && !(p->blobs = malloc(d->nblobs * sizeof *p->blobs))) {
        r = ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory", c->name);
        goto out;
    }
    if (d->nblobs)
        memcpy(p->blobs, d->blobs, d->nblobs * sizeof *p->blobs);
    p->nblobs = d->nblobs;
    p->image_bytes = bytes;
    p->state = P_JOINED;
    c->joined++;
    *image_bytes = bytes;
out:
    if (r < 0 && fresh) {
        /* Begun for this rank alone, which was refused: nobody else knows the save,
         * and left in the list it would count as in flight forever. */
        ck__sv_unlink(sv, c);
        c->role->abort(c->s);
        if (c->meet[0])
            ck__meet_remove(sv->root, c->meet);
        ck__sv_free_parts(c, true);
    }
    pthread_mutex_unlock(&sv->mu);
    return r;
}

/* A rank's part handed over: its image (staging, the blobs after it) or its sources
 * (src, with the blobs apart). */
static int stage_part(ck__saver *sv, const char *name, const ck_job_id *job, uint64_t rank,
                      const void *staging, const ck__shard_src *src, uint32_t nsrc,
                      const void *blobs, ck_err *err)
{
    pthread_mutex_lock(&sv->mu);
    int r = 0;
    sv_ckpt *c = ck__sv_find(sv, name, job);
    if (!c || c->state != C_COLLECTING || rank >= c->world || c->parts[rank].state != P_JOINED) {
        r = c && c->state == C_FAILED
            ? ck_err_set(err, c->fail_code, "checkpoint %s failed: %s", name, c->fail_msg)
            : ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu staged a part that was not "
                         "admitted", name, (unsigned long long)rank);
        goto out;
    }
    part *p = &c->parts[rank];
    const uint8_t *blob = staging ? (const uint8_t *)staging + p->image_bytes : blobs;
    uint64_t blob_len = 0;
    for (uint32_t i = 0; i < p->nblobs; i++)
        blob_len += p->blobs[i].len;
    r = c->role->blobs(c, p, blob, blob_len, err);
    p->staging = staging;
    p->src = src;
    p->nsrc = nsrc;
    /* No directory yet (the meeting is not found): ck__sv_resolve() writes it. */
    bool deferred = c->role->waits;
    p->deferred = deferred;
    if (r == 0 && !deferred)
        r = ck__sv_bind_part(sv, c, rank, err);
    if (r < 0) {
        char msg[CK_ERR_MSG_MAX + 64];
        snprintf(msg, sizeof msg, "rank %llu: %s", (unsigned long long)rank, ck_err_msg(err));
        ck__sv_fail(sv, c, r, msg);
        goto out;
    }
    p->state = P_STAGED;
    c->staged++;
    c->bytes_staged += p->image_bytes;
out:
    pthread_mutex_unlock(&sv->mu);
    return r;
}

int ck__saver_stage(ck__saver *sv, const char *name, const ck_job_id *job, uint64_t rank,
                    const void *staging, ck_err *err)
{
    return stage_part(sv, name, job, rank, staging, NULL, 0, NULL, err);
}

int ck__saver_stage_sources(ck__saver *sv, const char *name, const ck_job_id *job,
                            uint64_t rank, const ck__shard_src *src, uint32_t nsrc,
                            const void *blobs, ck_err *err)
{
    return stage_part(sv, name, job, rank, NULL, src, nsrc, blobs, err);
}

int ck__saver_commit(ck__saver *sv, const char *name, const ck_job_id *job, ck_err *err)
{
    pthread_mutex_lock(&sv->mu);
    int r = 0;
    sv_ckpt *c = ck__sv_find(sv, name, job);
    if (!c)
        r = ck_err_set(err, -ENOENT, "checkpoint %s: commit asked for a save that is not in "
                       "flight", name);
    else if (c->state == C_FAILED)
        r = ck_err_set(err, c->fail_code, "checkpoint %s failed: %s", name, c->fail_msg);
    else {
        c->commit_requested = true;
        c->role->commit(sv, c);
    }
    pthread_mutex_unlock(&sv->mu);
    return r;
}

void ck__saver_abandon(ck__saver *sv, const char *name, const ck_job_id *job,
                       const char *why)
{
    pthread_mutex_lock(&sv->mu);
    sv_ckpt *c = ck__sv_find(sv, name, job);
    if (c)
        ck__sv_fail(sv, c, -ECANCELED, why);
    pthread_mutex_unlock(&sv->mu);
}

unsigned ck__saver_abandon_waiting(ck__saver *sv, const char *why)
{
    unsigned n = 0;
    pthread_mutex_lock(&sv->mu);
    for (sv_ckpt *c = sv->list; c; c = c->next)
        if (c->state == C_COLLECTING && !committable(c)) {
            ck__sv_fail(sv, c, -ECANCELED, why);
            n++;
        }
    pthread_mutex_unlock(&sv->mu);
    return n;
}

void ck__saver_forget(ck__saver *sv, const char *name, const ck_job_id *job)
{
    pthread_mutex_lock(&sv->mu);
    sv_ckpt *c = ck__sv_find(sv, name, job);
    if (c && c->state == C_FAILED && c->fail_reported && !c->writes) {
        ck__sv_unlink(sv, c);
        ck__sv_free_parts(c, true);
    }
    pthread_mutex_unlock(&sv->mu);
}

bool ck__saver_committable(ck__saver *sv, const char *name, const ck_job_id *job)
{
    pthread_mutex_lock(&sv->mu);
    sv_ckpt *c = ck__sv_find(sv, name, job);
    bool ok = c && committable(c);
    pthread_mutex_unlock(&sv->mu);
    return ok;
}

int ck__saver_status(ck__saver *sv, ck__proto_ckpt **out, uint32_t *n)
{
    pthread_mutex_lock(&sv->mu);
    uint32_t k = 0;
    for (sv_ckpt *c = sv->list; c; c = c->next)
        k += c->state != C_FAILED;
    ck__proto_ckpt *rows = calloc(k ? k : 1, sizeof *rows);
    if (!rows) {
        pthread_mutex_unlock(&sv->mu);
        return -ENOMEM;
    }
    double t = ck__sv_now();
    k = 0;
    for (sv_ckpt *c = sv->list; c; c = c->next) {
        if (c->state == C_FAILED)
            continue;
        ck__proto_ckpt *row = &rows[k++];
        snprintf(row->name, sizeof row->name, "%s", c->name);
        row->job = c->job;
        row->world = c->world;
        row->joined = c->joined;
        row->staged = c->staged;
        row->durable = c->durable;
        row->bytes_staged = c->bytes_staged;
        row->bytes_written = c->bytes_written;
        row->bytes_per_s = t > c->t0 ? (uint64_t)((double)c->bytes_written / (t - c->t0)) : 0;
        row->commit_requested = c->commit_requested;
        row->state = (uint8_t)c->state;
    }
    pthread_mutex_unlock(&sv->mu);
    *out = rows;
    *n = k;
    return 0;
}
