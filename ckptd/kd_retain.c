/* kd_retain.c - retention per tier (ckptd --keep-local K, --keep-durable M; decision
 * 0182, docs/ARCHITECTURE.md, "Tiers").
 *
 * A pass runs after each commit (kd_retain_after_commit, which the save and drain paths
 * call) and once at start:
 *   - the local tier keeps the copies of its K newest checkpoints: the node's own
 *     copies (LOCAL/NAME), the replicas it keeps (LOCAL/.replicas/SRC/NAME) and the
 *     copies it fetched (LOCAL/.fetched/N/NAME). A checkpoint is its name and commit
 *     time, newest by the step its manifest records, then the commit time. K is the
 *     operator's explicit word: a copy past the K newest goes even when it is the last
 *     copy of a checkpoint newer than the newest durable one, unless a drain to the
 *     durable tier is owed it (queued or running here, or stood by for: decision 0195;
 *     the drainer keeps at most one policy drain queued, so this is at most two
 *     checkpoints beyond K, and those a save asked durable for). Without --keep-local
 *     nothing of the local tier goes but what the next rule says.
 *   - fetched copies of a run's step (PREFIX<digits>) older than that run's newest
 *     durable checkpoint go whatever K is: they served a restore, and the durable tier
 *     holds a newer whole checkpoint. A fetched root left empty goes too
 *     (ck_tier_root_drop), so that .fetched/N no longer piles up.
 *   - the durable root keeps the M newest checkpoints of each run this daemon serves:
 *     PREFIX<digits> for each PREFIX of a name it committed or holds in its local tier
 *     (decision 0148: a run owns its step names; nothing else in the root is counted or
 *     touched). M is at least 1, so the newest durable checkpoint of a run never goes.
 *   - never a checkpoint being read: a name that a RESOLVE or FETCH answered stays
 *     pinned while the process that asked has a connection to the daemon (a loader
 *     keeps its client open while it reads), for at most PIN_LEASE after the last
 *     request naming it.
 * Every removal is the core's (ck_root_remove: under the name's lock, crash-safe), in
 * the root the copy lies in; a name that a save or another removal holds is skipped
 * for the next pass. Nothing here unlinks a file itself.
 *
 * A pass runs on the restorer's thread (kd_restore.c) between its requests: never on
 * the event loop, and never beside a FETCH that is filling a fetched root. The drain's
 * fetches run on the drainer's thread: each holds kd_server.fetching shared from the
 * moment it makes its root, and empty fetched roots go only in a pass that can take it
 * whole (else in the next), so that a root is never taken from a fetch about to fill it.
 */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kd.h"

#include "ck/catalog.h"
#include "ck/steps.h"
#include "format/steps.h"

/* A loader reads what it fetched right after the FETCH; a process that restored once
 * and then trains for days keeps its connection, and must not hold its checkpoint
 * from retention all that time: a pin lasts until its owner's last connection closes,
 * or this long after the last request that named it. */
#define PIN_LEASE 1800.0

typedef struct pin {
    struct pin *next;
    uint64_t owner;
    double until;                  /* kd_now() past which it no longer holds */
    char name[CK_NAME_MAX];
} pin;

struct kd_retain {
    pthread_mutex_t mu;            /* pins and prefixes: the event loop and the restorer */
    pin *pins;
    char (*prefix)[CK_NAME_MAX];   /* the runs this daemon serves */
    size_t nprefix;
    void (*wake)(void *arg);       /* asks the thread that runs passes for one */
    void *wake_arg;
};

/* A local copy and the checkpoint it is of. */
typedef struct lcopy {
    const kd_peer_copy *c;
    const char *root;
    size_t rank;                   /* its checkpoint's place, newest first */
} lcopy;

int kd_retain_init(kd_server *s, ck_err *err)
{
    struct kd_retain *k = calloc(1, sizeof *k);
    if (!k)
        return ck_err_set(err, -ENOMEM, "out of memory");
    pthread_mutex_init(&k->mu, NULL);
    s->retain = k;
    return 0;
}

void kd_retain_free(kd_server *s)
{
    struct kd_retain *k = s->retain;
    if (!k)
        return;
    while (k->pins) {
        pin *p = k->pins;
        k->pins = p->next;
        free(p);
    }
    free(k->prefix);
    pthread_mutex_destroy(&k->mu);
    free(k);
    s->retain = NULL;
}

/* The run name belongs to: PREFIX of PREFIX<digits>; false for a name with no step. */
static bool prefix_of(const char *name, char out[CK_NAME_MAX])
{
    size_t n = strlen(name), d = n;
    while (d > 0 && name[d - 1] >= '0' && name[d - 1] <= '9')
        d--;
    if (d == n || n >= CK_NAME_MAX)
        return false;
    memcpy(out, name, d);
    out[d] = '\0';
    return ck__step_of(name, out, NULL);
}

static void learn(struct kd_retain *k, const char *name)
{
    char p[CK_NAME_MAX];
    if (!prefix_of(name, p))
        return;
    pthread_mutex_lock(&k->mu);
    size_t i = 0;
    while (i < k->nprefix && strcmp(k->prefix[i], p))
        i++;
    if (i == k->nprefix) {
        char (*v)[CK_NAME_MAX] = realloc(k->prefix, (k->nprefix + 1) * sizeof *v);
        if (v) {
            k->prefix = v;
            memcpy(v[k->nprefix++], p, sizeof p);
        }
    }
    pthread_mutex_unlock(&k->mu);
}

void kd_retain_runs_on(kd_server *s, void (*wake)(void *arg), void *arg)
{
    struct kd_retain *k = s->retain;
    if (!k)
        return;
    pthread_mutex_lock(&k->mu);
    k->wake = wake;
    k->wake_arg = arg;
    pthread_mutex_unlock(&k->mu);
}

void kd_retain_after_commit(kd_server *s, const char *name)
{
    struct kd_retain *k = s->retain;
    if (!k)
        return;
    if (name)
        learn(k, name);
    pthread_mutex_lock(&k->mu);
    if (k->wake)
        k->wake(k->wake_arg);
    pthread_mutex_unlock(&k->mu);
}

/* Adds owner's pin of name, or moves its end to until. */
static void pin_until(kd_server *s, uint64_t owner, const char *name, double until)
{
    struct kd_retain *k = s->retain;
    if (!k)
        return;
    pthread_mutex_lock(&k->mu);
    pin *p = k->pins;
    while (p && (p->owner != owner || strcmp(p->name, name)))
        p = p->next;
    if (!p && (p = calloc(1, sizeof *p))) {
        p->owner = owner;
        snprintf(p->name, sizeof p->name, "%s", name);
        p->next = k->pins;
        k->pins = p;
    }
    if (p)
        p->until = until;
    pthread_mutex_unlock(&k->mu);
    if (!p)
        kd_log(s, "retention: out of memory pinning %s: the next pass may remove it", name);
}

void kd_retain_pin(kd_server *s, uint64_t owner, const char *name)
{
    pin_until(s, owner, name, kd_now() + PIN_LEASE);
}

void kd_retain_hold(kd_server *s, uint64_t owner, const char *name)
{
    pin_until(s, owner, name, HUGE_VAL);
}

/* Drops owner's pins: all of them, or (name) that one; true when one went. */
static bool unpin(kd_server *s, uint64_t owner, const char *name)
{
    struct kd_retain *k = s->retain;
    bool gone = false;
    if (!k)
        return false;
    pthread_mutex_lock(&k->mu);
    for (pin **pp = &k->pins; *pp;) {
        pin *p = *pp;
        if (p->owner == owner && (!name || !strcmp(p->name, name))) {
            *pp = p->next;
            free(p);
            gone = true;
        } else {
            pp = &p->next;
        }
    }
    pthread_mutex_unlock(&k->mu);
    return gone;
}

void kd_retain_unpin(kd_server *s, uint64_t owner)
{
    unpin(s, owner, NULL);
}

/* What a drain held beyond K goes at once, not at the next commit: a pass is asked. */
void kd_retain_release(kd_server *s, uint64_t owner, const char *name)
{
    if (unpin(s, owner, name))
        kd_retain_after_commit(s, NULL);
}

/* Why name's copies stay (a pin holds them), or NULL. */
static const char *pinned(struct kd_retain *k, const char *name)
{
    const char *why = NULL;
    double now = kd_now();
    pthread_mutex_lock(&k->mu);
    for (pin **pp = &k->pins; *pp;) {
        pin *p = *pp;
        if (p->until < now) {          /* its lease ran out */
            *pp = p->next;
            free(p);
            continue;
        }
        if (!strcmp(p->name, name) && (!why || p->owner >= KD_PIN_OWED))
            why = p->owner >= KD_PIN_OWED ? "a drain to the durable tier is owed it, or stood "
                                            "by for" : "it is being read";
        pp = &p->next;
    }
    pthread_mutex_unlock(&k->mu);
    return why;
}

/* Removes root/name through the core, unless pinned; says why in the log. 1 removed. */
static int drop(kd_server *s, const char *root, const char *name, uint64_t step,
                const char *why)
{
    const char *held = pinned(s->retain, name);
    if (held) {
        kd_log(s, "retention: keeps %s in %s (%s): %s", name, root, why, held);
        return 0;
    }
    ck_err err = { 0 };
    int r = ck_root_remove(root, name, NULL, &err);
    if (r == 0)
        kd_log(s, "retention: removed %s (step %llu) from %s: %s", name,
               (unsigned long long)step, root, why);
    else if (r == -EBUSY)
        kd_log(s, "retention: %s in %s is busy (%s); the next pass sees it again", name, root,
               ck_err_msg(&err));
    else if (r != -ENOENT)
        kd_log(s, "retention: removing %s from %s: %s", name, root, ck_err_msg(&err));
    return r == 0;
}

/* The prefixes known now (a copy the caller frees). */
static char (*prefixes(struct kd_retain *k, size_t *n))[CK_NAME_MAX]
{
    pthread_mutex_lock(&k->mu);
    char (*v)[CK_NAME_MAX] = malloc((k->nprefix ? k->nprefix : 1) * sizeof *v);
    *n = v ? k->nprefix : 0;
    if (v && k->nprefix)
        memcpy(v, k->prefix, k->nprefix * sizeof *v);
    pthread_mutex_unlock(&k->mu);
    return v;
}

static size_t durable(kd_server *s)
{
    size_t gone = 0;
    size_t np;
    char (*p)[CK_NAME_MAX] = prefixes(s->retain, &np);
    char why[96];
    snprintf(why, sizeof why, "the durable tier keeps the %u newest of the run",
             s->o.keep_durable);
    for (size_t i = 0; i < np; i++) {
        ck_step_ckpt *v;
        size_t n;
        ck_err err = { 0 };
        if (ck_root_steps(s->root, p[i], &v, &n, &err) < 0) {
            kd_log(s, "retention: %s", ck_err_msg(&err));
            continue;
        }
        /* Oldest first: the last keep_durable (at least the newest) are never reached. */
        for (size_t j = 0; n > s->o.keep_durable && j < n - s->o.keep_durable; j++)
            gone += (size_t)drop(s, s->root, v[j].name, v[j].step, why);
        free(v);
    }
    free(p);
    return gone;
}

static int newest_first(const void *a, const void *b)
{
    const kd_peer_copy *x = *(kd_peer_copy *const *)a, *y = *(kd_peer_copy *const *)b;
    if (x->step != y->step)
        return x->step > y->step ? -1 : 1;
    if (x->time_ns != y->time_ns)
        return x->time_ns > y->time_ns ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Whether the fetched copy c is of a run's step older than that run's newest durable
 * checkpoint. */
static bool superseded(kd_server *s, const kd_peer_copy *c)
{
    char p[CK_NAME_MAX], newest[CK_NAME_MAX];
    uint64_t mine, top;
    if (!prefix_of(c->name, p) || !ck__step_of(c->name, p, &mine) ||
        ck_root_newest(s->root, p, newest, &top, NULL) < 0)
        return false;
    return mine < top;
}

static size_t local(kd_server *s)
{
    size_t gone = 0;
    kd_peer_copy *v = NULL;
    char (*roots)[PATH_MAX] = NULL;
    size_t n = 0;
    ck_err err = { 0 };
    if (kd_inv_scan(s->local_root, s->o.id, &v, &roots, &n, &err) < 0) {
        kd_log(s, "retention: the local tier %s: %s", s->local_root, ck_err_msg(&err));
        return 0;
    }
    /* One entry per checkpoint (name and commit time), newest first. */
    const kd_peer_copy **ck = malloc((n ? n : 1) * sizeof *ck);
    size_t nck = 0;
    for (size_t i = 0; ck && i < n; i++) {
        learn(s->retain, v[i].name);
        size_t j = 0;
        while (j < nck && (strcmp(ck[j]->name, v[i].name) || ck[j]->time_ns != v[i].time_ns))
            j++;
        if (j == nck)
            ck[nck++] = &v[i];
    }
    if (nck > 1)
        qsort(ck, nck, sizeof *ck, newest_first);
    char why[96];
    snprintf(why, sizeof why, "the local tier keeps the %u newest checkpoints",
             s->o.keep_local);
    for (size_t i = 0; ck && i < n; i++) {
        size_t rank = 0;
        while (rank < nck && (strcmp(ck[rank]->name, v[i].name) ||
                              ck[rank]->time_ns != v[i].time_ns))
            rank++;
        if (s->o.keep_local && rank >= s->o.keep_local)
            gone += (size_t)drop(s, roots[i], v[i].name, v[i].step, why);
        else if (v[i].kind == KD_COPY_FETCHED && superseded(s, &v[i]))
            gone += (size_t)drop(s, roots[i], v[i].name, v[i].step, "a fetched copy older than the newest "
                 "durable checkpoint of its run");
    }
    free(ck);
    if (!ck)
        kd_log(s, "retention: out of memory listing the local tier");
    kd_peer_copies_free(v, n);
    free(roots);

    /* Fetched roots left empty. Replica roots stay: a peer's PUT may be making one. A
     * fetch in progress (the drainer's: this thread's own never overlap) may have made
     * a root it has not begun to fill: then the next pass. */
    if (pthread_rwlock_trywrlock(&s->fetching) != 0)
        return gone;
    ck_tier_root *t = NULL;
    if (ck_tier_roots(s->local_root, &t, &n, &err) < 0)
        kd_log(s, "retention: %s", ck_err_msg(&err));
    for (size_t i = 0; t && i < n; i++) {
        int r = t[i].kind == CK_TIER_FETCHED ? ck_tier_root_drop(s->local_root, &t[i], &err) : 0;
        if (r < 0)
            kd_log(s, "retention: %s", ck_err_msg(&err));
    }
    free(t);
    pthread_rwlock_unlock(&s->fetching);
    return gone;
}

void kd_retain_run(kd_server *s)
{
    if (!s->retain)
        return;
    /* The local tier first: its names tell the durable pass which runs are ours. */
    size_t l = s->local_root[0] ? local(s) : 0;
    size_t d = s->o.keep_durable ? durable(s) : 0;
    if (s->local_root[0] || s->o.keep_durable)
        kd_log(s, "retention: pass done: %zu local cop%s and %zu durable checkpoint%s removed",
               l, l == 1 ? "y" : "ies", d, d == 1 ? "" : "s");
}
