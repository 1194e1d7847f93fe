/* saver.c - the async save engine (see async/saver.h). */
#include "async/saver.h"

#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sys/stat.h>

#include "ck/catalog.h"
#include "ck/save.h"
#include "model/say.h"
#include "save/meet.h"
#include "save/part.h"
#include "save/save_int.h"

/* A failed save's name is remembered so that ranks arriving after the failure get
 * the error instead of starting a save that can never complete; the oldest go first,
 * and go sooner when the ranks they remember (a part record each) add up. */
#define FAILED_KEPT 64
#define FAILED_KEPT_RANKS (1u << 21)

/* P_REMOTE: written by another daemon, its part record adopted (the coordinator). */
enum { P_NONE, P_JOINED, P_STAGED, P_DURABLE, P_REMOTE };
/* A save of one daemon (ALONE), or shared by several: this daemon coordinates, is a
 * member, or does not know yet (no rank 0 here, no meeting found). */
enum { R_ALONE, R_UNKNOWN, R_COORD, R_MEMBER };
/* PLANNING: the first rank's join computes the plan without the saver's lock, so
 * that a large plan stalls neither the writers nor STATUS; joins of that name wait. */
enum { C_COLLECTING, C_COMMITTING, C_FAILED, C_PLANNING };

typedef struct part {
    uint8_t state;
    uint32_t nblobs;
    ck__decl_blob *blobs;
    uint64_t image_bytes;
    /* Shared saves, not coordinating: */
    const void *staging;           /* staged before the meeting was found (deferred) */
    bool deferred;
    uint8_t *blob_bytes;           /* a copy: the coordinator's manifest holds blobs */
    void *rec;                     /* the part record, once durable, until recorded */
    size_t rec_len;
} part;

/* Another daemon of a shared save, watched through its heartbeat. */
typedef struct peer {
    char id[CK_NODE_ID_MAX];
    uint64_t instance, counter;
    uint64_t rank;                 /* the first rank it serves, from its join; or none */
    double changed;                /* CLOCK_MONOTONIC, this host's: when it last beat */
} peer;

/* A failed meeting the coordinator removes once the others had time to read why. */
typedef struct grave {
    struct grave *next;
    char dir[PATH_MAX];
    double when;
} grave;

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
    /* Shared by several daemons: */
    uint32_t nodes;
    int role;
    char token[CK_TOKEN_MAX];
    char meet[PATH_MAX];           /* the meeting's directory, once known */
    dev_t dev;                     /* member: the pending directory's identity, which */
    ino_t ino;                     /* the rename keeps: ROOT/NAME is it once committed */
    uint64_t remote;               /* coordinator: ranks adopted from part records */
    uint32_t seq;                  /* member: part files written */
    peer *peers;
    unsigned npeers;
    double deadline;               /* the part timeout */
    double next_watch;             /* when to read the peers' heartbeats next */
    bool heard;                    /* the failure came from the meeting: not announced */
    double failed_at;              /* C_FAILED: when */
    bool stuck_reported;           /* CK_SAVER_STUCK sent: its writes never returned */
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
    /* Shared saves: the meeting thread, its wake-up, the graves it tends. */
    pthread_t meet_th;
    bool meet_running;
    pthread_cond_t meet_cv;
    grave *graves;
    double beat_every;             /* seconds between heartbeats, and between watches */
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

static bool listed(const ck__saver *sv, const sv_ckpt *c)
{
    for (const sv_ckpt *p = sv->list; p; p = p->next)
        if (p == c)
            return true;
    return false;
}

static void ckpt_free_parts(sv_ckpt *c, bool all)
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
        free(c->peers);
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
static int resolve(ck__saver *sv, sv_ckpt *c, ck_err *err);
static int heard_failure(ck__saver *sv, sv_ckpt *c, ck_err *err);

/* The other daemons of a shared save hear of this daemon's failure through its
 * failed.ID record; the coordinator then removes the meeting after a grace period in
 * which they can read why (they poll every poll_ms). */
static void announce(ck__saver *sv, sv_ckpt *c)
{
    if (!c->meet[0])
        return;
    ck_err err = { 0 };
    if (!c->heard &&
        ck__meet_fail(sv->root, c->meet, sv->o.node_id, c->fail_code, c->fail_msg, &err) < 0)
        logf_(sv, "checkpoint %s: telling the other daemons of the failure: %s", c->name,
              ck_err_msg(&err));
    grave *g = c->role == R_COORD ? calloc(1, sizeof *g) : NULL;
    if (!g)
        return;
    snprintf(g->dir, sizeof g->dir, "%s", c->meet);
    g->when = now_s() + 2.0 + 4.0 * sv->o.poll_ms / 1000.0;
    g->next = sv->graves;
    sv->graves = g;
}

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
    if (c->role == R_COORD)
        ck__save_discard(c->s);
    else
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
    c->failed_at = now_s();
    c->fail_code = code;
    snprintf(c->fail_msg, sizeof c->fail_msg, "%s", msg);
    announce(sv, c);
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
    if (c->state != C_COLLECTING || !c->commit_requested || c->durable + c->remote != c->world ||
        (c->role != R_ALONE && c->role != R_COORD))
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
        /* A member's write fails when the coordinator gave the save up and removed its
         * directory: then its reason is the one to tell. */
        int why = r < 0 && c->role == R_MEMBER ? heard_failure(sv, c, &err) : 0;
        pthread_mutex_lock(&sv->mu);
        if (why) {
            r = why;
            c->heard = true;
        }
    }
    c->writes--;
    /* A member proves the rank durable to the coordinator with its part record, which
     * the meeting thread writes with the others ready by then. */
    part *p = &c->parts[rank];
    if (r == 0 && c->state == C_COLLECTING && c->role == R_MEMBER) {
        ck_err ok = { 0 };
        r = ck_save_part(c->s, rank, &ok, &p->rec, &p->rec_len, &err);
        pthread_cond_signal(&sv->meet_cv);
    }
    if (r < 0 && c->state == C_COLLECTING) {
        char msg[CK_ERR_MSG_MAX + 64];
        if (c->heard)
            snprintf(msg, sizeof msg, "checkpoint %s: %s", c->name, ck_err_msg(&err));
        else
            snprintf(msg, sizeof msg, "rank %llu: %s", (unsigned long long)rank, ck_err_msg(&err));
        c->state = C_FAILED;
        c->fail_code = r;
        snprintf(c->fail_msg, sizeof c->fail_msg, "%s", msg);
        announce(sv, c);
    }
    if (c->state == C_FAILED) {
        finish_failed(sv, c);
        return;
    }
    p->state = P_DURABLE;
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
        /* The members know the commit by ROOT/NAME, not by the meeting. */
        if (c->meet[0])
            ck__meet_remove(sv->root, c->meet);
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
    bool coord = c->role == R_COORD;
    pthread_mutex_unlock(&sv->mu);
    if (coord)
        ck__save_discard(s);
    else
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

/* ---- saves shared by several daemons: the meeting thread ---- */

static peer *peer_add(sv_ckpt *c, const char *id, uint64_t instance, uint64_t rank)
{
    for (unsigned i = 0; i < c->npeers; i++)
        if (!strcmp(c->peers[i].id, id))
            return &c->peers[i];
    peer *n = realloc(c->peers, (c->npeers + 1) * sizeof *n);
    if (!n)
        return NULL;
    c->peers = n;
    peer *q = &n[c->npeers++];
    *q = (peer){ .instance = instance, .rank = rank, .changed = now_s() };
    snprintf(q->id, sizeof q->id, "%s", id);
    return q;
}

/* Why a watched daemon is dead, or NULL: its heartbeat names another instance (it
 * restarted and forgot the save), or its counter stood still for --dead-after seconds
 * measured on this host's monotonic clock (no clocks are compared across hosts). */
static const char *peer_dead(ck__saver *sv, peer *q, double t)
{
    uint64_t inst, cnt;
    int r = ck__beat_read(sv->root, q->id, &inst, &cnt);
    if (r == 0 && inst != q->instance)
        return "was restarted (another instance beats) and lost the save";
    if (r == 0 && cnt != q->counter) {
        q->counter = cnt;
        q->changed = t;
        return NULL;
    }
    return t - q->changed > sv->o.dead_after ? "stopped beating" : NULL;
}

typedef struct scan {
    ck__saver *sv;
    sv_ckpt *c;
    char from[CK_NODE_ID_MAX];     /* the daemon whose file is being read */
    ck_err err;
} scan;

static int on_join(void *arg, const char *file, const uint8_t *buf, size_t len)
{
    scan *x = arg;
    uint64_t inst, rank;
    const char *id = file + strlen("join.");
    if (ck__node_id_check(id, NULL) == 0 && ck__meet_join_decode(buf, len, &inst, &rank) == 0 &&
        !peer_add(x->c, id, inst, rank))
        return ck_err_set(&x->err, -ENOMEM, "out of memory");
    return 0;
}

static int on_failed(void *arg, const char *file, const uint8_t *buf, size_t len)
{
    scan *x = arg;
    const char *id = file + strlen("failed.");
    if (!strcmp(id, x->sv->o.node_id))
        return 0;
    int code;
    char msg[CK_ERR_MSG_MAX];
    if (ck__meet_fail_decode(buf, len, &code, msg, sizeof msg) < 0) {
        code = -EIO;
        snprintf(msg, sizeof msg, "(its record is unreadable)");
    }
    char prefix[CK_NAME_MAX + 16];
    size_t k = (size_t)snprintf(prefix, sizeof prefix, "checkpoint %s: ", x->c->name);
    return ck_err_set(&x->err, code, "engine %s gave it up: %s", id,
                      strncmp(msg, prefix, k) ? msg : msg + k);
}

static int on_record(void *arg, const void *rec, size_t len, const ck__meet_blob *b)
{
    scan *x = arg;
    sv_ckpt *c = x->c;
    if (b)
        return ck_save_blob(c->s, b->name, b->data, (size_t)b->len, &x->err);
    ck__part pr;
    int r = ck__part_decode(rec, len, &pr, &x->err);
    if (r == 0 && pr.rank < c->world && c->parts[pr.rank].state != P_NONE)
        r = ck_err_set(&x->err, -EBADMSG, "rank %llu is served by two daemons (this one "
                       "and %s)", (unsigned long long)pr.rank, x->from);
    if (r == 0)
        r = ck_save_adopt(c->s, rec, len, &x->err);
    if (r < 0)
        return r;
    c->parts[pr.rank].state = P_REMOTE;
    c->remote++;
    return 0;
}

static int on_parts(void *arg, const char *file, const uint8_t *buf, size_t len)
{
    scan *x = arg;
    const char *id = file + strlen("part.");
    const char *dot = strrchr(id, '.');
    snprintf(x->from, sizeof x->from, "%.*s", dot ? (int)(dot - id) : 0, id);
    int r = ck__meet_parts_decode(buf, len, on_record, x, &x->err);
    if (r < 0)
        return ck_err_set(&x->err, r, "the parts of engine %s (%s): %s", x->from, file,
                          ck_err_msg(&x->err));
    /* adopted: the hashes are in memory, bound for the manifest */
    ck__meet_drop(x->sv->root, x->c->meet, file);
    return 0;
}

/* The ranks no part has arrived for, as "4-7, 9" (at most cap bytes). */
static void missing(const sv_ckpt *c, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = 0;
    for (uint64_t r = 0; r < c->world && n + 48 < cap; r++) {
        if (c->parts[r].state >= P_DURABLE)
            continue;
        uint64_t e = r;
        while (e + 1 < c->world && c->parts[e + 1].state < P_DURABLE)
            e++;
        n += (size_t)snprintf(out + n, cap - n, e > r ? "%s%llu-%llu" : "%s%llu", n ? ", " : "",
                              (unsigned long long)r, (unsigned long long)e);
        r = e;
    }
}

/* "rank R: engine ID" for each joined engine whose first rank's part has not
 * arrived: where a missing part was to come from (at most cap bytes). */
static void late_engines(const sv_ckpt *c, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = 0;
    for (unsigned i = 0; i < c->npeers && n + CK_NODE_ID_MAX + 32 < cap; i++) {
        const peer *q = &c->peers[i];
        if (q->rank < c->world && c->parts[q->rank].state < P_DURABLE)
            n += (size_t)snprintf(out + n, cap - n, "rank %llu: engine %s; ",
                                  (unsigned long long)q->rank, q->id);
    }
}

static void peers_of(const sv_ckpt *c, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = 0;
    for (unsigned i = 0; i < c->npeers && n + CK_NODE_ID_MAX + 2 < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%s", i ? ", " : "", c->peers[i].id);
    if (!n)
        snprintf(out, cap, "none");
}

/* The coordinator's round: joins, part records, failures, dead members, the timeout. */
static void tick_coord(ck__saver *sv, sv_ckpt *c, double t)
{
    scan x = { .sv = sv, .c = c };
    int r = ck__meet_each(sv->root, c->meet, "join.", on_join, &x, &x.err);
    if (r == 0)
        r = ck__meet_each(sv->root, c->meet, "failed.", on_failed, &x, &x.err);
    if (r == 0)
        r = ck__meet_each(sv->root, c->meet, "part.", on_parts, &x, &x.err);
    char msg[CK_ERR_MSG_MAX + 512], miss[256], who[256];
    if (r != 0) {
        snprintf(msg, sizeof msg, "checkpoint %s: %s", c->name, ck_err_msg(&x.err));
        c->heard = strncmp(ck_err_msg(&x.err), "engine ", 7) == 0;
        fail(sv, c, r < 0 ? r : -EIO, msg);
        return;
    }
    bool complete = c->durable + c->remote == c->world;
    /* Heartbeats change once per beat_every: reading them every poll would cost the
     * coordinator of N nodes N reads per poll for nothing. */
    bool watch = t >= c->next_watch;
    if (watch)
        c->next_watch = t + sv->beat_every;
    for (unsigned i = 0; i < c->npeers && !complete && watch; i++) {
        const char *why = peer_dead(sv, &c->peers[i], t);
        if (!why)
            continue;
        missing(c, miss, sizeof miss);
        snprintf(msg, sizeof msg, "checkpoint %s: engine %s %s (heartbeat %s/.ckptd.%s.beat, "
                 "--dead-after %u s); the parts of ranks %s cannot arrive", c->name,
                 c->peers[i].id, why, sv->root, c->peers[i].id, sv->o.dead_after, miss);
        fail(sv, c, -EHOSTDOWN, msg);
        return;
    }
    if (!complete && t > c->deadline) {
        char late[512];
        missing(c, miss, sizeof miss);
        peers_of(c, who, sizeof who);
        late_engines(c, late, sizeof late);
        snprintf(msg, sizeof msg, "checkpoint %s: the parts of ranks %s never arrived within "
                 "--part-timeout %u s (%sengines that joined besides coordinator %s: %s)",
                 c->name, miss, sv->o.part_timeout, late, sv->o.node_id, who);
        fail(sv, c, -ETIMEDOUT, msg);
        return;
    }
    maybe_commit(sv, c);
}

/* A member without a meeting yet looks for the one the daemon of rank 0 opened. */
static void tick_find(ck__saver *sv, sv_ckpt *c, double t)
{
    ck__meet_plan plan;
    ck_err err = { 0 };
    char msg[CK_ERR_MSG_MAX + 256];
    int r = ck__meet_find(sv->root, c->name, c->token, &plan, &err);
    char final[PATH_MAX + CK_NAME_MAX];
    snprintf(final, sizeof final, "%s/%s", sv->root, c->name);
    struct stat st;
    /* The one refusal of rank 0 that leaves a trace here: no meeting will come. */
    if (r == 0 && stat(final, &st) == 0) {
        snprintf(msg, sizeof msg, "checkpoint %s: %s: a checkpoint named %s already exists",
                 c->name, sv->root, c->name);
        fail(sv, c, -EEXIST, msg);
        return;
    }
    /* The meeting of a coordinator that died since (another instance beats now) is
     * debris its recovery is about to remove, not the save to join. */
    uint64_t inst, cnt;
    if (r > 0 && ck__beat_read(sv->root, plan.coord, &inst, &cnt) == 0 && inst != plan.instance)
        r = 0;
    if (r == 0 && t > c->deadline) {
        snprintf(msg, sizeof msg, "checkpoint %s: no daemon serving rank 0 opened the save "
                 "within --part-timeout %u s (is rank 0's ckptd running on the same root?)",
                 c->name, sv->o.part_timeout);
        fail(sv, c, -ETIMEDOUT, msg);
        return;
    }
    if (r == 0)
        return;
    if (r > 0 && (plan.step != c->step || plan.world != c->world || plan.nodes != c->nodes))
        r = ck_err_set(&err, -EINVAL, "engine %s coordinates it for step %llu, %llu ranks, %u "
                       "engines; the ranks here declared step %llu, %llu ranks, %u engines",
                       plan.coord, (unsigned long long)plan.step,
                       (unsigned long long)plan.world, plan.nodes,
                       (unsigned long long)c->step, (unsigned long long)c->world, c->nodes);
    uint64_t any = 0;
    while (any + 1 < c->world && c->parts[any].state == P_NONE)
        any++;
    char pend[PATH_MAX + CK_NAME_MAX + CK_TOKEN_MAX];
    snprintf(pend, sizeof pend, "%s/%s/%s.%s", sv->root, CK_PENDING, c->name, c->token);
    if (r > 0 && (r = ck_save_join(c->s, c->token, any, &err)) == 0 && stat(pend, &st) < 0)
        r = ck_err_set(&err, -errno, "%s: %s", pend, strerror(errno));
    if (r >= 0) {
        c->dev = st.st_dev;
        c->ino = st.st_ino;
        ck__meet_dir(sv->root, c->name, c->token, c->meet);
        c->role = R_MEMBER;
        if (!peer_add(c, plan.coord, plan.instance, 0))
            r = ck_err_set(&err, -ENOMEM, "out of memory");
    }
    if (r >= 0)
        r = ck__meet_join(sv->root, c->meet, sv->o.node_id, sv->o.instance, any, &err);
    if (r >= 0)
        r = resolve(sv, c, &err);
    if (r < 0) {
        snprintf(msg, sizeof msg, "checkpoint %s: joining the save: %s", c->name,
                 ck_err_msg(&err));
        fail(sv, c, r, msg);
        return;
    }
    logf_(sv, "checkpoint %s: joined daemon %s's save %s", c->name, plan.coord, c->token);
}

/* Writes the records of the ranks made durable since the last file, with their blobs,
 * as one durable part file; the saver's lock is let go meanwhile (c->writes holds c). */
static void put_records(ck__saver *sv, sv_ckpt *c)
{
    uint32_t n = 0, nb = 0;
    for (uint64_t r = 0; r < c->world; r++)
        if (c->parts[r].rec) {
            n++;
            nb += c->parts[r].nblobs;
        }
    if (!n)
        return;
    void **recs = calloc(n, sizeof *recs);
    size_t *lens = calloc(n, sizeof *lens);
    ck__meet_blob *blobs = calloc(nb ? nb : 1, sizeof *blobs);
    uint64_t *ranks = calloc(n, sizeof *ranks);
    uint8_t *file = NULL;
    size_t len = 0;
    int r = recs && lens && blobs && ranks ? 0 : -ENOMEM;
    uint32_t k = 0, kb = 0;
    for (uint64_t q = 0; r == 0 && q < c->world; q++) {
        part *p = &c->parts[q];
        if (!p->rec)
            continue;
        ranks[k] = q;
        lens[k] = p->rec_len;
        recs[k++] = p->rec;
        const uint8_t *b = p->blob_bytes;
        for (uint32_t i = 0; i < p->nblobs; i++) {
            blobs[kb++] = (ck__meet_blob){ .name = p->blobs[i].name, .data = b,
                                           .len = p->blobs[i].len };
            b += p->blobs[i].len;
        }
    }
    if (r == 0)
        r = ck__meet_parts_encode(recs, lens, n, blobs, nb, &file, &len);
    char name[CK_NODE_ID_MAX + 32];
    snprintf(name, sizeof name, "part.%s.%u", sv->o.node_id, c->seq++);
    ck_err err = { 0 };
    c->writes++;
    pthread_mutex_unlock(&sv->mu);
    if (r == 0)
        r = ck__meet_put(sv->root, c->meet, name, file, len, true, &err);
    else
        ck_err_set(&err, r, "out of memory");
    pthread_mutex_lock(&sv->mu);
    c->writes--;
    for (uint32_t i = 0; r == 0 && i < n; i++) {
        part *p = &c->parts[ranks[i]];
        free(p->rec);
        free(p->blob_bytes);
        p->rec = NULL;
        p->blob_bytes = NULL;
    }
    free(file);
    free(recs);
    free(lens);
    free(blobs);
    free(ranks);
    if (r < 0 && c->state == C_COLLECTING) {
        char msg[CK_ERR_MSG_MAX + 64];
        snprintf(msg, sizeof msg, "checkpoint %s: writing its part records: %s", c->name,
                 ck_err_msg(&err));
        fail(sv, c, r, msg);
    } else if (c->state == C_FAILED) {
        finish_failed(sv, c);
    }
}

static bool committed_as(ck__saver *sv, const sv_ckpt *c)
{
    char path[PATH_MAX + CK_NAME_MAX];
    snprintf(path, sizeof path, "%s/%s", sv->root, c->name);
    struct stat st;
    return stat(path, &st) == 0 && st.st_dev == c->dev && st.st_ino == c->ino;
}

/* A member: the failure another daemon recorded (its code, its reason in err), or the
 * meeting gone without a commit; 0 when there is neither. */
static int heard_failure(ck__saver *sv, sv_ckpt *c, ck_err *err)
{
    scan x = { .sv = sv, .c = c };
    struct stat st;
    int r = ck__meet_each(sv->root, c->meet, "failed.", on_failed, &x, &x.err);
    if (r < 0 && stat(c->meet, &st) < 0 && !committed_as(sv, c))
        r = ck_err_set(&x.err, -ECANCELED, "engine %s gave it up (its meeting %s is gone)",
                       c->npeers ? c->peers[0].id : "?", c->meet);
    if (r == 0)
        return 0;
    ck_err_set(err, r < 0 ? r : -EIO, "%s", ck_err_msg(&x.err));
    return r < 0 ? r : -EIO;
}

/* A member's round: its records, then the outcome: the commit (ROOT/NAME is the
 * directory it wrote into), a failure record, or a coordinator that died. */
static void tick_member(ck__saver *sv, sv_ckpt *c, double t)
{
    put_records(sv, c);
    if (c->state != C_COLLECTING)
        return;
    char msg[CK_ERR_MSG_MAX + 512];
    if (!c->writes && committed_as(sv, c)) {
        logf_(sv, "checkpoint %s committed by daemon %s: %llu ranks written here, %.3f s",
              c->name, c->peers[0].id, (unsigned long long)c->durable, now_s() - c->t0);
        emit(sv, CK_SAVER_COMMITTED, c, 0);
        unlink_ckpt(sv, c);
        ck_save_abort(c->s);        /* shared: frees only; the directory is committed */
        ckpt_free_parts(c, true);
        return;
    }
    ck_err err = { 0 };
    int r = heard_failure(sv, c, &err);
    if (r != 0) {
        if (committed_as(sv, c))
            return;                 /* committed since the first look: the next round */
        snprintf(msg, sizeof msg, "checkpoint %s: %s", c->name, ck_err_msg(&err));
        c->heard = true;
        fail(sv, c, r, msg);
        return;
    }
    const char *why = NULL;
    if (t >= c->next_watch) {
        c->next_watch = t + sv->beat_every;
        why = peer_dead(sv, &c->peers[0], t);
    }
    if (why) {
        snprintf(msg, sizeof msg, "checkpoint %s: the coordinating engine %s %s (heartbeat "
                 "%s/.ckptd.%s.beat, --dead-after %u s); the save cannot commit", c->name,
                 c->peers[0].id, why, sv->root, c->peers[0].id, sv->o.dead_after);
        fail(sv, c, -EHOSTDOWN, msg);
    }
}

/* Failed saves whose writes have not returned dead_after seconds after the failure:
 * told once, so that the engine's users let go of them without waiting for good. */
static void report_stuck(ck__saver *sv, double t)
{
    if (!sv->o.report_stuck)
        return;
    for (sv_ckpt *c = sv->list; c; c = c->next)
        if (c->state == C_FAILED && c->writes && !c->fail_reported && !c->stuck_reported &&
            t - c->failed_at >= sv->o.dead_after) {
            c->stuck_reported = true;
            logf_(sv, "checkpoint %s: failed, and its writes have not returned %u s later "
                  "(the storage under %s hangs?): their staging is given up", c->name,
                  sv->o.dead_after, sv->root);
            emit(sv, CK_SAVER_STUCK, c, 0);
        }
}

static void *meet_thread(void *arg)
{
    ck__saver *sv = arg;
    uint64_t counter = 0;
    double next_beat = 0, every = sv->beat_every;
    pthread_mutex_lock(&sv->mu);
    while (!sv->stop) {
        double t = now_s();
        if (t >= next_beat) {
            pthread_mutex_unlock(&sv->mu);
            ck_err err = { 0 };
            if (ck__beat_write(sv->root, sv->o.node_id, sv->o.instance, ++counter, &err) < 0)
                logf_(sv, "heartbeat: %s", ck_err_msg(&err));
            pthread_mutex_lock(&sv->mu);
            next_beat = t + every;
        }
        for (sv_ckpt *c = sv->list; c; c = c->next) {
            if (c->state != C_COLLECTING || c->role == R_ALONE)
                continue;
            sv_ckpt *before = sv->list;
            int role = c->role;
            if (role == R_COORD)
                tick_coord(sv, c, t);
            else if (role == R_UNKNOWN)
                tick_find(sv, c, t);
            else
                tick_member(sv, c, t);
            /* A save that ended may have freed c, or taken others out of the list (and
             * the lock was let go): the rest wait for the next round. c is looked up by
             * address, since reading its name could read freed memory. */
            if (sv->list != before || !listed(sv, c) || c->state != C_COLLECTING)
                break;
        }
        report_stuck(sv, t);
        for (grave **gp = &sv->graves; *gp;) {
            grave *g = *gp;
            if (g->when > t) {
                gp = &g->next;
                continue;
            }
            *gp = g->next;
            ck__meet_remove(sv->root, g->dir);
            free(g);
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)sv->o.poll_ms * 1000000u;
        ts.tv_sec += (time_t)(ns / 1000000000u);
        ts.tv_nsec = (long)(ns % 1000000000u);
        pthread_cond_timedwait(&sv->meet_cv, &sv->mu, &ts);
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
        int r = pthread_create(&sv->meet_th, NULL, meet_thread, sv);
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

/* From here on the save completes without any client: for a member, once every rank
 * it serves is staged (the commit is rank 0's, at the coordinator); for the
 * coordinator, once its own are and rank 0 asked (the others' parts come as records). */
static bool committable(const sv_ckpt *c)
{
    if (c->state == C_COMMITTING)
        return true;
    if (c->state != C_COLLECTING)
        return false;
    if (c->role == R_ALONE)
        return c->commit_requested && c->staged == c->world;
    return c->staged == c->joined && (c->commit_requested || c->role != R_COORD);
}

bool ck__saver_free(ck__saver *sv)
{
    if (!sv)
        return true;
    pthread_mutex_lock(&sv->mu);
    sv->closing = true;
    for (sv_ckpt *c = sv->list; c; c = c->next)
        if (!committable(c))
            fail(sv, c, -ECANCELED, "the save engine is shutting down before every rank "
                 "staged its part and the commit was asked for");
    double until = now_s() + sv->o.close_timeout;
    for (;;) {
        unsigned busy = 0;
        for (sv_ckpt *c = sv->list; c; c = c->next)
            busy += c->state != C_FAILED || !(c->fail_reported || c->stuck_reported);
        if (!busy)
            break;
        if (sv->o.close_timeout > 0 && now_s() >= until) {
            /* Writes that never return: their threads, and what they use, stay. */
            logf_(sv, "%u save(s) still writing %.0f s after the engine began to close "
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
        logf_(sv, "closing with writes that never returned: the engine is left behind");
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
        ckpt_free_parts(c, true);
    }
    free(sv->th);
    pthread_cond_destroy(&sv->work);
    pthread_cond_destroy(&sv->idle);
    pthread_cond_destroy(&sv->meet_cv);
    pthread_mutex_destroy(&sv->mu);
    free(sv);
    return true;
}

/* What a later part must agree on with the first. */
static int same_save(const sv_ckpt *c, const ck__decl *d, ck_err *err)
{
    const char *what = d->step != c->step ? "step"
                     : (d->nodes > 1 ? d->nodes : 1) != c->nodes ? "daemon count (nodes)"
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

/* The parts staged before the save's directory was known are bound and written now;
 * their blobs go to this daemon's manifest when it coordinates. */
static int resolve(ck__saver *sv, sv_ckpt *c, ck_err *err)
{
    for (uint64_t r = 0; r < c->world; r++) {
        part *p = &c->parts[r];
        if (c->role == R_COORD && p->blob_bytes) {
            const uint8_t *b = p->blob_bytes;
            for (uint32_t i = 0; i < p->nblobs; i++) {
                int e = ck_save_blob(c->s, p->blobs[i].name, b, p->blobs[i].len, err);
                if (e < 0)
                    return e;
                b += p->blobs[i].len;
            }
            free(p->blob_bytes);
            p->blob_bytes = NULL;
        }
        if (p->state != P_STAGED || !p->deferred)
            continue;
        int e = ck_save_rank_image(c->s, r, p->staging, err);
        if (e == 0 && (e = push(sv, c, r, JOB_WRITE)) < 0)
            ck_err_set(err, e, "checkpoint %s: out of memory", c->name);
        if (e < 0)
            return e;
        p->staging = NULL;
        p->deferred = false;
        c->writes++;
    }
    return 0;
}

/* This daemon serves rank 0: it makes the save's directory (holding its lock) and the
 * meeting the other daemons look for. With the lock held. */
static int coordinate(ck__saver *sv, sv_ckpt *c, ck_err *err)
{
    if (!sv->o.node_id)
        return ck_err_set(err, -EINVAL, "checkpoint %s: declared for %u daemons, but this "
                          "engine serves one node only (run ckptd on each node)", c->name,
                          c->nodes);
    c->role = R_COORD;
    int r = ck_save_share(c->s, c->token, err);
    ck__meet_plan plan = { .step = c->step, .world = c->world, .nodes = c->nodes,
                           .instance = sv->o.instance };
    snprintf(plan.coord, sizeof plan.coord, "%s", sv->o.node_id);
    if (r == 0 && (r = ck__meet_create(sv->root, c->name, c->token, &plan, err)) == 0)
        ck__meet_dir(sv->root, c->name, c->token, c->meet);
    if (r == 0)
        r = resolve(sv, c, err);
    if (r == 0)
        logf_(sv, "checkpoint %s: coordinating %u daemons in %s", c->name, c->nodes, c->meet);
    return r;
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
    c->nodes = d->nodes > 1 ? d->nodes : 1;
    c->role = c->nodes == 1 ? R_ALONE : d->rank == 0 ? R_COORD : R_UNKNOWN;
    c->deadline = c->t0 + sv->o.part_timeout;
    c->next = sv->list;
    sv->list = c;
    pthread_mutex_unlock(&sv->mu);
    c->tensors = calloc(d->ntensors ? d->ntensors : 1, sizeof *c->tensors);
    c->parts = calloc(d->world, sizeof *c->parts);
    int r = 0;
    if (!c->tensors || !c->parts)
        r = ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory for %llu ranks",
                       d->name, (unsigned long long)d->world);
    /* A member learns of rank 0's refusal only through the meeting, later: a name that
     * is committed already is refused here and now, as rank 0's engine refuses it. */
    char who[8];
    if (r == 0 && c->role == R_UNKNOWN &&
        ck_name_probe(sv->root, d->name, who, sizeof who, err) == CK_NAME_COMMITTED)
        r = ck_err_set(err, -EEXIST, "checkpoint %s: %s: a checkpoint named %s already exists",
                       d->name, sv->root, d->name);
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
    /* A member's directory is the coordinator's, made once it has rank 0's plan. */
    if (r == 0 && c->role == R_ALONE)
        r = ck_save_prepare(c->s, err);
    if (r < 0) {
        ck_save_abort(c->s);
        c->s = NULL;
    }
    pthread_mutex_lock(&sv->mu);
    if (r == 0 && c->role == R_COORD)
        r = coordinate(sv, c, err);
    if (r < 0 && c->s) {
        ck__save_discard(c->s);
        c->s = NULL;
    }
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
    if (d->nodes > 1 && !sv->o.node_id)
        return ck_err_set(err, -EINVAL, "checkpoint %s: declared for %u daemons, but this "
                          "engine serves one node only (run ckptd on each node)", d->name,
                          d->nodes);
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
    if (r == 0 && !fresh && d->rank == 0 && c->role == R_MEMBER)
        r = ck_err_set(err, -EINVAL, "checkpoint %s: rank 0 came to daemon %s, but daemon %s "
                       "coordinates the save", c->name, sv->o.node_id, c->peers[0].id);
    if (r == 0 && !fresh && d->rank == 0 && c->role == R_UNKNOWN && (r = coordinate(sv, c, err)) < 0) {
        /* Its own parts are failed with it; the members hear of it from no meeting. */
        char msg[CK_ERR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", ck_err_msg(err));
        fail(sv, c, r, msg);
    }
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
        if (c->role == R_COORD) {
            ck__save_discard(c->s);
            if (c->meet[0])
                ck__meet_remove(sv->root, c->meet);
        } else {
            ck_save_abort(c->s);
        }
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
    uint64_t blob_len = 0;
    for (uint32_t i = 0; i < p->nblobs; i++)
        blob_len += p->blobs[i].len;
    if (c->role == R_ALONE || c->role == R_COORD) {
        for (uint32_t i = 0; i < p->nblobs && r == 0; i++) {
            r = ck_save_blob(c->s, p->blobs[i].name, blob, p->blobs[i].len, err);
            blob += p->blobs[i].len;
        }
    } else if (blob_len) {
        /* The staging goes back at DURABLE; the blobs travel later, in the record. */
        if (!(p->blob_bytes = malloc(blob_len)))
            r = ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory", name);
        else
            memcpy(p->blob_bytes, blob, blob_len);
    }
    bool deferred = c->role == R_UNKNOWN;   /* no directory yet: resolve() writes it */
    p->deferred = deferred;
    if (deferred)
        p->staging = staging;
    if (r == 0 && !deferred)
        r = ck_save_rank_image(c->s, rank, staging, err);
    if (r == 0 && !deferred && (r = push(sv, c, rank, JOB_WRITE)) < 0)
        ck_err_set(err, r, "checkpoint %s: out of memory", name);
    if (r < 0) {
        char msg[CK_ERR_MSG_MAX + 64];
        snprintf(msg, sizeof msg, "rank %llu: %s", (unsigned long long)rank, ck_err_msg(err));
        fail(sv, c, r, msg);
        goto out;
    }
    c->writes += !deferred;
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
