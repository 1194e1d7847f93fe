/* kd_ckpt.c - the checkpoints in flight, as the daemon sees them: which client brought
 * which rank's part, where its staging is mapped, and who must hear the outcome.
 *
 * The save itself (a state machine per checkpoint: collecting, committing, failed)
 * is the core's ck__saver, the same engine the embedded client runs; this file ties it
 * to connections. The rules that are the daemon's own:
 *  - a part is the daemon's once staged: its client may die, the mapping stays;
 *  - a client that goes away before staging a part it began dooms that checkpoint;
 *  - when the last client of a checkpoint goes, the checkpoint completes only if every
 *    part was staged and the commit was asked for, and is abandoned otherwise (a save
 *    shared with other daemons: every part this daemon took was staged, and rank 0's
 *    commit was asked for where rank 0 is served here; ck__saver_committable);
 *  - the saver's events arrive on its threads and are queued for the event loop, which
 *    sends DURABLE / COMMITTED / ERROR and releases the staging;
 *  - a save that waits --rank-timeout for its next BEGIN, ADMIT or STAGED fails,
 *    naming the ranks it waits for (a rank that died before connecting never makes its
 *    client go away);
 *  - a failed save's late ranks get its failure while a client that held it is
 *    connected; after that the name is free again (a retry from new processes).
 */
#include <stdio.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kd.h"

#include "format/decl.h"

#define KD_TRIM_BYTES (16u << 20)
#define KD_FAILED_KEPT 64      /* failed saves tracked for their clients */

static kd_ckpt *find(kd_server *s, const char *name, const ck_job_id *job)
{
    for (kd_ckpt *k = s->ckpts; k; k = k->next)
        if (!strcmp(k->name, name) && ck__job_same(&k->job, job))
            return k;
    return NULL;
}

static kd_part *part_of(kd_ckpt *k, uint64_t rank)
{
    for (kd_part *p = k ? k->parts : NULL; p; p = p->next)
        if (p->rank == rank)
            return p;
    return NULL;
}

/* The part of rank of the save of name that client id holds: STAGED and COMMIT name a
 * save by its name alone, and a client holds at most one save of a name (the saves of
 * one name are of different jobs, so of different clients). */
static kd_part *held_part(kd_server *s, const char *name, uint64_t rank, uint64_t id)
{
    for (kd_ckpt *k = s->ckpts; k; k = k->next) {
        kd_part *p = strcmp(k->name, name) ? NULL : part_of(k, rank);
        if (p && p->client == id)
            return p;
    }
    return NULL;
}

static void tell_admitted(kd_server *s, kd_part *p)
{
    kd_client *c = kd_client_find(s, p->client);
    p->ckpt->progress = kd_now();
    if (c)
        kd_send_named(s, c, CK_MSG_ADMIT, p->ckpt->name, &p->rank, &p->image);
}

/* Staging knows parts, not clients: the ADMITs for the room a release makes are sent
 * here, each before the next release, as the parts they name may be freed by then. */
static void release(kd_server *s, kd_part *p)
{
    kd_staging_release(s, p);
    for (kd_part *q; (q = kd_staging_admit_waiting(s));)
        tell_admitted(s, q);
}

static void ckpt_free(kd_server *s, kd_ckpt *k)
{
    for (kd_ckpt **pp = &s->ckpts; *pp; pp = &(*pp)->next)
        if (*pp == k) {
            *pp = k->next;
            break;
        }
    while (k->parts) {
        kd_part *p = k->parts;
        k->parts = p->next;
        release(s, p);
        free(p);
    }
    s->plan_used -= k->plan_bytes;
    /* The plan was freed by the saver: give its pages back, or the daemon's RSS stays
     * at its largest save's for good (malloc keeps freed heap for reuse); and when the
     * daemon falls idle, what the writers' buffers left in their threads' arenas. */
    if (k->plan_bytes >= KD_TRIM_BYTES || !s->ckpts)
        malloc_trim(0);
    free(k);
}

static int id_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The clients that hold parts of k, each once, sorted (malloc'd; NULL when none, or
 * out of memory: *oom). A part's client is 0 once that client is gone, so these are
 * the connected ones: O(P log P) in k's parts, where asking each client was O(C P). */
static uint64_t *client_ids(const kd_ckpt *k, unsigned *n, bool *oom)
{
    unsigned parts = 0;
    for (const kd_part *p = k->parts; p; p = p->next)
        parts += p->client != 0;
    *n = 0;
    *oom = false;
    uint64_t *ids = parts ? malloc(parts * sizeof *ids) : NULL;
    if (!ids) {
        *oom = parts != 0;
        return NULL;
    }
    for (const kd_part *p = k->parts; p; p = p->next)
        if (p->client)
            ids[(*n)++] = p->client;
    qsort(ids, *n, sizeof *ids, id_cmp);
    unsigned u = 0;
    for (unsigned i = 0; i < *n; i++)
        if (!u || ids[i] != ids[u - 1])
            ids[u++] = ids[i];
    *n = u;
    return ids;
}

/* Whether client id holds a part of k: in ids, or by a walk of the parts when
 * client_ids ran out of memory. */
static bool holds_part(const kd_ckpt *k, const uint64_t *ids, unsigned n, bool oom,
                       uint64_t id)
{
    if (!oom)
        return n && bsearch(&id, ids, n, sizeof *ids, id_cmp);
    for (const kd_part *p = k->parts; p; p = p->next)
        if (p->client == id)
            return true;
    return false;
}

unsigned kd_ckpt_clients(const kd_ckpt *k, const kd_server *s)
{
    unsigned n = 0;
    bool oom;
    uint64_t *ids = client_ids(k, &n, &oom);
    for (const kd_client *c = s->clients; oom && c; c = c->next)
        n += holds_part(k, NULL, 0, true, c->id);
    free(ids);
    return n;
}


static kd_ckpt *ckpt_new(kd_server *s, const char *name, const ck_job_id *job,
                         uint64_t plan_bytes)
{
    kd_ckpt *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    snprintf(k->name, sizeof k->name, "%s", name);
    k->job = *job;
    k->plan_bytes = plan_bytes;
    k->progress = kd_now();
    s->plan_used += plan_bytes;
    k->next = s->ckpts;
    s->ckpts = k;
    return k;
}

/* The bounds on what one BEGIN may cost: its declaration while queued, and for the
 * first rank of a save the plan, together within --plan-memory. */
static int plan_budget(kd_server *s, const ck__begin *d, uint64_t cost, ck_err *err)
{
    const uint64_t mib = 1 << 20;
    uint64_t need = cost + kd_join_bytes(d);
    if (need > s->o.plan_memory)
        return ck_err_set(err, -E2BIG, "checkpoint %s: its plan needs about %llu MiB (%llu "
                          "shard records on %llu ranks, %u tensors), more than ckptd's "
                          "--plan-memory of %llu MiB", d->name,
                          (unsigned long long)(need / mib + 1),
                          (unsigned long long)ck__decl_shards(d->decl),
                          (unsigned long long)ck__begin_world(d), ck__decl_ntensors(d->decl),
                          (unsigned long long)(s->o.plan_memory / mib));
    if (s->plan_used + need > s->o.plan_memory)
        return ck_err_set(err, -EAGAIN, "checkpoint %s: its plan needs about %llu MiB and "
                          "saves in flight hold %llu of ckptd's --plan-memory of %llu MiB; "
                          "retry once they finish", d->name,
                          (unsigned long long)(need / mib + 1),
                          (unsigned long long)(s->plan_used / mib),
                          (unsigned long long)(s->o.plan_memory / mib));
    return 0;
}

void kd_ckpt_begin(kd_server *s, kd_client *c, ck__begin *d, int fd)
{
    ck_err err = { 0 };
    kd_ckpt *k = find(s, d->name, &d->job);
    /* A draining daemon still takes the ranks of the saves in flight. */
    if (s->stopping && (s->drained || !k)) {
        close(fd);
        kd_send_error(s, c, d->name, -ESHUTDOWN, "ckptd is shutting down; no new saves");
        return;
    }
    /* A retry after a failure must see the failure's cleanup first. */
    kd_ckpt_events(s);
    k = find(s, d->name, &d->job);
    uint64_t cost = k ? 0 : kd_plan_cost(d);
    kd_join *j = NULL;
    int r = plan_budget(s, d, cost, &err);
    if (r == 0 && (!(j = calloc(1, sizeof *j)) ||
                   (!k && !(k = ckpt_new(s, d->name, &d->job, cost)))))
        r = ck_err_set(&err, -ENOMEM, "checkpoint %s: ckptd ran out of memory", d->name);
    if (r < 0) {
        free(j);
        close(fd);
        kd_log(s, "checkpoint %s: client %llu (pid %d): %s", d->name,
               (unsigned long long)c->id, (int)c->pid, ck_err_msg(&err));
        kd_send_error(s, c, d->name, r, ck_err_msg(&err));
        return;
    }
    *j = (kd_join){ .client = c->id, .pid = c->pid, .fd = fd, .d = *d,
                    .bytes = kd_join_bytes(d) };
    d->decl = NULL;
    d->blobs = NULL;
    s->plan_used += j->bytes;
    k->joins++;
    kd_plan_submit(s, j);
}

/* The planner joined (or refused) a rank: its part now waits for staging room. */
static void joined(kd_server *s, kd_join *j)
{
    s->plan_used -= j->bytes;
    kd_ckpt *k = find(s, j->d.name, &j->d.job);
    if (k)
        k->joins--;
    kd_client *c = kd_client_find(s, j->client);
    if (j->r < 0) {
        if (c)
            kd_send_error(s, c, j->d.name, j->r, j->msg);
        /* No rank of it joined, none is on its way: the saver never had the save. */
        if (k && !k->parts && !k->joins)
            ckpt_free(s, k);
        kd_join_free(j);
        return;
    }
    kd_part *p = calloc(1, sizeof *p);
    if ((!k && !(k = ckpt_new(s, j->d.name, &j->d.job, 0))) || !p) {
        free(p);
        kd_join_free(j);
        ck__saver_abandon(s->saver, j->d.name, &j->d.job, "ckptd ran out of memory");
        return;
    }
    uint64_t blob_bytes = 0;
    ck__begin_blob_bytes(&j->d, &blob_bytes);
    *p = (kd_part){ .next = k->parts, .ckpt = k, .rank = j->d.rank, .client = c ? c->id : 0,
                    .fd = j->fd, .need = j->image + blob_bytes, .image = j->image };
    j->fd = -1;
    k->parts = p;
    k->world = ck__begin_world(&j->d);
    k->shared = j->d.nodes > 1;
    k->progress = kd_now();
    if (!c) {
        kd_log(s, "checkpoint %s: abandoned: the client of rank %llu (pid %d) went away "
               "while its part was planned", k->name, (unsigned long long)p->rank, (int)j->pid);
        ck__saver_abandon(s->saver, k->name, &k->job,
                          "a client went away before staging its part");
        kd_join_free(j);
        return;
    }
    ck_err err = { 0 };
    int r = kd_staging_admit(s, p, &err);
    if (r == 1)
        tell_admitted(s, p);
    if (r < 0) {
        kd_log(s, "checkpoint %s: client %llu (pid %d): %s", k->name,
               (unsigned long long)c->id, (int)c->pid, ck_err_msg(&err));
        ck__saver_abandon(s->saver, k->name, &k->job, ck_err_msg(&err));
    }
    kd_join_free(j);
}

/* A client hears of a failed save exactly once, through the broadcast at the saver's
 * FAILED event: replies are matched to saves by name only, so a second ERROR naming
 * the save would fail the client's next save of that name (a retry). A STAGED or
 * COMMIT that crossed the failure on the wire therefore gets no reply: it is late,
 * and its client was (or will be) told by the broadcast. */
static void late(kd_server *s, kd_client *c, const char *what, const char *name,
                 const char *why)
{
    kd_log(s, "checkpoint %s: %s from client %llu (pid %d) ignored: %s", name, what,
           (unsigned long long)c->id, (int)c->pid, why);
}

void kd_ckpt_staged(kd_server *s, kd_client *c, const char *name, uint64_t rank)
{
    ck_err err = { 0 };
    kd_part *p = held_part(s, name, rank, c->id);
    if (!p) {
        /* Its part went with the save, which failed (and may be retried by now). */
        late(s, c, "STAGED", name, "the save has no part of this client for that rank");
        return;
    }
    if (!p->admitted || p->staged) {
        kd_send_error(s, c, "", -EPROTO, "STAGED for a part this client was not admitted for");
        c->drop = true;
        return;
    }
    p->staged = true;
    p->ckpt->progress = kd_now();
    int r = ck__saver_stage(s->saver, name, &p->ckpt->job, rank, p->map, &err);
    if (r < 0)      /* the save failed: its FAILED event tells every client, this one too */
        late(s, c, "STAGED", name, ck_err_msg(&err));
}

void kd_ckpt_commit(kd_server *s, kd_client *c, const char *name)
{
    ck_err err = { 0 };
    kd_part *p = held_part(s, name, 0, c->id);
    if (!p) {
        /* The client refuses a commit from another rank or before submit itself:
         * this one crossed the failure of its save. */
        late(s, c, "COMMIT", name, "the save has no part of rank 0 from this client");
        return;
    }
    int r = ck__saver_commit(s->saver, name, &p->ckpt->job, &err);
    if (r < 0)      /* failed: the broadcast tells this client */
        late(s, c, "COMMIT", name, ck_err_msg(&err));
}

/* The save failed: remember which clients held it, or forget it now if none does. */
static void remember_failed(kd_server *s, kd_ckpt *k)
{
    unsigned n, kept = 0;
    bool oom;
    uint64_t *ids = client_ids(k, &n, &oom);
    /* An earlier attempt's entry is superseded; past KD_FAILED_KEPT the oldest go
     * untracked (the saver forgets its oldest failures by itself). */
    for (kd_failed **pp = &s->failed; *pp;) {
        kd_failed *f = *pp;
        if ((!strcmp(f->name, k->name) && ck__job_same(&f->job, &k->job)) ||
            ++kept >= KD_FAILED_KEPT) {
            *pp = f->next;
            free(f);
        } else {
            pp = &f->next;
        }
    }
    kd_failed *f = n ? calloc(1, sizeof *f + n * sizeof f->client[0]) : NULL;
    if (!f) {
        /* No client left (or no memory to track them): no late rank is to come. */
        free(ids);
        ck__saver_forget(s->saver, k->name, &k->job);
        return;
    }
    snprintf(f->name, sizeof f->name, "%s", k->name);
    f->job = k->job;
    memcpy(f->client, ids, n * sizeof *ids);
    f->n = n;
    free(ids);
    f->next = s->failed;
    s->failed = f;
}

static void failed_client_gone(kd_server *s, const kd_client *c)
{
    for (kd_failed **pp = &s->failed; *pp;) {
        kd_failed *f = *pp;
        unsigned left = 0;
        for (unsigned i = 0; i < f->n; i++) {
            if (f->client[i] == c->id)
                f->client[i] = 0;
            left += f->client[i] != 0;
        }
        if (left) {
            pp = &f->next;
            continue;
        }
        ck__saver_forget(s->saver, f->name, &f->job);
        *pp = f->next;
        free(f);
    }
}

void kd_ckpt_client_gone(kd_server *s, kd_client *c)
{
    failed_client_gone(s, c);
    for (kd_ckpt *k = s->ckpts; k; k = k->next) {
        bool mine = false, doomed = false;
        uint64_t rank = 0;
        for (kd_part *p = k->parts; p; p = p->next) {
            if (p->client != c->id)
                continue;
            mine = true;
            p->client = 0;
            if (!p->staged) {
                doomed = true;
                rank = p->rank;
                release(s, p);
            }
        }
        if (!mine)
            continue;
        char why[CK_ERR_MSG_MAX];
        if (doomed)
            snprintf(why, sizeof why, "the client of rank %llu (pid %d) went away before "
                     "staging its part", (unsigned long long)rank, (int)c->pid);
        else if (kd_ckpt_clients(k, s) == 0 &&
                 !ck__saver_committable(s->saver, k->name, &k->job))
            snprintf(why, sizeof why, "every client went away before all parts were staged "
                     "and the commit was asked for");
        else
            continue;
        kd_log(s, "checkpoint %s: abandoned: %s", k->name, why);
        ck__saver_abandon(s->saver, k->name, &k->job, why);
    }
}

/* Saver thread: queue the event for the loop (the saver's lock is held: be quick). */
void kd_saver_event(void *arg, const ck__saver_event *ev)
{
    kd_server *s = arg;
    kd_event *e = calloc(1, sizeof *e + (size_t)ev->n_nodes * CK_NODE_ID_MAX);
    if (!e) {
        kd_log(s, "out of memory queueing an event of checkpoint %s", ev->name);
        return;
    }
    e->kind = ev->kind;
    snprintf(e->name, sizeof e->name, "%s", ev->name);
    e->job = *ev->job;
    e->rank = ev->rank;
    e->code = ev->code;
    e->level = ev->level;
    if (ev->n_nodes) {
        e->nodes = (char (*)[CK_NODE_ID_MAX])(e + 1);
        e->n_nodes = ev->n_nodes;
        memcpy(e->nodes, ev->nodes, (size_t)ev->n_nodes * CK_NODE_ID_MAX);
    }
    if (ev->msg)
        snprintf(e->msg, sizeof e->msg, "%s", ev->msg);
    pthread_mutex_lock(&s->ev_mu);
    if (s->ev_tail)
        s->ev_tail->next = e;
    else
        s->ev_head = e;
    s->ev_tail = e;
    pthread_mutex_unlock(&s->ev_mu);
    uint64_t one = 1;
    if (write(s->ev_fd, &one, sizeof one) < 0)
        kd_log(s, "eventfd: %s", strerror(errno));
}

static void broadcast(kd_server *s, kd_ckpt *k, const kd_event *e)
{
    unsigned n;
    bool oom;
    uint64_t *ids = client_ids(k, &n, &oom);
    for (kd_client *c = s->clients; c; c = c->next) {
        if (!holds_part(k, ids, n, oom, c->id))
            continue;
        if (e->kind == CK_SAVER_COMMITTED)
            kd_send_committed(s, c, k->name, e->level, e->msg);
        else
            kd_send_error(s, c, k->name, e->code, e->msg);
    }
    free(ids);
}

void kd_ckpt_events(kd_server *s)
{
    for (kd_join *j; (j = kd_plan_done(s));)
        joined(s, j);
    pthread_mutex_lock(&s->ev_mu);
    kd_event *e = s->ev_head;
    s->ev_head = s->ev_tail = NULL;
    pthread_mutex_unlock(&s->ev_mu);
    while (e) {
        kd_event *next = e->next;
        kd_ckpt *k = find(s, e->name, &e->job);
        if (e->kind == CK_SAVER_SETTLED) {
            kd_tiersave_settled(s, e);
        } else if (e->kind == CK_SAVER_DRAIN) {
            kd_tiersave_durable(s, e);
        } else if (k && e->kind == CK_SAVER_DURABLE) {
            kd_part *p = part_of(k, e->rank);
            kd_client *c = p ? kd_client_find(s, p->client) : NULL;
            if (c)
                kd_send_named(s, c, CK_MSG_DURABLE, k->name, &e->rank, NULL);
            if (p)
                release(s, p);
        } else if (k) {
            if (e->kind == CK_SAVER_FAILED) {
                /* the saver has logged it ("checkpoint NAME failed: ...") */
                kd_early_cancel(s, k->name);
                remember_failed(s, k);
            } else if (e->kind == CK_SAVER_COMMITTED) {
                kd_retain_after_commit(s, k->name);
            }
            broadcast(s, k, e);
            ckpt_free(s, k);
        }
        free(e);
        e = next;
    }
}

void kd_ckpt_drain_expired(kd_server *s)
{
    char why[160];
    snprintf(why, sizeof why, "ckptd is shutting down: the drain timeout (%u s) passed before "
             "every rank staged its part and rank 0 asked for the commit", s->o.drain_timeout);
    /* Each failure is logged by the saver, naming its save. */
    unsigned n = ck__saver_abandon_waiting(s->saver, why);
    if (n)
        kd_log(s, "drain timeout (%u s): aborted %u save(s) still waiting for ranks",
               s->o.drain_timeout, n);
}

/* Appends rank r to a list of ranks in out (at most 16 named, then a count). */
static void list_rank(char *out, size_t len, unsigned *n, uint64_t r)
{
    size_t used = strlen(out);
    if (*n < 16)
        snprintf(out + used, len - used, "%s%llu", *n ? ", " : "", (unsigned long long)r);
    (*n)++;
}

static void count_more(char *out, size_t len, unsigned n)
{
    size_t used = strlen(out);
    if (n > 16)
        snprintf(out + used, len - used, " and %u more", n - 16);
}

static void rank_timeout(kd_server *s, kd_ckpt *k)
{
    /* 0: no BEGIN, 1: began, 2: staged; one pass over the parts (worlds are large). */
    uint8_t *st = calloc(k->world, 1);
    if (!st)
        return;             /* tried again on the next round */
    for (kd_part *p = k->parts; p; p = p->next)
        if (p->rank < k->world)
            st[p->rank] = p->staged ? 2 : 1;
    char absent[200] = "", unstaged[200] = "", why[CK_ERR_MSG_MAX];
    unsigned na = 0, nu = 0;
    for (uint64_t r = 0; r < k->world; r++) {
        /* A shared save's ranks served elsewhere are the part timeout's (the saver). */
        if (st[r] == 0 && !k->shared)
            list_rank(absent, sizeof absent, &na, r);
        else if (st[r] == 1)
            list_rank(unstaged, sizeof unstaged, &nu, r);
    }
    free(st);
    if (!na && !nu) {
        /* Every part staged: it waits for the writers or rank 0's COMMIT, which no
         * rank timeout is about. Look again a period later, not every second. */
        k->progress = kd_now();
        return;
    }
    count_more(absent, sizeof absent, na);
    count_more(unstaged, sizeof unstaged, nu);
    int n = snprintf(why, sizeof why, "no progress for ckptd's --rank-timeout of %u s:",
                     s->o.rank_timeout);
    if (na)
        n += snprintf(why + n, sizeof why - (size_t)n, " rank(s) %s never began their part%s",
                      absent, nu ? ";" : "");
    if (nu)
        snprintf(why + n, sizeof why - (size_t)n, " rank(s) %s began but never staged theirs",
                 unstaged);
    kd_log(s, "checkpoint %s: abandoned: %s", k->name, why);
    k->timed_out = true;
    ck__saver_abandon(s->saver, k->name, &k->job, why);
}

void kd_ckpt_rank_timeouts(kd_server *s)
{
    if (!s->o.rank_timeout)
        return;
    double now = kd_now();
    for (kd_ckpt *k = s->ckpts; k; k = k->next) {
        /* A BEGIN in the planner, or a part waiting for staging room, is the daemon's
         * delay, not a rank's. */
        bool queued = k->joins > 0;
        for (kd_part *p = k->parts; p && !queued; p = p->next)
            queued = p->waiting;
        if (!k->timed_out && !queued && k->world && now - k->progress >= s->o.rank_timeout)
            rank_timeout(s, k);
    }
}
