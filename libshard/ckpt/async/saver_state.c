/* saver_state.c - one save's state machine in the engine (see async/saver_int.h): its
 * failure and how it is told, its jobs, its events. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "async/saver_int.h"
#include "format/owner.h"
#include "model/say.h"

double ck__sv_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void ck__sv_log(ck__saver *sv, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ck__vsay(sv->o.log, sv->o.arg, fmt, ap);
    va_end(ap);
}

void ck__sv_emit(ck__saver *sv, ck__saver_ev_kind kind, const sv_ckpt *c, uint64_t rank)
{
    if (!sv->o.event)
        return;
    bool level = kind == CK_SAVER_COMMITTED || kind == CK_SAVER_SETTLED;
    ck__saver_event ev = { .kind = kind, .name = c->name, .job = &c->job, .rank = rank,
                           .code = c->fail_code, .msg = level ? c->note : c->fail_msg,
                           .level = c->reached };
    if (kind == CK_SAVER_SETTLED || kind == CK_SAVER_DRAIN) {
        ev.nodes = (const char (*)[CK_NODE_ID_MAX])c->order;
        ev.n_nodes = c->norder;
    }
    sv->o.event(sv->o.arg, &ev);
}

peer *ck__sv_peer(sv_ckpt *c, const char *id)
{
    for (unsigned i = 0; i < c->npeers; i++)
        if (!strcmp(c->peers[i].id, id))
            return &c->peers[i];
    return NULL;
}

sv_ckpt *ck__sv_find(ck__saver *sv, const char *name, const ck_job_id *job)
{
    for (sv_ckpt *c = sv->list; c; c = c->next)
        if (!strcmp(c->name, name) && ck__job_same(&c->job, job))
            return c;
    return NULL;
}

bool ck__sv_listed(const ck__saver *sv, const sv_ckpt *c)
{
    for (const sv_ckpt *p = sv->list; p; p = p->next)
        if (p == c)
            return true;
    return false;
}

void ck__sv_tier_unlock(sv_ckpt *c)
{
    char rel[PATH_MAX];
    if (c->meet_lock >= 0 && ck__save_lock_rel(c->name, rel, NULL) == 0)
        ck__lock_drop(c->meet_rootfd, rel, &c->meet_lock);
    if (c->meet_rootfd >= 0)
        close(c->meet_rootfd);
    c->meet_rootfd = -1;
}

void ck__sv_free_parts(sv_ckpt *c, bool all)
{
    for (uint64_t r = 0; c->parts && r < c->world; r++) {
        free(c->parts[r].blobs);
        free(c->parts[r].blob_bytes);
        free(c->parts[r].rec);
        c->parts[r].blobs = NULL;
        c->parts[r].blob_bytes = NULL;
        c->parts[r].rec = NULL;
    }
    if (all) {
        ck__sv_tier_unlock(c);
        free(c->peers);
        free(c->stale);
        free(c->tier);
        free(c->clique);
        free(c->order);
        free(c->parts);
        ck_decl_free(c->decl);
        free(c);
    }
}

void ck__sv_unlink(ck__saver *sv, sv_ckpt *c)
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
        ck__sv_unlink(sv, oldest);
        ck__sv_free_parts(oldest, true);
    }
}

/* Once nothing of a failed save runs any more: remove its files (on a worker: a plan
 * of a million ranks takes seconds to take apart, and the caller may be ckptd's event
 * loop), then tell everyone. */
void ck__sv_finish_failed(ck__saver *sv, sv_ckpt *c)
{
    if (c->writes || c->fail_reported)
        return;
    if (c->s && ck__sv_push(sv, c, 0, JOB_ABORT) == 0) {
        c->writes++;
        return;
    }
    c->fail_reported = true;
    c->role->abort(c->s);
    c->s = NULL;
    ck__sv_free_parts(c, false);
    ck__sv_log(sv, "checkpoint %s failed: %s", c->name, c->fail_msg);
    ck__sv_emit(sv, CK_SAVER_FAILED, c, 0);
    pthread_cond_broadcast(&sv->idle);
    prune_failed(sv, c);
}

void ck__sv_fail(ck__saver *sv, sv_ckpt *c, int code, const char *msg)
{
    if (c->state != C_COLLECTING)
        return;
    c->state = C_FAILED;
    c->failed_at = ck__sv_now();
    c->fail_code = code;
    snprintf(c->fail_msg, sizeof c->fail_msg, "%s", msg);
    c->role->failed(sv, c);
    ck__sv_finish_failed(sv, c);
}

int ck__sv_push(ck__saver *sv, sv_ckpt *c, uint64_t rank, int kind)
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

/* The parts staged before the save's directory was known are bound and written now. */
int ck__sv_resolve(ck__saver *sv, sv_ckpt *c, ck_err *err)
{
    for (uint64_t r = 0; r < c->world; r++) {
        part *p = &c->parts[r];
        if (p->state != P_STAGED || !p->deferred)
            continue;
        int e = ck__sv_bind_part(sv, c, r, err);
        if (e < 0)
            return e;
        p->deferred = false;
    }
    return 0;
}

int ck__sv_bind_part(ck__saver *sv, sv_ckpt *c, uint64_t rank, ck_err *err)
{
    part *p = &c->parts[rank];
    int r = p->src ? ck__save_rank_sources(c->s, rank, p->src, p->nsrc, err)
                   : ck__save_rank_image(c->s, rank, p->staging, err);
    if (r == 0 && (r = ck__sv_push(sv, c, rank, JOB_WRITE)) < 0)
        ck_err_set(err, r, "checkpoint %s: out of memory", c->name);
    if (r < 0)
        return r;
    p->staging = NULL;
    p->src = NULL;
    c->writes++;
    return 0;
}
