/* client_embedded.c - the client's embedded transport: the save engine (the saver
 * ckptd also runs) on threads of this process.
 *
 * Ranks that are threads of one process share one engine, the hub: their saves are
 * parts of the same checkpoints, so they must reach the same saver. The saver
 * reports from its worker threads; its events are matched against every save of
 * every client of the hub, under the hub's lock, and wake the threads waiting on it.
 *
 * The ranks of a job that are processes of their own (opts.nodes > 1) each have such
 * an engine, and the engines meet through the root as the daemons of several nodes do
 * (async/saver.h): no collective of the caller's and no second mechanism. The engine
 * then has an id ("HOST.pPID.NONCE": unique among live engines, and it says where to
 * look when one dies), holds ROOT/.ckptd.ID.lock and beats ROOT/.ckptd.ID.beat while it
 * lives; both go when the client closes, and recovery removes those of a process that
 * died (its lock is free).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "async/client_int.h"
#include "async/saver.h"
#include "format/owner.h"
#include "save/meet.h"

struct ck__client_hub {
    ck__saver *sv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned refs;
    ck_client_save *saves;      /* every save in flight of every client, for events */
    void (*log)(void *arg, const char *msg);
    void *log_arg;
    /* Shared with the engines of other processes (nodes > 1): */
    char id[CK_NODE_ID_MAX];
    int lock_fd;
    /* Guards of synchronous parts given up (ck__client_direct_forsake): the engine may
     * still read through them until it is freed. */
    ck__client_direct *forsaken;
};

/* The saver passes one argument to its log and its events, the hub: the user's log
 * gets the user's own. */
static void hub_log(void *arg, const char *msg)
{
    ck__client_hub *h = arg;
    h->log(h->log_arg, msg);
}

/* sv failed while the engine may still write from its staging: the area is lost
 * (never reused, never unmapped) unless its part was durable already. With the hub's
 * lock held. */
static void give_up_part(ck_client_save *sv, int code, const char *msg)
{
    ck_client *cl = sv->cl;
    if (sv->state < CK_CLIENT_DURABLE && sv->slot >= 0 && cl->slots[sv->slot].user == sv)
        cl->slots[sv->slot].lost = true;
    if (sv->state < CK_CLIENT_DURABLE)
        ck__client_direct_forsake(sv, &cl->hub->forsaken);
    ck__client_set_state(sv, CK_CLIENT_FAILED, code, msg);
}

static void hub_event(void *arg, const ck__saver_event *ev)
{
    ck__client_hub *h = arg;
    pthread_mutex_lock(&h->mu);
    for (ck_client_save *sv = h->saves; sv; sv = sv->next) {
        if (strcmp(sv->b.name, ev->name) != 0 || !ck__job_same(&sv->b.job, ev->job))
            continue;
        if (ev->kind == CK_SAVER_DURABLE && sv->b.rank == ev->rank)
            ck__client_set_state(sv, CK_CLIENT_DURABLE, 0, NULL);
        else if (ev->kind == CK_SAVER_COMMITTED)
            ck__client_committed(sv, ev->level, ev->msg);
        else if (ev->kind == CK_SAVER_FAILED)
            ck__client_set_state(sv, CK_CLIENT_FAILED, ev->code, ev->msg);
        else if (ev->kind == CK_SAVER_STUCK)
            give_up_part(sv, ev->code, ev->msg);
    }
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

static void emb_lock(ck_client *cl)
{
    pthread_mutex_lock(&cl->hub->mu);
}

static void emb_unlock(ck_client *cl)
{
    pthread_mutex_unlock(&cl->hub->mu);
}

/* The wait's limit passed (ck__client_wait_for): the engine's writes of some part
 * of this client never returned (storage that hangs), since the engines' own bounds
 * (the part timeout, a dead peer) end a save with its reason well before. Every save
 * of this client still in flight fails; the staging of a part not yet durable is lost
 * (kept mapped and never reused), since its write may still resume. With the hub's
 * lock held. */
static void emb_give_up(ck_client *cl)
{
    char msg[CK_ERR_MSG_MAX];
    for (ck_client_save *sv = cl->hub->saves; sv; sv = sv->next) {
        if (sv->cl != cl || sv->state == CK_CLIENT_BUILDING ||
            sv->state == CK_CLIENT_COMMITTED || sv->state == CK_CLIENT_FAILED)
            continue;
        bool written = sv->state >= CK_CLIENT_DURABLE;
        snprintf(msg, sizeof msg, "checkpoint %s, rank %llu: %s within %.0f s (the storage "
                 "under %s hangs?)%s", sv->b.name, (unsigned long long)sv->b.rank,
                 written ? "not committed" : "this rank's part was not written",
                 cl->wait_limit, cl->root, written ? "; it may still commit" :
                 sv->direct ? "; its sources are never read again" :
                 "; its staging is left to the engine's stuck write");
        give_up_part(sv, -ETIMEDOUT, msg);
    }
}

static int emb_await(ck_client *cl)
{
    double left = cl->wait_until - ck__conn_now();
    if (left <= 0) {
        emb_give_up(cl);
        return -ETIMEDOUT;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double at = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + left;
    ts.tv_sec = (time_t)at;
    ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
    pthread_cond_timedwait(&cl->hub->cv, &cl->hub->mu, &ts);
    return 0;
}

/* Events arrive by themselves, from the saver's threads. */
static void emb_poll(ck_client *cl)
{
    (void)cl;
}

static ck_client_save **emb_saves(ck_client *cl)
{
    return &cl->hub->saves;
}

static int emb_join(ck_client_save *sv, const ck__client_slot *s, ck_err *err)
{
    (void)s;
    int r = ck__saver_join(sv->cl->hub->sv, &sv->b, &sv->image_bytes, err);
    sv->admitted = r == 0;
    return r;
}

static int emb_stage(ck_client_save *sv, const ck__client_slot *s, ck_err *err)
{
    return ck__saver_stage(sv->cl->hub->sv, sv->b.name, &sv->b.job, sv->b.rank, s->map, err);
}

static int emb_stage_sources(ck_client_save *sv, const void *blobs, ck_err *err)
{
    return ck__saver_stage_sources(sv->cl->hub->sv, sv->b.name, &sv->b.job, sv->b.rank,
                                   sv->direct->src, sv->direct->n, blobs, err);
}

static int emb_commit(ck_client_save *sv, ck_err *err)
{
    return ck__saver_commit(sv->cl->hub->sv, sv->b.name, &sv->b.job, err);
}

static void emb_close(ck_client *cl)
{
    ck__client_hub *h = cl->hub;
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    bool last = --h->refs == 0;
    pthread_mutex_unlock(&h->mu);
    /* The saver's last events take the hub's lock: free the saver first. A saver left
     * behind (writes that never return) may still send events: the hub stays too. */
    if (last && ck__saver_free(h->sv)) {
        while (h->forsaken) {
            ck__client_direct *d = h->forsaken;
            h->forsaken = d->next;
            ck__client_direct_free(d);
        }
        ck__engine_unlock(cl->root, h->id, &h->lock_fd);
        pthread_cond_destroy(&h->cv);
        pthread_mutex_destroy(&h->mu);
        free(h);
    }
    cl->hub = NULL;
}

/* This engine's id, HOST.pPID.NONCE with the host name made an id ([A-Za-z0-9._-], at
 * most 63 bytes), and its lock. */
static int engine_id(ck__client_hub *h, const char *root, ck_err *err)
{
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    for (char *c = host; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
              (*c >= '0' && *c <= '9') || *c == '-' || *c == '_'))
            *c = '_';       /* a dot would make the pid look like part of the host */
    /* Several engines of one process may share a root (two checkpointers): a nonce
     * keeps their ids apart. */
    uint32_t nonce = 0;
    if (getrandom(&nonce, sizeof nonce, 0) != sizeof nonce)
        nonce = (uint32_t)time(NULL) ^ (uint32_t)(uintptr_t)h;
    snprintf(h->id, sizeof h->id, "%.40s.p%ld.%08x", host[0] ? host : "host", (long)getpid(),
             nonce);
    char what[PATH_MAX + 96];
    snprintf(what, sizeof what, "root %s: another engine of process %s is open", root, h->id);
    return ck__engine_lock(root, h->id, what, &h->lock_fd, err);
}

static const ck__client_transport embedded = {
    .connected = false,
    .lock = emb_lock,
    .unlock = emb_unlock,
    .await = emb_await,
    .poll = emb_poll,
    .saves = emb_saves,
    .join = emb_join,
    .stage = emb_stage,
    .stage_sources = emb_stage_sources,
    .commit = emb_commit,
    .close = emb_close,
};

int ck__client_open_embedded(ck_client *cl, const char *root, const ck_client_opts *o,
                             ck_err *err)
{
    if (o->peer) {
        if (o->peer->t != &embedded)
            return ck_err_set(err, -EINVAL, "the peer client is not embedded");
        cl->t = &embedded;
        cl->hub = o->peer->hub;
        cl->timeout = o->peer->timeout;
        cl->commit_timeout = o->peer->commit_timeout;
        snprintf(cl->root, sizeof cl->root, "%s", o->peer->root);
        pthread_mutex_lock(&cl->hub->mu);
        cl->hub->refs++;
        pthread_mutex_unlock(&cl->hub->mu);
        return 0;
    }
    ck__client_hub *h = calloc(1, sizeof *h);
    if (!h)
        return ck_err_set(err, -ENOMEM, "out of memory");
    pthread_mutex_init(&h->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);   /* the clock of the waits' limits */
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    h->refs = 1;
    h->log = o->log;
    h->log_arg = o->log_arg;
    h->lock_fd = -1;
    cl->t = &embedded;
    cl->hub = h;
    snprintf(cl->root, sizeof cl->root, "%s", root);
    unsigned part_timeout = o->part_timeout ? o->part_timeout : 600;
    unsigned dead_after = o->dead_after ? o->dead_after : 10;
    /* The client's waits end after the engines' bounds, which fail a save with its reason
     * first: see emb_give_up. */
    cl->timeout = cl->commit_timeout = part_timeout + 2.0 * dead_after + 5;
    ck__saver_opts so = { .root = root, .engine = o->engine, .writers = o->writers,
                         .hash_threads = o->hash_threads, .log = o->log ? hub_log : NULL,
                         .event = hub_event, .arg = h, .close_timeout = cl->commit_timeout,
                         .report_stuck = true };
    if (cl->nodes > 1) {
        int r = engine_id(h, root, err);
        if (r < 0)
            return r;
        so.node_id = h->id;
        if (getrandom(&so.instance, sizeof so.instance, 0) != sizeof so.instance)
            so.instance = (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL);
        so.part_timeout = part_timeout;
        so.dead_after = dead_after;
    }
    return ck__saver_new(&so, &h->sv, err);
}
