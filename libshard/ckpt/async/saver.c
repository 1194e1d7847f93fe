/* saver.c - the async save engine (see async/saver.h). */
#include "async/saver.h"

#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ck/save.h"
#include "model/say.h"

/* A failed save's name is remembered so that ranks arriving after the failure get
 * the error instead of starting a save that can never complete; the oldest go first,
 * and go sooner when the ranks they remember (a part record each) add up. */
#define FAILED_KEPT 64
#define FAILED_KEPT_RANKS (1u << 21)

enum { P_NONE, P_JOINED, P_STAGED, P_DURABLE };
/* PLANNING: the first rank's join computes the plan without the saver's lock, so
 * that a large plan stalls neither the writers nor STATUS; joins of that name wait. */
enum { C_COLLECTING, C_COMMITTING, C_FAILED, C_PLANNING };

typedef struct part {
    uint8_t state;
    uint32_t nblobs;
    ck__decl_blob *blobs;
    uint64_t image_bytes;
} part;

typedef struct sv_ckpt {
    struct sv_ckpt *next;
    char name[CK_NAME_MAX];
    int state;
    uint64_t step, world;
    ck_mesh mesh;
    bool no_hash;
    uint32_t ntensors;
    ck__decl_tensor *tensors;
    ck_save *s;
    part *parts;
    uint64_t joined, staged, durable;
    bool commit_requested, fail_reported;
    unsigned writes;               /* write jobs queued or running */
    int fail_code;
    char fail_msg[CK_ERR_MSG_MAX];
    uint64_t bytes_staged, bytes_written;
    double t0;
} sv_ckpt;

enum { JOB_WRITE, JOB_COMMIT, JOB_ABORT };

typedef struct sv_job {
    struct sv_job *next;
    sv_ckpt *c;
    uint64_t rank;
    int kind;
} sv_job;

struct ck__saver {
    ck__saver_opts o;
    char root[PATH_MAX];
    pthread_mutex_t mu;
    pthread_cond_t work, idle;
    sv_job *head, *tail;
    bool stop;
    bool closing;                  /* ck__saver_free walks the list: no pruning */
    pthread_t *th;
    unsigned nth;
    sv_ckpt *list;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void logf_(ck__saver *sv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(ck__saver *sv, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ck__vsay(sv->o.log, sv->o.arg, fmt, ap);
    va_end(ap);
}

static void emit(ck__saver *sv, ck__saver_ev_kind kind, const sv_ckpt *c, uint64_t rank)
{
    if (!sv->o.event)
        return;
    ck__saver_event ev = { .kind = kind, .name = c->name, .rank = rank, .code = c->fail_code,
                          .msg = c->fail_msg };
    sv->o.event(sv->o.arg, &ev);
}

static sv_ckpt *find(ck__saver *sv, const char *name)
{
    for (sv_ckpt *c = sv->list; c; c = c->next)
        if (!strcmp(c->name, name))
            return c;
    return NULL;
}

static void ckpt_free_parts(sv_ckpt *c, bool all)
{
    for (uint64_t r = 0; c->parts && r < c->world; r++) {
        free(c->parts[r].blobs);
        c->parts[r].blobs = NULL;
    }
    if (all) {
        free(c->parts);
        for (uint32_t i = 0; c->tensors && i < c->ntensors; i++)
            ck__decl_tensor_free(&c->tensors[i]);
        free(c->tensors);
        free(c);
    }
}

static void unlink_ckpt(ck__saver *sv, sv_ckpt *c)
{
    for (sv_ckpt **pp = &sv->list; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    pthread_cond_broadcast(&sv->idle);
}

static void prune_failed(ck__saver *sv, const sv_ckpt *keep)
{
    if (sv->closing)
        return;
    for (;;) {
        unsigned n = 0;
        uint64_t ranks = 0;
        sv_ckpt *oldest = NULL;
        /* Only saves taken apart: a job of one still being aborted holds it. */
        for (sv_ckpt *c = sv->list; c; c = c->next)
            if (c->state == C_FAILED && c->fail_reported && !c->writes) {
                n++;
                ranks += c->world;
                if (c != keep)
                    oldest = c;         /* new saves are pushed at the front */
            }
        if (!oldest || (n <= FAILED_KEPT && ranks <= FAILED_KEPT_RANKS))
            break;
        unlink_ckpt(sv, oldest);
        ckpt_free_parts(oldest, true);
    }
}

static int push(ck__saver *sv, sv_ckpt *c, uint64_t rank, int kind);

/* Once nothing of a failed save runs any more: remove its files (on a worker: a plan
 * of a million ranks takes seconds to take apart, and the caller may be ckptd's event
 * loop), then tell everyone. */
static void finish_failed(ck__saver *sv, sv_ckpt *c)
{
    if (c->writes || c->fail_reported)
        return;
    if (c->s && push(sv, c, 0, JOB_ABORT) == 0) {
        c->writes++;
        return;
    }
    c->fail_reported = true;
    ck_save_abort(c->s);
    c->s = NULL;
    ckpt_free_parts(c, false);
    logf_(sv, "checkpoint %s failed: %s", c->name, c->fail_msg);
    emit(sv, CK_SAVER_FAILED, c, 0);
    pthread_cond_broadcast(&sv->idle);
    prune_failed(sv, c);
}

static void fail(ck__saver *sv, sv_ckpt *c, int code, const char *msg)
{
    if (c->state != C_COLLECTING)
        return;
    c->state = C_FAILED;
    c->fail_code = code;
    snprintf(c->fail_msg, sizeof c->fail_msg, "%s", msg);
    finish_failed(sv, c);
}

static int push(ck__saver *sv, sv_ckpt *c, uint64_t rank, int kind)
{
    sv_job *j = calloc(1, sizeof *j);
    if (!j)
        return -ENOMEM;
    *j = (sv_job){ .c = c, .rank = rank, .kind = kind };
    if (sv->tail)
        sv->tail->next = j;
    else
        sv->head = j;
    sv->tail = j;
    pthread_cond_signal(&sv->work);
    return 0;
}

static void maybe_commit(ck__saver *sv, sv_ckpt *c)
{
    if (c->state != C_COLLECTING || !c->commit_requested || c->durable != c->world)
        return;
    c->state = C_COMMITTING;
    if (push(sv, c, 0, JOB_COMMIT) < 0) {
        c->state = C_COLLECTING;
        fail(sv, c, -ENOMEM, "out of memory queueing the commit");
    }
}

static void run_write(ck__saver *sv, sv_ckpt *c, uint64_t rank)
{
    int r = 0;
    ck_err err = { 0 };
    if (c->state == C_COLLECTING) {
        pthread_mutex_unlock(&sv->mu);
        r = ck_save_write_rank(c->s, rank, &err);
        pthread_mutex_lock(&sv->mu);
    }
    c->writes--;
    if (r < 0 && c->state == C_COLLECTING) {
        char msg[CK_ERR_MSG_MAX + 64];
        snprintf(msg, sizeof msg, "rank %llu: %s", (unsigned long long)rank, ck_err_msg(&err));
        c->state = C_FAILED;
        c->fail_code = r;
        snprintf(c->fail_msg, sizeof c->fail_msg, "%s", msg);
    }
    if (c->state == C_FAILED) {
        finish_failed(sv, c);
        return;
    }
    c->parts[rank].state = P_DURABLE;
    c->durable++;
    c->bytes_written += c->parts[rank].image_bytes;
    emit(sv, CK_SAVER_DURABLE, c, rank);
    maybe_commit(sv, c);
}

static void run_commit(ck__saver *sv, sv_ckpt *c)
{
    ck_err err = { 0 };
    ck_save_stats st;
    pthread_mutex_unlock(&sv->mu);
    int r = ck_save_commit(c->s, &st, &err);
    pthread_mutex_lock(&sv->mu);
    c->s = NULL;    /* freed by the commit, whatever its result */
    if (r == 0) {
        logf_(sv, "checkpoint %s committed: %llu ranks, %llu bytes, %.3f s", c->name,
              (unsigned long long)c->world, (unsigned long long)st.file_bytes,
              now_s() - c->t0);
        emit(sv, CK_SAVER_COMMITTED, c, 0);
        unlink_ckpt(sv, c);
        ckpt_free_parts(c, true);
        return;
    }
    c->state = C_COLLECTING;
    fail(sv, c, r, ck_err_msg(&err));
}

static void run_abort(ck__saver *sv, sv_ckpt *c)
{
    ck_save *s = c->s;
    c->s = NULL;
    pthread_mutex_unlock(&sv->mu);
    ck_save_abort(s);
    pthread_mutex_lock(&sv->mu);
    c->writes--;
    finish_failed(sv, c);
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
        else
            run_write(sv, j->c, j->rank);
        free(j);
    }
    pthread_mutex_unlock(&sv->mu);
    return NULL;
}

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
    pthread_cond_init(&sv->idle, NULL);
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

static bool committable(const sv_ckpt *c)
{
    return c->state == C_COMMITTING ||
           (c->state == C_COLLECTING && c->commit_requested && c->staged == c->world);
}

void ck__saver_free(ck__saver *sv)
{
    if (!sv)
        return;
    pthread_mutex_lock(&sv->mu);
    sv->closing = true;
    for (sv_ckpt *c = sv->list; c; c = c->next)
        if (!committable(c))
            fail(sv, c, -ECANCELED, "the save engine is shutting down before every rank "
                 "staged its part and the commit was asked for");
    for (;;) {
        bool busy = false;
        for (sv_ckpt *c = sv->list; c; c = c->next)
            busy |= c->state != C_FAILED || !c->fail_reported;
        if (!busy)
            break;
        pthread_cond_wait(&sv->idle, &sv->mu);
    }
    sv->stop = true;
    pthread_cond_broadcast(&sv->work);
    pthread_mutex_unlock(&sv->mu);
    for (unsigned i = 0; i < sv->nth; i++)
        pthread_join(sv->th[i], NULL);
    while (sv->list) {
        sv_ckpt *c = sv->list;
        sv->list = c->next;
        ckpt_free_parts(c, true);
    }
    free(sv->th);
    pthread_cond_destroy(&sv->work);
    pthread_cond_destroy(&sv->idle);
    pthread_mutex_destroy(&sv->mu);
    free(sv);
}

/* What a later part must agree on with the first. */
static int same_save(const sv_ckpt *c, const ck__decl *d, ck_err *err)
{
    const char *what = d->step != c->step ? "step"
                     : !ck_mesh_equal(&d->mesh, &c->mesh) ? "mesh"
                     : d->no_hash != c->no_hash ? "hashing"
                     : d->ntensors != c->ntensors ? "tensor count" : NULL;
    if (what)
        return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu declares other %s than the "
                          "ranks before it", c->name, (unsigned long long)d->rank, what);
    for (uint32_t i = 0; i < c->ntensors; i++) {
        const char *diff = ck__decl_tensor_diff(&d->tensors[i], &c->tensors[i], c->mesh.ndim);
        if (diff)
            return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu declares tensor %s with "
                              "other %s than the ranks before it", c->name,
                              (unsigned long long)d->rank, d->tensors[i].name, diff);
    }
    return 0;
}

/* Called and returns with the lock held, which it lets go while planning. */
static int begin_save(ck__saver *sv, const ck__decl *d, sv_ckpt **out, ck_err *err)
{
    sv_ckpt *c = calloc(1, sizeof *c);
    if (!c)
        return ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory", d->name);
    snprintf(c->name, sizeof c->name, "%s", d->name);
    c->state = C_PLANNING;
    c->step = d->step;
    c->world = d->world;
    c->mesh = d->mesh;
    c->no_hash = d->no_hash;
    c->ntensors = d->ntensors;
    c->t0 = now_s();
    c->next = sv->list;
    sv->list = c;
    pthread_mutex_unlock(&sv->mu);
    c->tensors = calloc(d->ntensors ? d->ntensors : 1, sizeof *c->tensors);
    c->parts = calloc(d->world, sizeof *c->parts);
    int r = 0;
    if (!c->tensors || !c->parts)
        r = ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory for %llu ranks",
                       d->name, (unsigned long long)d->world);
    for (uint32_t i = 0; r == 0 && i < d->ntensors; i++)
        if (ck__decl_tensor_copy(&c->tensors[i], &d->tensors[i]) < 0)
            r = ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory", d->name);
    ck_save_opts so = { .engine = sv->o.engine, .hash_threads = sv->o.hash_threads,
                        .io_size = sv->o.io_size, .mem_limit = sv->o.mem_limit,
                        .no_hash = d->no_hash, .log = sv->o.log,
                        .cb_arg = sv->o.arg };
    if (r == 0)
        r = ck_save_begin(&c->s, sv->root, d->name, d->step, &d->mesh, &so, err);
    for (uint32_t i = 0; r == 0 && i < d->ntensors; i++) {
        const ck__decl_tensor *t = &d->tensors[i];
        r = t->pl[0].kind == CK_BOXES
          ? ck_save_tensor_boxes(c->s, t->name, t->dtype, t->ndim, t->shape, t->nboxes,
                                 t->boxes, t->writers, err)
          : ck_save_tensor(c->s, t->name, t->dtype, t->ndim, t->shape, t->pl, err);
    }
    if (r == 0)
        r = ck_save_prepare(c->s, err);
    if (r < 0) {
        ck_save_abort(c->s);
        c->s = NULL;
    }
    pthread_mutex_lock(&sv->mu);
    pthread_cond_broadcast(&sv->idle);      /* joins of this name wait for the plan */
    if (r < 0) {
        unlink_ckpt(sv, c);
        ckpt_free_parts(c, true);
        return r;
    }
    c->state = C_COLLECTING;
    *out = c;
    return 0;
}

int ck__saver_join(ck__saver *sv, const ck__decl *d, uint64_t *image_bytes, ck_err *err)
{
    if (d->world != ck_mesh_world(&d->mesh) || d->rank >= d->world)
        return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu of world %llu on a mesh of "
                          "%llu ranks", d->name, (unsigned long long)d->rank,
                          (unsigned long long)d->world,
                          (unsigned long long)ck_mesh_world(&d->mesh));
    uint64_t blob_bytes;
    if (!ck__decl_blob_bytes(d, &blob_bytes))
        return ck_err_set(err, -EINVAL, "checkpoint %s: blob sizes overflow", d->name);
    pthread_mutex_lock(&sv->mu);
    int r = 0;
    sv_ckpt *c;
    /* A plan in the making, or a failed save still being taken apart (a retry must
     * find it reported): wait for either to settle. */
    while ((c = find(sv, d->name)) &&
           (c->state == C_PLANNING || (c->state == C_FAILED && !c->fail_reported)))
        pthread_cond_wait(&sv->idle, &sv->mu);
    if (c && c->state == C_FAILED && c->fail_reported && c->parts[d->rank].state != P_NONE) {
        /* This rank was part of the failed attempt: it is a retry. */
        unlink_ckpt(sv, c);
        ckpt_free_parts(c, true);
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
    bool fresh = r == 0 && !c;
    if (fresh && (r = begin_save(sv, d, &c, err)) < 0)
        fresh = false;
    if (r < 0)
        goto out;
    part *p = &c->parts[d->rank];
    uint64_t bytes = ck_save_rank_bytes(c->s, d->rank);
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
        unlink_ckpt(sv, c);
        ck_save_abort(c->s);
        ckpt_free_parts(c, true);
    }
    pthread_mutex_unlock(&sv->mu);
    return r;
}

int ck__saver_stage(ck__saver *sv, const char *name, uint64_t rank, const void *staging,
                   ck_err *err)
{
    pthread_mutex_lock(&sv->mu);
    int r = 0;
    sv_ckpt *c = find(sv, name);
    if (!c || c->state != C_COLLECTING || rank >= c->world || c->parts[rank].state != P_JOINED) {
        r = c && c->state == C_FAILED
            ? ck_err_set(err, c->fail_code, "checkpoint %s failed: %s", name, c->fail_msg)
            : ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu staged a part that was not "
                         "admitted", name, (unsigned long long)rank);
        goto out;
    }
    part *p = &c->parts[rank];
    const uint8_t *blob = (const uint8_t *)staging + p->image_bytes;
    for (uint32_t i = 0; i < p->nblobs && r == 0; i++) {
        r = ck_save_blob(c->s, p->blobs[i].name, blob, p->blobs[i].len, err);
        blob += p->blobs[i].len;
    }
    if (r == 0)
        r = ck_save_rank_image(c->s, rank, staging, err);
    if (r == 0 && (r = push(sv, c, rank, JOB_WRITE)) < 0)
        ck_err_set(err, r, "checkpoint %s: out of memory", name);
    if (r < 0) {
        char msg[CK_ERR_MSG_MAX + 64];
        snprintf(msg, sizeof msg, "rank %llu: %s", (unsigned long long)rank, ck_err_msg(err));
        fail(sv, c, r, msg);
        goto out;
    }
    c->writes++;
    p->state = P_STAGED;
    c->staged++;
    c->bytes_staged += p->image_bytes;
out:
    pthread_mutex_unlock(&sv->mu);
    return r;
}

int ck__saver_commit(ck__saver *sv, const char *name, ck_err *err)
{
    pthread_mutex_lock(&sv->mu);
    int r = 0;
    sv_ckpt *c = find(sv, name);
    if (!c)
        r = ck_err_set(err, -ENOENT, "checkpoint %s: commit asked for a save that is not in "
                       "flight", name);
    else if (c->state == C_FAILED)
        r = ck_err_set(err, c->fail_code, "checkpoint %s failed: %s", name, c->fail_msg);
    else {
        c->commit_requested = true;
        maybe_commit(sv, c);
    }
    pthread_mutex_unlock(&sv->mu);
    return r;
}

void ck__saver_abandon(ck__saver *sv, const char *name, const char *why)
{
    pthread_mutex_lock(&sv->mu);
    sv_ckpt *c = find(sv, name);
    if (c)
        fail(sv, c, -ECANCELED, why);
    pthread_mutex_unlock(&sv->mu);
}

unsigned ck__saver_abandon_waiting(ck__saver *sv, const char *why)
{
    unsigned n = 0;
    pthread_mutex_lock(&sv->mu);
    for (sv_ckpt *c = sv->list; c; c = c->next)
        if (c->state == C_COLLECTING && !committable(c)) {
            fail(sv, c, -ECANCELED, why);
            n++;
        }
    pthread_mutex_unlock(&sv->mu);
    return n;
}

void ck__saver_forget(ck__saver *sv, const char *name)
{
    pthread_mutex_lock(&sv->mu);
    sv_ckpt *c = find(sv, name);
    if (c && c->state == C_FAILED && c->fail_reported && !c->writes) {
        unlink_ckpt(sv, c);
        ckpt_free_parts(c, true);
    }
    pthread_mutex_unlock(&sv->mu);
}

bool ck__saver_committable(ck__saver *sv, const char *name)
{
    pthread_mutex_lock(&sv->mu);
    sv_ckpt *c = find(sv, name);
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
    double t = now_s();
    k = 0;
    for (sv_ckpt *c = sv->list; c; c = c->next) {
        if (c->state == C_FAILED)
            continue;
        ck__proto_ckpt *row = &rows[k++];
        snprintf(row->name, sizeof row->name, "%s", c->name);
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
