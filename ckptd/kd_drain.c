/* kd_drain.c - the drainer: one thread that copies checkpoints from the local tiers to
 * the durable tier in the background (docs/ARCHITECTURE.md, "The drain"; decisions
 * 0178-0181), so that no save, reply or event of the loop ever waits on a drain.
 *
 * A drain is asked for in two ways. kd_drain_offer is the policy's: the save path
 * offers each checkpoint once it is replicated, and every --drain-every'th offer is
 * kept; it is drained by one daemon only, the first of the save's daemons in the
 * order its meeting gave them (every node is offered the save with that order, so
 * each knows which). The others stand by, in that order (decision 0192): each reads
 * the drainer's heartbeat once a second, and when it stops, or names another instance
 * (a replacement that lost the drains owed with its disk), before the durable root
 * holds the checkpoint, the next in the order takes the drain over; a drain of a lost
 * node's checkpoint reads the lost part from the replicas. A DRAIN message
 * (ckptctl drain NAME) drains a checkpoint here at once; with its offer flag it is an
 * offer without an order: drained by the daemon whose own copy holds the checkpoint's
 * first data file (a rule each applies to its own copy alone). A save that asked for
 * level durable is drained whatever the policy (kd_drain_wait), ahead of the drains
 * queued for the policy, by the same first node, the others standing by alike; the
 * node that drains it tells its save engine how the drain ended: the save's engines
 * wait for that, and learn it through the meeting (decision 0176).
 *
 * Drains run one at a time, in the order asked, each paced by the --drain-rate token
 * bucket (kd_drain_copy.c). The drains owed are written to LOCAL/.ckptd.ID.drain
 * (atomically, before each starts): a daemon that stops or dies mid-drain finds them
 * there when it starts again and drains them from the start, the durable root having
 * dropped what the dead drain left (its pending directory). A drain whose checkpoint
 * the durable root already holds (the daemon died after the rename) is done at once.
 * The state of the last drains (queued, running with its bytes, done, failed and why)
 * is the DRAIN reply, which ckptctl drain prints.
 *
 * Retention keeps the copies a drain needs (decision 0195): a drain owed (queued or
 * running) holds its checkpoint's copies here, and a watch holds them on the daemons
 * that stand by (the oldest and the newest policy drain of each drainer: hold_ends),
 * beyond --keep-local, until the drain ends. So that this stays bounded
 * when saves outrun the drains, a newer policy drain supersedes one still queued (it is
 * done, not drained, and says so): one runs and one waits. The drainer publishes the
 * drains it owes in the durable root (ROOT/.ckptd.ID.drains), and a daemon standing by
 * lets its watch go when the drainer no longer lists it (its drain failed or was
 * superseded there).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kd.h"

#include "ck/catalog.h"
#include "format/layout.h"
#include "io/rootfs.h"
#include "ops/copy.h"
#include "save/meet.h"

#define DRAIN_QUEUED 64u           /* drains waiting; an offer past it is dropped, logged */
#define DRAIN_KEPT 16u             /* finished drains the status still shows */
#define AHEAD_KEPT 1024u           /* daemons ahead of this one a stand-by's line keeps */
/* The drains owed: DRAIN_QUEUED drains and as many stand-bys, each of AHEAD_KEPT ids. */
#define DRAIN_FILE_MAX (2 * DRAIN_QUEUED * (CK_NAME_MAX + 16) + \
                        DRAIN_QUEUED * AHEAD_KEPT * CK_NODE_ID_MAX + 64)
/* ROOT/.ckptd.ID.drains: its head and a name per drain owed (queued, and one running). */
#define DRAINS_HEAD "ckptd drains 1\n"
#define DRAINS_FILE_MAX ((DRAIN_QUEUED + 1) * CK_NAME_MAX + sizeof DRAINS_HEAD)

typedef struct drec {
    struct drec *next;
    kd_drain_row row;
    bool offer;                    /* the policy's: drained only by its first file's node */
    bool waited;                   /* a save asked for level durable: its engine waits */
    bool policy;                   /* kept by --drain-every: a newer one supersedes it
                                    * while it is queued */
} drec;

/* A kept offer that another daemon drains: this one stands by (decision 0192). */
typedef struct watch {
    struct watch *next;
    char name[CK_NAME_MAX];
    uint64_t step;
    bool waited;                   /* a save asked for level durable: its engine waits */
    uint32_t n, at;                /* nodes[at] is the daemon expected to drain it */
    uint32_t me;                   /* nodes[me] is this daemon (n: not among them) */
    uint64_t instance, counter;    /* its heartbeat, as last read */
    bool read;                     /* instance holds its drainer's (read, or kept on disk) */
    bool counted;                  /* counter holds what was read since this start */
    double changed;                /* when its counter last moved (this host's clock) */
    double born;                   /* when it was made (this host's clock) */
    bool listed;                   /* its drainer listed it among the drains it owes */
    bool held;                     /* it holds its checkpoint's copies from retention */
    bool taking;                   /* this daemon takes the drain over (take_overs) */
    char nodes[][CK_NODE_ID_MAX];
} watch;

struct kd_drainer {
    kd_server *s;
    kd_tiers_opts o;
    kd_drain_bucket bucket;
    unsigned every;
    uint64_t offers;               /* kd_drain_offer calls, for --drain-every */
    pthread_t th, sb_th;           /* the drainer; the stand-by, which looks once a second */
    pthread_mutex_t mu;
    pthread_cond_t cv, sb_cv;      /* the drainer's work; a watch for the stand-by */
    /* Held while the drains owed are written, and while a round of the stand-by has the
     * watches off the list: a write never misses them. Taken before mu, never under. */
    pthread_mutex_t owe_mu;
    bool sb_started;
    drec *recs;                    /* in the order asked */
    watch *watches;                /* the drains this daemon stands by for, newest first */
    unsigned nwatch;
    bool fresh;                    /* a watch came: the stand-by looks at once */
    kd_drain_ctx *cur;             /* the drain running, for its bytes */
    bool stop;
    bool dirty;                    /* offers or watches changed since the file was written */
    char file[CK_NODE_ID_MAX + 16];/* .ckptd.ID.drain in the local tier */
    char pub[CK_NODE_ID_MAX + 16]; /* .ckptd.ID.drains in the durable root */
    char *published;               /* what it holds (owe_mu), not written again */
    size_t published_len;
};

static unsigned count(const struct kd_drainer *k, int state)
{
    unsigned n = 0;
    for (const drec *r = k->recs; r; r = r->next)
        n += state < 0 ? r->row.state >= KD_DRAIN_DONE : r->row.state == state;
    return n;
}

/* Whether a drain of name is still owed here (queued or running; under mu). */
static bool owes(const struct kd_drainer *k, const char *name)
{
    for (const drec *r = k->recs; r; r = r->next)
        if (r->row.state <= KD_DRAIN_RUNNING && !strcmp(r->row.name, name))
            return true;
    return false;
}

/* r is no longer owed (under mu, its state set): retention may take its copies. */
static void settled(struct kd_drainer *k, const drec *r)
{
    if (!owes(k, r->row.name))
        kd_retain_release(k->s, KD_PIN_OWED, r->row.name);
    k->dirty = true;
    pthread_cond_signal(&k->sb_cv);
}

/* Adds a queued drain of name (under mu), or finds the one already queued; NULL when
 * the queue is full. A waited drain goes before the queued drains no one waits for; a
 * policy drain supersedes the policy drains still queued. */
static drec *queue(struct kd_drainer *k, const char *name, uint64_t step, bool offer,
                   bool waited, bool policy)
{
    for (drec *q = k->recs; q; q = q->next)
        if (q->row.state == KD_DRAIN_QUEUED && !strcmp(q->row.name, name)) {
            q->offer &= offer;
            q->waited |= waited;
            q->policy &= policy;
            return q;
        }
    for (drec *q = k->recs; policy && q; q = q->next)
        if (q->row.state == KD_DRAIN_QUEUED && q->policy) {
            q->row.state = KD_DRAIN_DONE;
            snprintf(q->row.why, sizeof q->row.why, "not drained: superseded by %s, a newer "
                     "save, while it waited (the drains fall behind the saves: --drain-every "
                     "%u, --drain-rate)", name, k->every);
            kd_log(k->s, "drain of %s: %s", q->row.name, q->row.why);
            settled(k, q);
        }
    if (count(k, KD_DRAIN_QUEUED) >= DRAIN_QUEUED)
        return NULL;
    drec *r = calloc(1, sizeof *r), **pp = &k->recs;
    if (!r)
        return NULL;
    snprintf(r->row.name, sizeof r->row.name, "%s", name);
    r->row.step = step;
    r->row.state = KD_DRAIN_QUEUED;
    r->offer = offer;
    r->waited = waited;
    r->policy = policy;
    while (*pp && !(waited && (*pp)->row.state == KD_DRAIN_QUEUED && !(*pp)->waited))
        pp = &(*pp)->next;
    r->next = *pp;
    *pp = r;
    /* Its copies stay until it ends, and its watchers hear it is owed (the stand-by
     * thread publishes it at once, even while a long drain runs). */
    kd_retain_hold(k->s, KD_PIN_OWED, name);
    k->dirty = true;
    pthread_cond_signal(&k->cv);
    pthread_cond_signal(&k->sb_cv);
    return r;
}

/* Forgets the oldest finished drains past DRAIN_KEPT (under mu). */
static void trim(struct kd_drainer *k)
{
    unsigned over = count(k, -1);
    for (drec **pp = &k->recs; *pp && over > DRAIN_KEPT;) {
        if ((*pp)->row.state >= KD_DRAIN_DONE) {
            drec *r = *pp;
            *pp = r->next;
            free(r);
            over--;
        } else {
            pp = &(*pp)->next;
        }
    }
}

/* LOCAL/.ckptd.ID.drain (docs/FORMAT.md, "The drains a daemon owes"): "ckptd drain
 * 3\noffers N\n" (the policy's count, so that a restart keeps --drain-every's rhythm),
 * then "drain NAME" per drain owed (queued or running) and "standby NAME W I ID..." per
 * drain stood by for (W 1 when a save's engine waits for it; the ids: the daemons
 * ahead of this one in the save's order, the first the one expected to drain it, whose
 * heartbeat's instance is I, hex, 0 until read: a restart then still sees it replaced),
 * written whole by rename (after mu is let go: it fsyncs). */
static void owe(struct kd_drainer *k)
{
    char *buf = malloc(DRAIN_FILE_MAX), *pub = malloc(DRAINS_FILE_MAX);
    if (!buf || !pub) {
        free(buf);
        free(pub);
        return;
    }
    pthread_mutex_lock(&k->owe_mu);
    pthread_mutex_lock(&k->mu);
    k->dirty = false;
    size_t at = (size_t)snprintf(buf, DRAIN_FILE_MAX, "ckptd drain 3\noffers %llu\n",
                                 (unsigned long long)k->offers);
    size_t pat = (size_t)snprintf(pub, DRAINS_FILE_MAX, DRAINS_HEAD);
    for (drec *r = k->recs; r; r = r->next)
        if (r->row.state <= KD_DRAIN_RUNNING && at < DRAIN_FILE_MAX) {
            at += (size_t)snprintf(buf + at, DRAIN_FILE_MAX - at, "drain %s\n", r->row.name);
            if (pat < DRAINS_FILE_MAX)
                pat += (size_t)snprintf(pub + pat, DRAINS_FILE_MAX - pat, "%s\n", r->row.name);
        }
    for (watch *w = k->watches; w && at < DRAIN_FILE_MAX; w = w->next) {
        if (w->taking) {           /* owed here now, queued once the root is recovered */
            at += (size_t)snprintf(buf + at, DRAIN_FILE_MAX - at, "drain %s\n", w->name);
            if (pat < DRAINS_FILE_MAX)
                pat += (size_t)snprintf(pub + pat, DRAINS_FILE_MAX - pat, "%s\n", w->name);
            continue;
        }
        uint32_t from = w->me - w->at > AHEAD_KEPT ? w->me - AHEAD_KEPT : w->at;
        at += (size_t)snprintf(buf + at, DRAIN_FILE_MAX - at, "standby %s %d %llx", w->name,
                               w->waited, from == w->at && w->read
                               ? (unsigned long long)w->instance : 0ull);
        for (uint32_t i = from; i < w->me && at < DRAIN_FILE_MAX; i++)
            at += (size_t)snprintf(buf + at, DRAIN_FILE_MAX - at, " %s", w->nodes[i]);
        if (at < DRAIN_FILE_MAX)
            at += (size_t)snprintf(buf + at, DRAIN_FILE_MAX - at, "\n");
    }
    pthread_mutex_unlock(&k->mu);
    ck_err err = { 0 };
    if (at < DRAIN_FILE_MAX &&
        ck__meet_put(k->o.local, k->o.local, k->file, buf, at, true, &err) < 0)
        kd_log(k->s, "the drains owed (%s/%s) could not be written: %s; a restart forgets "
               "them", k->o.local, k->file, ck_err_msg(&err));
    /* The daemons standing by read the names; written only when they changed (a file of
     * the shared root, fsynced). */
    if (pat < DRAINS_FILE_MAX && (pat != k->published_len || memcmp(pub, k->published, pat))) {
        if (ck__meet_put(k->o.durable, k->o.durable, k->pub, pub, pat, true, &err) < 0) {
            kd_log(k->s, "the drains owed, for the daemons that stand by (%s/%s), could not "
                   "be written: %s", k->o.durable, k->pub, ck_err_msg(&err));
        } else {
            free(k->published);
            k->published = pub;
            k->published_len = pat;
            pub = NULL;
        }
    }
    pthread_mutex_unlock(&k->owe_mu);
    free(buf);
    free(pub);
}

/* A small file beneath root, whole (at most max bytes; -EFBIG for more). */
static int slurp(const char *root, const char *file, char *buf, size_t max, size_t *n)
{
    int rootfd = ck__root_open(root, NULL);
    if (rootfd < 0)
        return rootfd;
    int r = ck__read_small(rootfd, file, buf, max, n);
    close(rootfd);
    return r;
}

/* Whether daemon id lists name among the drains it owes (its ROOT/.ckptd.ID.drains): 1
 * yes, 0 no, negative when that cannot be told (no such file, not one). */
static int listed_by(const struct kd_drainer *k, const char *id, const char *name)
{
    char file[CK_NODE_ID_MAX + 16], buf[DRAINS_FILE_MAX];
    size_t n, len = strlen(name);
    if (ck__name_engine(id, CK_ENGINE_DRAINS, file, sizeof file) < 0)
        return -ENAMETOOLONG;
    int r = slurp(k->o.durable, file, buf, sizeof buf, &n);
    if (r < 0)
        return r;
    if (n < strlen(DRAINS_HEAD) || memcmp(buf, DRAINS_HEAD, strlen(DRAINS_HEAD)) ||
        buf[n - 1] != '\n')
        return -EINVAL;
    for (const char *line = buf + strlen(DRAINS_HEAD); line < buf + n;) {
        const char *end = memchr(line, '\n', (size_t)(buf + n - line));
        if ((size_t)(end - line) == len && !memcmp(line, name, len))
            return 1;
        line = end + 1;
    }
    return 0;
}

/* The policy's offers are drained by the daemon whose own copy holds the checkpoint's
 * first data file: true when that is this one; else why in why. */
static bool ours(const struct kd_drainer *k, const char *name, char *why, size_t len)
{
    ck_ckpt *ck;
    ck_err err = { 0 };
    if (ck_open(k->o.local, name, &ck, &err) < 0) {
        snprintf(why, len, "left to another node: no copy of its own here (%s)",
                 ck_err_msg(&err));
        return false;
    }
    bool first = ck_get_info(ck)->n_files == 0 || ck_file_held(ck, 0);
    if (!first)
        snprintf(why, len, "left to the node whose own copy holds %s", ck_file_get(ck, 0)->name);
    ck_close(ck);
    return first;
}

static bool stopping(void *arg)
{
    struct kd_drainer *k = arg;
    pthread_mutex_lock(&k->mu);
    bool stop = k->stop;
    pthread_mutex_unlock(&k->mu);
    return stop;
}

static void run(struct kd_drainer *k, drec *r)
{
    kd_drain_ctx d = { .o = k->o, .name = r->row.name, .bucket = &k->bucket,
                       .stop = stopping, .stop_arg = k };
    char why[CK_ERR_MSG_MAX] = "";
    ck_err err = { 0 };
    uint64_t step = r->row.step;
    int x;
    bool theirs = r->offer && !ours(k, r->row.name, why, sizeof why);
    if (theirs) {
        x = 1;
    } else {
        pthread_mutex_lock(&k->mu);
        k->cur = &d;
        pthread_mutex_unlock(&k->mu);
        kd_log(k->s, "drain of %s to the durable root: started", r->row.name);
        double t0 = kd_now();
        x = kd_drain_copy(&d, &step, &err);
        double dt = kd_now() - t0;
        if (x == 0)
            kd_log(k->s, "drain of %s: committed in the durable root, %llu bytes in %.2f s "
                   "(%.1f MB/s, --drain-rate %llu B/s)", r->row.name,
                   (unsigned long long)d.total, dt, dt > 0 ? (double)d.total / dt / 1e6 : 0.0,
                   (unsigned long long)k->bucket.rate);
        else if (x == 1)
            snprintf(why, sizeof why, "the durable root holds it already");
        else if (x != -ECANCELED)
            kd_log(k->s, "drain of %s failed: %s; the durable root holds nothing of it",
                   r->row.name, ck_err_msg(&err));
    }
    pthread_mutex_lock(&k->mu);
    k->cur = NULL;
    r->row.step = step;
    r->row.done = d.done;
    r->row.total = d.total;
    if (x == -ECANCELED) {
        r->row.state = KD_DRAIN_QUEUED;     /* still owed: resumed at the next start */
    } else {
        r->row.state = x < 0 ? KD_DRAIN_FAILED : KD_DRAIN_DONE;
        snprintf(r->row.why, sizeof r->row.why, "%s", x < 0 ? ck_err_msg(&err) : why);
        if (x == 1)
            kd_log(k->s, "drain of %s: nothing to do: %s", r->row.name, why);
        settled(k, r);
    }
    /* The node that drained it tells the save engine waiting (trim may free r). */
    char name[CK_NAME_MAX + 1];
    bool tell = r->waited && !theirs;
    snprintf(name, sizeof name, "%s", r->row.name);
    trim(k);
    pthread_mutex_unlock(&k->mu);
    if (tell)
        ck__saver_drained(k->s->saver, name, x < 0 ? x : 0, ck_err_msg(&err));
    /* Its hold is let go (settled): the pass sees what the durable root now holds, and
     * that the local copies are owed nothing. */
    if (x == 0)
        kd_retain_after_commit(k->s, name);
}

/* ---- standing by ---- */

/* Which watches hold their checkpoint's copies (under mu): a save's waited drain's
 * always; of the policy's, for each drainer, the oldest (the one it runs, drains going
 * in order) and the newest (the one that waits: a newer one supersedes it), so that a
 * drainer whose list cannot be read (its durable root full or read-only) never makes
 * this node keep more than two beyond --keep-local for it. The others are let go by
 * their drainer's list first, normally. */
static void hold_ends(struct kd_drainer *k)
{
    for (watch *w = k->watches; w; w = w->next) {
        bool newer = false, older = false, after = false;    /* the list: newest first */
        for (watch *v = k->watches; v; v = v->next) {
            if (v == w)
                after = true;
            else if (!v->waited && !strcmp(v->nodes[v->at], w->nodes[w->at]))
                *(after ? &older : &newer) = true;
        }
        bool hold = w->waited || !newer || !older;
        if (hold && !w->held)
            kd_retain_hold(k->s, KD_PIN_WATCHED, w->name);
        else if (!hold && w->held)
            kd_retain_release(k->s, KD_PIN_WATCHED, w->name);
        w->held = hold;
    }
}

/* Why nodes[at] of w is taken for lost (its heartbeat stood still for --dead-after, or
 * another instance beats: a replacement, whose disk may not hold the drains owed), or
 * NULL. */
static const char *lost(const struct kd_drainer *k, watch *w, double t)
{
    uint64_t inst, cnt;
    int r = ck__beat_read(k->o.durable, w->nodes[w->at], &inst, &cnt);
    if (r == 0 && w->read && inst != w->instance)
        return "was restarted (another instance beats; the drains it owed may be lost "
               "with its disk)";
    if (r == 0 && (!w->counted || cnt != w->counter)) {
        w->read = w->counted = true;
        w->instance = inst;
        w->counter = cnt;
        w->changed = t;
        return NULL;
    }
    return t - w->changed > k->s->o.dead_after ? "stopped beating" : NULL;
}

/* One look at w: false when it ends (the durable root holds the checkpoint, this node
 * has no copy of it any more, or its drainer owes it no longer); when this node is to
 * take the drain over, w->taking. */
static bool stand_by(struct kd_drainer *k, watch *w, double t)
{
    /* Drained meanwhile, or this node has no copy of it any more (removed by hand, or by
     * retention when this watch held nothing: hold_ends). */
    if (ck__copy_whole_in(k->o.local, k->o.durable, w->name) != 0)
        return false;
    const char *why = lost(k, w, t);
    if (!why) {
        /* A live drainer that listed the drain and lists it no more, or never listed it
         * while every node of the save heard of it (--part-timeout), owes it no longer:
         * its drain failed or was superseded there (its log says which), and this
         * node's copies are let go. Unreadable, the list says nothing. */
        int listed = listed_by(k, w->nodes[w->at], w->name);
        if (listed == 1)
            w->listed = true;
        if (listed != 0 || (!w->listed && t - w->born <= k->s->o.part_timeout))
            return true;
        kd_log(k->s, "drain of %s: ckptd %s owes it no longer (its drain failed or was "
               "superseded there); no longer stood by for", w->name, w->nodes[w->at]);
        return false;
    }
    char from[CK_NODE_ID_MAX];
    snprintf(from, sizeof from, "%s", w->nodes[w->at]);
    w->at++;
    w->read = w->counted = false;
    w->changed = t;
    bool mine = w->at < w->n && !strcmp(w->nodes[w->at], k->s->o.id);
    kd_log(k->s, "drain of %s: ckptd %s, which was to drain it, %s (heartbeat %s/.ckptd.%s.beat, "
           "--dead-after %u s); %s%s", w->name, from, why, k->o.durable, from,
           k->s->o.dead_after, w->at >= w->n ? "no daemon of the save is left to take it over"
           : mine ? "this daemon takes it over" : "next to take it over: ckptd ",
           w->at < w->n && !mine ? w->nodes[w->at] : "");
    w->taking = mine;
    return w->at < w->n;
}

/* The drains this daemon takes over (w->taking), after a round: the durable root
 * recovered first, without owe_mu (it may take a while: the drains owed are written
 * meanwhile, the watch still among them), then the watch made a queued drain at once,
 * under owe_mu, so that the drains owed always hold the one or the other. */
static void take_overs(struct kd_drainer *k)
{
    for (;;) {
        char name[CK_NAME_MAX];
        uint64_t step = 0;
        bool waited = false, found = false;
        pthread_mutex_lock(&k->mu);
        for (watch *w = k->watches; w && !found; w = w->next)
            if (w->taking) {
                snprintf(name, sizeof name, "%s", w->name);
                step = w->step;
                waited = w->waited;
                found = true;
            }
        pthread_mutex_unlock(&k->mu);
        if (!found)
            return;
        /* What the lost drain left in the durable root is a dead writer's: removed now,
         * as a daemon's start would (a writer that lives keeps its directory: it holds
         * its lock), rather than a checkpoint's worth of debris until one starts. */
        size_t removed = 0;
        ck_err err = { 0 };
        if (ck_root_recover(k->o.durable, &removed, kd_log_cb, k->s, &err) < 0)
            kd_log(k->s, "drain of %s: recovering the durable root first: %s", name,
                   ck_err_msg(&err));
        else if (removed)
            kd_log(k->s, "drain of %s: removed %zu incomplete save(s) of dead writers from %s",
                   name, removed, k->o.durable);
        pthread_mutex_lock(&k->owe_mu);
        pthread_mutex_lock(&k->mu);
        bool ok = queue(k, name, step, false, waited, false) != NULL;
        for (watch **pp = &k->watches; *pp; pp = &(*pp)->next)
            if (!strcmp((*pp)->name, name)) {
                watch *w = *pp;
                *pp = w->next;
                if (w->held)
                    kd_retain_release(k->s, KD_PIN_WATCHED, w->name);
                free(w);
                k->nwatch--;
                break;
            }
        hold_ends(k);
        k->dirty = true;
        pthread_mutex_unlock(&k->mu);
        pthread_mutex_unlock(&k->owe_mu);
        if (!ok)
            kd_log(k->s, "drain of %s: not queued: %u drains wait already (or out of memory)",
                   name, DRAIN_QUEUED);
    }
}

/* A look at every drain stood by for (I/O: without mu; a watch added meanwhile waits
 * for the next round; owe_mu held, so the drains owed are not written meanwhile). */
static void stand_by_all(struct kd_drainer *k)
{
    pthread_mutex_lock(&k->owe_mu);
    pthread_mutex_lock(&k->mu);
    watch *list = k->watches;
    k->watches = NULL;
    pthread_mutex_unlock(&k->mu);
    double t = kd_now();
    watch *keep = NULL, **tail = &keep;
    unsigned ended = 0, learned = 0;
    while (list) {
        watch *w = list;
        list = w->next;
        w->next = NULL;
        bool knew = w->read;
        if (stand_by(k, w, t)) {
            learned += !knew && w->read;
            *tail = w;
            tail = &w->next;
        } else {
            if (w->held)
                kd_retain_release(k->s, KD_PIN_WATCHED, w->name);
            free(w);
            ended++;
        }
    }
    /* Those added meanwhile are newer: they go first, as the list is kept. */
    pthread_mutex_lock(&k->mu);
    watch **end = &k->watches;
    while (*end)
        end = &(*end)->next;
    *end = keep;
    k->nwatch -= ended;
    hold_ends(k);
    k->dirty |= ended > 0 || learned > 0;      /* the file says which instance drains */
    pthread_mutex_unlock(&k->mu);
    pthread_mutex_unlock(&k->owe_mu);
}

/* The stand-by: a thread of its own, so that a daemon busy with a long drain (paced by
 * --drain-rate, minutes) still sees within a second that a drain it stands by for lost
 * its node. It writes the drains owed when a watch came or went, or a drain was queued
 * or ended: at once, so that the daemons standing by see what is owed even while a
 * long drain runs. */
static void *stand_by_thread(void *arg)
{
    struct kd_drainer *k = arg;
    pthread_mutex_lock(&k->mu);
    while (!k->stop) {
        if (!k->watches && k->dirty) {
            pthread_mutex_unlock(&k->mu);
            owe(k);
            pthread_mutex_lock(&k->mu);
            continue;
        }
        if (!k->watches) {
            pthread_cond_wait(&k->sb_cv, &k->mu);
            continue;
        }
        /* A new watch is looked at at once: its drainer's instance is then known before
         * a replacement could beat in its place. */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += 1;
        while (!k->stop && !k->fresh && !k->dirty &&
               pthread_cond_timedwait(&k->sb_cv, &k->mu, &ts) != ETIMEDOUT)
            ;
        if (k->stop)
            break;
        k->fresh = false;
        pthread_mutex_unlock(&k->mu);
        stand_by_all(k);
        take_overs(k);
        pthread_mutex_lock(&k->mu);
        if (k->dirty) {
            pthread_mutex_unlock(&k->mu);
            owe(k);
            pthread_mutex_lock(&k->mu);
        }
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

/* Stands by for name (under mu), whose drain nodes[0] is to make; the oldest watch
 * goes when DRAIN_QUEUED are kept. The watch, or NULL (one of name was kept already, or
 * out of memory). */
static watch *watch_add(struct kd_drainer *k, const char *name, uint64_t step, bool waited,
                      const char (*nodes)[CK_NODE_ID_MAX], uint32_t n)
{
    for (watch *w = k->watches; w; w = w->next)
        if (!strcmp(w->name, name))
            return NULL;
    watch *w = calloc(1, sizeof *w + (size_t)n * CK_NODE_ID_MAX);
    if (!w) {
        kd_log(k->s, "drain of %s: out of memory standing by for ckptd %s", name, nodes[0]);
        return NULL;
    }
    snprintf(w->name, sizeof w->name, "%s", name);
    w->step = step;
    w->waited = waited;
    w->n = n;
    w->changed = w->born = kd_now();
    memcpy(w->nodes, nodes, (size_t)n * CK_NODE_ID_MAX);
    for (w->me = 1; w->me < n && strcmp(nodes[w->me], k->s->o.id); w->me++)
        ;
    w->next = k->watches;
    k->watches = w;
    if (++k->nwatch > DRAIN_QUEUED) {
        watch **pp = &k->watches;
        while ((*pp)->next)
            pp = &(*pp)->next;
        kd_log(k->s, "drain of %s: no longer stood by for (%u drains stood by for)",
               (*pp)->name, DRAIN_QUEUED);
        if ((*pp)->held)
            kd_retain_release(k->s, KD_PIN_WATCHED, (*pp)->name);
        free(*pp);
        *pp = NULL;
        k->nwatch--;
    }
    hold_ends(k);
    k->dirty = k->fresh = true;    /* written by the drainer when idle, else the stand-by */
    pthread_cond_signal(&k->cv);
    pthread_cond_signal(&k->sb_cv);
    return w;
}

/* One line of a version-3 file (owed, under mu): "drain NAME" or "standby NAME W I
 * ID...". A line that is not one is said, and skipped. */
static void owed_line(struct kd_drainer *k, char *line)
{
    ck_err err = { 0 };
    char *save = NULL, *word = strtok_r(line, " ", &save);
    char *name = word ? strtok_r(NULL, " ", &save) : NULL;
    if (!word || !name || ck_name_check("checkpoint", name, &err) < 0) {
        kd_log(k->s, "%s/%s: a line that names no checkpoint%s%s; skipped", k->o.local,
               k->file, err.code ? ": " : "", err.code ? ck_err_msg(&err) : "");
        return;
    }
    if (!strcmp(word, "drain") && !strtok_r(NULL, " ", &save)) {
        if (queue(k, name, 0, false, false, false))
            kd_log(k->s, "drain of %s: owed since before the daemon started; from the start",
                   name);
        return;
    }
    char *waited = strtok_r(NULL, " ", &save), *inst = strtok_r(NULL, " ", &save), *end;
    char (*ids)[CK_NODE_ID_MAX] = calloc(AHEAD_KEPT + 1, CK_NODE_ID_MAX);
    uint32_t n = 0;
    unsigned long long instance = 0;
    bool ok = ids && !strcmp(word, "standby") && waited && (!strcmp(waited, "0") ||
                                                            !strcmp(waited, "1")) &&
              inst && strspn(inst, "0123456789abcdef") == strlen(inst) && strlen(inst) <= 16 &&
              (instance = strtoull(inst, &end, 16), !*end);
    for (char *id; ok && (id = strtok_r(NULL, " ", &save));)
        ok = n < AHEAD_KEPT && ck__node_id_check(id, NULL) == 0 && strcmp(id, k->s->o.id) &&
             snprintf(ids[n++], CK_NODE_ID_MAX, "%s", id) > 0;
    if (ok && n) {
        snprintf(ids[n++], CK_NODE_ID_MAX, "%s", k->s->o.id);
        watch *w = watch_add(k, name, 0, waited[0] == '1',
                             (const char (*)[CK_NODE_ID_MAX])ids, n);
        if (w && instance) {       /* a replacement beating now is seen as one */
            w->instance = instance;
            w->read = true;
        }
        kd_log(k->s, "drain of %s: stood by for since before the daemon started: ckptd %s "
               "is to drain it", name, ids[0]);
    } else {
        kd_log(k->s, "%s/%s: the line of %s is neither 'drain NAME' nor 'standby NAME 0|1 "
               "INSTANCE ID...' (a hex instance, the ids of 1 to %u other daemons); skipped",
               k->o.local, k->file, name, AHEAD_KEPT);
    }
    free(ids);
}

/* The drains a daemon of this id owed, and stood by for, when it stopped or died. A
 * file that is not one is said, and left for the operator: nothing in it is drained. */
static void owed(struct kd_drainer *k)
{
    char *buf = malloc(DRAIN_FILE_MAX + 1);
    size_t n = 0;
    int r = buf ? slurp(k->o.local, k->file, buf, DRAIN_FILE_MAX, &n) : -ENOMEM;
    bool big = r == -EFBIG;
    if (r == -ENOENT) {
        free(buf);
        return;
    }
    if (r < 0 && !big) {
        kd_log(k->s, "%s/%s: %s; no drain resumes", k->o.local, k->file, ck__why(r));
        free(buf);
        return;
    }
    /* Version 1 (revision 6) had no count: the policy counts from 0 again. Versions 1
     * and 2 name a drain owed a line; 3 says what each line is. */
    unsigned long long offers = 0;
    int head = 0, version = 0;
    if (!big && n > 0 && buf[n - 1] == '\n' && !memchr(buf, '\0', n)) {
        buf[n] = '\0';
        char *end = NULL;
        if (!strncmp(buf, "ckptd drain 1\n", 14))
            head = 14, version = 1;
        else if ((!strncmp(buf, "ckptd drain 2\noffers ", 21) ||
                  !strncmp(buf, "ckptd drain 3\noffers ", 21)) &&
                 buf[21] >= '0' && buf[21] <= '9' &&
                 (offers = strtoull(buf + 21, &end, 10), *end == '\n'))
            head = (int)(end + 1 - buf), version = buf[12] - '0';
    }
    if (!head) {
        kd_log(k->s, "%s/%s: not a 'ckptd drain' file%s; no drain resumes", k->o.local,
               k->file, big ? " (too large)" : "");
        free(buf);
        return;
    }
    pthread_mutex_lock(&k->mu);
    k->offers = offers;
    for (char *line = buf + head, *end; *line; line = end + 1) {
        end = strchr(line, '\n');
        *end = '\0';
        ck_err err = { 0 };
        if (version == 3)
            owed_line(k, line);
        else if (ck_name_check("checkpoint", line, &err) < 0)
            kd_log(k->s, "%s/%s: %s; skipped", k->o.local, k->file, ck_err_msg(&err));
        else if (queue(k, line, 0, false, false, false))
            kd_log(k->s, "drain of %s: owed since before the daemon started; from the start",
                   line);
    }
    pthread_mutex_unlock(&k->mu);
    free(buf);
}

static void *drainer(void *arg)
{
    struct kd_drainer *k = arg;
    pthread_mutex_lock(&k->mu);
    while (!k->stop) {
        drec *r = k->recs;
        while (r && r->row.state != KD_DRAIN_QUEUED)
            r = r->next;
        if (!r && k->dirty) {
            pthread_mutex_unlock(&k->mu);
            owe(k);
            pthread_mutex_lock(&k->mu);
            continue;
        }
        if (!r) {
            pthread_cond_wait(&k->cv, &k->mu);
            continue;
        }
        r->row.state = KD_DRAIN_RUNNING;
        pthread_mutex_unlock(&k->mu);
        owe(k);
        run(k, r);
        owe(k);
        pthread_mutex_lock(&k->mu);
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

static void free_recs(struct kd_drainer *k)
{
    while (k->recs) {
        drec *next = k->recs->next;
        free(k->recs);
        k->recs = next;
    }
    while (k->watches) {
        watch *next = k->watches->next;
        free(k->watches);
        k->watches = next;
    }
}

int kd_drain_start(kd_server *s, ck_err *err)
{
    if (!s->local_root[0])
        return 0;
    struct kd_drainer *k = calloc(1, sizeof *k);
    if (!k)
        return ck_err_set(err, -ENOMEM, "out of memory");
    k->s = s;
    k->every = s->o.drain_every;
    k->bucket.rate = s->o.drain_rate;
    k->o = (kd_tiers_opts){ .local = s->local_root, .durable = s->root, .id = s->o.id,
                            .key = &s->peer_key,
                            .fetching = &s->fetching,
                            .timeout = s->o.peer_timeout, .checkers = s->o.peer_checkers,
                            .log = kd_log_cb, .log_arg = s };
    ck__name_engine(s->o.id, CK_ENGINE_DRAIN, k->file, sizeof k->file);
    ck__name_engine(s->o.id, CK_ENGINE_DRAINS, k->pub, sizeof k->pub);
    pthread_mutex_init(&k->mu, NULL);
    pthread_mutex_init(&k->owe_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);   /* the clock of the standing by */
    pthread_cond_init(&k->cv, &ca);
    pthread_cond_init(&k->sb_cv, &ca);
    pthread_condattr_destroy(&ca);
    owed(k);
    s->drainer = k;
    int r = pthread_create(&k->th, NULL, drainer, k);
    if (r) {
        free_recs(k);
        free(k);
        s->drainer = NULL;
        return ck_err_set(err, -r, "starting the drainer thread: %s", strerror(r));
    }
    if ((r = pthread_create(&k->sb_th, NULL, stand_by_thread, k))) {
        kd_drain_stop(s);
        return ck_err_set(err, -r, "starting the drain's stand-by thread: %s", strerror(r));
    }
    k->sb_started = true;
    return 0;
}

void kd_drain_stop(kd_server *s)
{
    struct kd_drainer *k = s->drainer;
    if (!k)
        return;
    pthread_mutex_lock(&k->mu);
    k->stop = true;
    pthread_cond_signal(&k->cv);
    pthread_cond_signal(&k->sb_cv);
    pthread_mutex_unlock(&k->mu);
    pthread_join(k->th, NULL);
    if (k->sb_started)
        pthread_join(k->sb_th, NULL);
    if (k->dirty)
        owe(k);                    /* the last offers' count, the last watches */
    free_recs(k);
    free(k->published);
    pthread_mutex_destroy(&k->mu);
    pthread_mutex_destroy(&k->owe_mu);
    pthread_cond_destroy(&k->cv);
    pthread_cond_destroy(&k->sb_cv);
    free(k);
    s->drainer = NULL;
}

/* Queues a drain of name (under nothing); a kept offer or a save asked durable that
 * names the save's daemons (nodes, n) is drained here when this daemon is the first of
 * them, and else stood by for; false when it cannot be queued. */
static bool ask(struct kd_drainer *k, const char *name, uint64_t step, bool offer,
                bool waited, const char (*nodes)[CK_NODE_ID_MAX], uint32_t n)
{
    pthread_mutex_lock(&k->mu);
    bool counted = offer && !waited && k->every;
    bool keep = !offer || waited || (counted && ++k->offers % k->every == 0);
    /* The drainer thread writes the count down (the loop never waits on a disk). */
    if (counted) {
        k->dirty = true;
        pthread_cond_signal(&k->cv);
    }
    bool first = n && !strcmp(nodes[0], k->s->o.id), ok = true;
    bool member = false;
    for (uint32_t i = 1; i < n && !member; i++)
        member = !strcmp(nodes[i], k->s->o.id);
    if (keep && offer && member)
        watch_add(k, name, step, waited, nodes, n);
    else if (keep)
        ok = queue(k, name, step, offer && !first, waited, counted) != NULL;
    pthread_mutex_unlock(&k->mu);
    if (!ok)
        kd_log(k->s, "drain of %s: not queued: %u drains wait already (or out of memory)",
               name, DRAIN_QUEUED);
    return ok;
}

void kd_drain_offer(kd_server *s, const char *name, uint64_t step,
                    const char (*nodes)[CK_NODE_ID_MAX], uint32_t n_nodes)
{
    if (s->drainer)
        ask(s->drainer, name, step, true, false, nodes, n_nodes);
}

int kd_drain_wait(kd_server *s, const char *name, const char (*nodes)[CK_NODE_ID_MAX],
                  uint32_t n_nodes)
{
    return s->drainer && ask(s->drainer, name, 0, true, true, nodes, n_nodes) ? 0 : -EAGAIN;
}

void kd_drain_request(kd_server *s, kd_client *c, const char *name, bool offer)
{
    struct kd_drainer *k = s->drainer;
    if (!k) {
        kd_send_error(s, c, name, -ENOTSUP, "this ckptd has no local tier to drain from "
                      "(--local-root)");
        return;
    }
    if (name[0] && !ask(k, name, 0, offer, false, NULL, 0)) {
        kd_send_error(s, c, name, -EAGAIN, "the drain queue is full; ask again later");
        return;
    }
    pthread_mutex_lock(&k->mu);
    unsigned n = k->nwatch, cap;
    for (drec *r = k->recs; r; r = r->next)
        n++;
    kd_drain_row *rows = calloc(n ? n : 1, sizeof *rows);
    cap = n;
    n = 0;
    for (drec *r = k->recs; rows && r; r = r->next) {
        rows[n] = r->row;
        if (r->row.state == KD_DRAIN_RUNNING && k->cur) {
            rows[n].done = k->cur->done;
            rows[n].total = k->cur->total;
        }
        n++;
    }
    /* The drains stood by for (those in a round of the stand-by are off the list for
     * its moment, and left out). */
    for (watch *w = k->watches; rows && w && n < cap; w = w->next) {
        kd_drain_row *x = &rows[n++];
        snprintf(x->name, sizeof x->name, "%s", w->name);
        x->state = w->taking ? KD_DRAIN_QUEUED : KD_DRAIN_STANDBY;
        uint32_t after = w->taking ? 0 : w->me - w->at - 1;
        if (w->taking)
            snprintf(x->why, sizeof x->why, "taken over: the durable root is recovered first");
        else if (after)
            snprintf(x->why, sizeof x->why, "ckptd %s drains it; this daemon takes the drain "
                     "over if it and the %u daemon(s) after it in the save's order are lost",
                     w->nodes[w->at], after);
        else
            snprintf(x->why, sizeof x->why, "ckptd %s drains it; this daemon takes the drain "
                     "over if it is lost", w->nodes[w->at]);
    }
    pthread_mutex_unlock(&k->mu);
    if (!rows) {
        kd_send_error(s, c, name, -ENOMEM, "out of memory");
        return;
    }
    ck__wbuf w = { 0 };
    ck__proto_start(&w, CK_MSG_DRAIN_OK);
    kd_pw_drains(&w, &(kd_drain_rows){ .rows = rows, .n = n, .every = k->every,
                                        .rate = k->bucket.rate });
    kd_send(s, c, &w);
    ck__wbuf_free(&w);
    free(rows);
}
