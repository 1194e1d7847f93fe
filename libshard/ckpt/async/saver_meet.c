/* saver_meet.c - the roles of the engines that share a save, and their meeting (see
 * async/saver.h and async/saver_int.h): the coordinator makes the save's directory and
 * the meeting, members find it and write their ranks' part records there, both watch
 * each other's heartbeats and the part timeout, and the meeting thread runs every
 * shared save's round. Each role is a table of what it does at each step (sv_role, at
 * the end), which the engine calls without asking which role it is; a save of one
 * engine is the coordinator's, with a meeting of one and no files. The files are
 * save/meet.h's; the save's states are saver_state.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sys/stat.h>

#include "async/saver_int.h"
#include "ck/catalog.h"
#include "io/rootfs.h"
#include "save/part.h"

typedef struct scan {
    ck__saver *sv;
    sv_ckpt *c;
    char from[CK_NODE_ID_MAX];     /* the daemon whose file is being read */
    ck_err err;
} scan;

/* The engine id of c, added when new; instance 0 and rank UINT64_MAX: not known yet. */
static peer *peer_add(sv_ckpt *c, const char *id, uint64_t instance, uint64_t rank)
{
    peer *q = ck__sv_peer(c, id);
    if (q) {
        /* A coordinator's round lists the joins, then the parts: a member that wrote
         * both in between (a small save) is met first by its part record, which says no
         * instance. Its join, read in the next round, says it. */
        if (!q->instance)
            q->instance = instance;
        if (q->rank == UINT64_MAX)
            q->rank = rank;
        if (rank == 0)
            q->least = 0;
        return q;
    }
    peer *n = realloc(c->peers, (c->npeers + 1) * sizeof *n);
    if (!n)
        return NULL;
    c->peers = n;
    q = &n[c->npeers++];
    /* A join of rank 0 is the coordinator's, whose least rank that is. */
    *q = (peer){ .instance = instance, .rank = rank, .least = rank == 0 ? 0 : UINT64_MAX,
                 .first = UINT64_MAX, .changed = ck__sv_now() };
    snprintf(q->id, sizeof q->id, "%s", id);
    return q;
}

/* Why a watched daemon is dead, or NULL: its heartbeat names another instance than its
 * join did (it restarted and forgot the save; an engine whose join is not read yet is
 * not judged so), or its counter stood still for --dead-after seconds measured on this
 * host's monotonic clock (no clocks are compared across hosts). */
static const char *peer_dead(ck__saver *sv, peer *q, double t)
{
    uint64_t inst, cnt;
    int r = ck__beat_read(sv->root, q->id, &inst, &cnt);
    if (r == 0 && q->instance && inst != q->instance)
        return "was restarted (another instance beats) and lost the save";
    if (r == 0 && cnt != q->counter) {
        q->counter = cnt;
        q->changed = t;
        return NULL;
    }
    return t - q->changed > sv->o.dead_after ? "stopped beating" : NULL;
}

static int on_join(void *arg, const char *file, const uint8_t *buf, size_t len)
{
    scan *x = arg;
    uint64_t inst, rank;
    char id[CK_NODE_ID_MAX];
    ck__meet_file_of(file, id);
    /* A settling member reads the joins too (ck__sv_settle_watch): not its own. */
    if (strcmp(id, x->sv->o.node_id) && ck__node_id_check(id, NULL) == 0 &&
        ck__meet_join_decode(buf, len, &inst, &rank) == 0 && !peer_add(x->c, id, inst, rank))
        return ck_err_set(&x->err, -ENOMEM, "out of memory");
    return 0;
}

static int on_share(void *arg, const char *file, const uint8_t *buf, size_t len)
{
    scan *x = arg;
    uint64_t inst, least;
    char id[CK_NODE_ID_MAX];
    ck__meet_file_of(file, id);
    peer *q = strcmp(id, x->sv->o.node_id) ? ck__sv_peer(x->c, id) : NULL;
    if (q && ck__meet_join_decode(buf, len, &inst, &least) == 0)
        q->least = least;
    return 0;
}

/* A collecting save of a tiered engine that replicates beside the write: a member
 * reads the joins until it knows every engine (the coordinator reads them each round
 * anyway); then, once this engine's own ranks are all in (a member writes its
 * share.ID then, in ck__sv_tier_early), every engine reads the others' share records
 * until it knows each one's least rank, and weighs the early clique. */
static void early(ck__saver *sv, sv_ckpt *c)
{
    if (c->early || !sv->o.replicate_begin || !sv->o.local_root || c->role->waits)
        return;
    scan x = { .sv = sv, .c = c };
    if (!c->role->coordinates && c->npeers + 1 < c->nodes &&
        ck__meet_each(sv->root, c->meet, CK_MEET_JOIN, on_join, &x, &x.err) < 0)
        return;
    if (ck__sv_tier_early_ready(sv, c) && c->npeers + 1 == c->nodes &&
        ck__meet_each(sv->root, c->meet, CK_MEET_SHARE, on_share, &x, &x.err) < 0)
        return;
    ck__sv_tier_early(sv, c);
}

void ck__sv_settle_watch(ck__saver *sv, sv_ckpt *c, double t)
{
    if (c->nodes < 2 || !c->meet[0] || t < c->next_watch)
        return;
    c->next_watch = t + sv->beat_every;
    scan x = { .sv = sv, .c = c };
    /* A member knows the coordinator; the others' joins are all in once the tier file
     * is (it follows every part), so they are read until every engine is known. The
     * meeting gone, nothing waits for their records any more (ck__sv_tier_tick). */
    if (!c->role->coordinates && c->npeers + 1 < c->nodes &&
        ck__meet_each(sv->root, c->meet, CK_MEET_JOIN, on_join, &x, &x.err) < 0)
        return;
    /* Only an engine that still owes a record is watched: a heartbeat read per engine
     * and beat while the records come, none once they are in. */
    uint8_t owed = SEEN_COPY | SEEN_REPL | (c->role->coordinates ? SEEN_SETTLED : 0);
    for (unsigned i = 0; i < c->npeers; i++) {
        peer *q = &c->peers[i];
        if (q->dead || (q->seen & owed) == owed || !(q->dead = peer_dead(sv, q, t)))
            continue;
        char beat[CK_NODE_ID_MAX + 16];
        ck__name_engine(q->id, CK_ENGINE_BEAT, beat, sizeof beat);
        ck__sv_log(sv, "checkpoint %s: engine %s %s (heartbeat %s/%s, --dead-after %u s): "
                   "what it owes the save's settling is taken as never coming", c->name, q->id,
                   q->dead, sv->root, beat, sv->o.dead_after);
    }
}

static int on_failed(void *arg, const char *file, const uint8_t *buf, size_t len)
{
    scan *x = arg;
    char id[CK_NODE_ID_MAX];
    ck__meet_file_of(file, id);
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
        r = ck__save_adopt(c->s, rec, len, &x->err);
    peer *q = r == 0 ? peer_add(c, x->from, 0, UINT64_MAX) : NULL;
    if (r == 0 && !q)
        r = ck_err_set(&x->err, -ENOMEM, "out of memory");
    if (r < 0)
        return r;
    if (pr.rank < q->first)
        q->first = pr.rank;     /* the node order of a tiered save (saver_tier.c) */
    c->parts[pr.rank].state = P_REMOTE;
    c->remote++;
    return 0;
}

static int on_parts(void *arg, const char *file, const uint8_t *buf, size_t len)
{
    scan *x = arg;
    ck__meet_file_of(file, x->from);
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
    int r = ck__meet_each(sv->root, c->meet, CK_MEET_JOIN, on_join, &x, &x.err);
    if (r == 0)
        r = ck__meet_each(sv->root, c->meet, CK_MEET_FAILED, on_failed, &x, &x.err);
    if (r == 0)
        r = ck__meet_each(sv->root, c->meet, CK_MEET_PART, on_parts, &x, &x.err);
    char msg[CK_ERR_MSG_MAX + 512], miss[256], who[256];
    if (r != 0) {
        snprintf(msg, sizeof msg, "checkpoint %s: %s", c->name, ck_err_msg(&x.err));
        c->heard = strncmp(ck_err_msg(&x.err), "engine ", 7) == 0;
        ck__sv_fail(sv, c, r < 0 ? r : -EIO, msg);
        return;
    }
    bool complete = c->durable + c->remote == c->world;
    /* Heartbeats change once per beat_every: reading them every poll would cost the
     * coordinator of N nodes N reads per poll for nothing. */
    bool watch = t >= c->next_watch;
    if (watch)
        c->next_watch = t + sv->beat_every;
    /* A dead member fails a save still incomplete, whichever parts are missing: its
     * parts come in batches (part.ID.SEQ), none of which says it was its last, and a
     * member of a tiered save commits its own copy. */
    for (unsigned i = 0; i < c->npeers && !complete && watch; i++) {
        const char *why = peer_dead(sv, &c->peers[i], t);
        if (!why)
            continue;
        char beat[CK_NODE_ID_MAX + 16];
        missing(c, miss, sizeof miss);
        ck__name_engine(c->peers[i].id, CK_ENGINE_BEAT, beat, sizeof beat);
        snprintf(msg, sizeof msg, "checkpoint %s: engine %s %s (heartbeat %s/%s, --dead-after "
                 "%u s); the save cannot complete without it (the parts of ranks %s have not "
                 "arrived)", c->name, c->peers[i].id, why,
                 sv->root, beat, sv->o.dead_after, miss);
        ck__sv_fail(sv, c, -EHOSTDOWN, msg);
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
        ck__sv_fail(sv, c, -ETIMEDOUT, msg);
        return;
    }
    c->role->commit(sv, c);
}

/* lstat of rel beneath root, never through a link (io/rootfs.h): 0 or -errno. */
static int stat_in(const char *root, const char *rel, struct stat *st)
{
    int rootfd = ck__root_open(root, NULL);
    if (rootfd < 0)
        return rootfd;
    int r = rel ? ck__statat(rootfd, rel, st) : -EINVAL;
    close(rootfd);
    return r;
}

/* Beneath the durable root, where the meetings are. */
static int root_stat(const ck__saver *sv, const char *rel, struct stat *st)
{
    return stat_in(sv->root, rel, st);
}

/* Beneath the root the save's files go to: its checkpoint, its pending directory. */
static int data_stat(const ck__saver *sv, const char *rel, struct stat *st)
{
    return stat_in(ck__sv_data_root(sv), rel, st);
}

/* What a member's look for its meeting found: its own job's meeting, or else the first
 * open meeting of another job not known to be debris. */
typedef struct found {
    const sv_ckpt *c;
    bool other;
    char token[CK_TOKEN_MAX], other_token[CK_TOKEN_MAX];
    ck__meet_plan plan, other_plan;
} found;

static bool is_stale(const sv_ckpt *c, const char *token)
{
    for (unsigned i = 0; i < c->nstale; i++)
        if (!strcmp(c->stale[i], token))
            return true;
    return false;
}

static int on_open(void *arg, const char *token, const ck__meet_plan *plan)
{
    found *f = arg;
    if (!strcmp(plan->job, f->c->job_hex)) {
        f->plan = *plan;
        snprintf(f->token, sizeof f->token, "%s", token);
        return 1;
    }
    if (!f->other && !is_stale(f->c, token)) {
        f->other = true;
        f->other_plan = *plan;
        snprintf(f->other_token, sizeof f->other_token, "%s", token);
    }
    return 0;
}

/* Whether the open meeting of another job found for c's name is that job's live save:
 * the name's save lock is held, and its holder's record names that job (format/owner.h).
 * Otherwise the meeting is debris (its owner died, or it committed and has not removed
 * the meeting yet, or the name is another writer's now): noted, so that the lock is
 * looked at once per such meeting (a look takes the lock shared for an instant). */
static bool other_job_saves(ck__saver *sv, sv_ckpt *c, const found *f)
{
    char rel[PATH_MAX], who[CK_LOCK_WHO_MAX], job[CK_JOB_HEX_MAX];
    int held = -EINVAL;
    int rootfd = ck__root_open(sv->root, NULL);
    if (rootfd >= 0 && ck__save_lock_rel(c->name, rel, NULL) == 0)
        held = ck__lock_held(rootfd, rel, who, sizeof who);
    if (rootfd >= 0)
        close(rootfd);
    if (held == 1 && ck__lock_job(who, job) && !strcmp(job, f->other_plan.job))
        return true;
    char (*n)[CK_TOKEN_MAX] = realloc(c->stale, (c->nstale + 1) * sizeof *n);
    if (n) {
        c->stale = n;
        snprintf(n[c->nstale++], CK_TOKEN_MAX, "%s", f->other_token);
    }
    return false;
}

/* A member without a meeting yet looks for the one the daemon of rank 0 of its job
 * opened. A meeting of another job is never joined: while that job saves the name,
 * this job's rank 0 cannot (the other holds the name's lock), so this save fails at
 * once, and nothing of it reaches the other's meeting or directory. */
static void tick_find(ck__saver *sv, sv_ckpt *c, double t)
{
    found f = { .c = c };
    ck_err err = { 0 };
    char msg[CK_ERR_MSG_MAX + 256];
    int r = ck__meet_each_open(sv->root, c->name, on_open, &f, &err);
    ck__meet_plan plan = f.plan;
    struct stat st;
    if (r == 0 && f.other && other_job_saves(sv, c, &f)) {
        snprintf(msg, sizeof msg, "checkpoint %s is being saved by another job (job %s, "
                 "coordinator %s); this job's save of it fails", c->name, f.other_plan.job,
                 f.other_plan.coord);
        ck__sv_fail(sv, c, -EBUSY, msg);
        return;
    }
    /* The one refusal of rank 0 that leaves a trace here: no meeting will come. */
    if (r == 0 && data_stat(sv, c->name, &st) == 0) {
        snprintf(msg, sizeof msg, "checkpoint %s: %s: a checkpoint named %s already exists",
                 c->name, ck__sv_data_root(sv), c->name);
        ck__sv_fail(sv, c, -EEXIST, msg);
        return;
    }
    if (r > 0)
        snprintf(c->token, sizeof c->token, "%s", f.token);
    /* The meeting of a coordinator that died since (another instance beats now) is
     * debris its recovery is about to remove, not the save to join. */
    uint64_t inst, cnt;
    if (r > 0 && ck__beat_read(sv->root, plan.coord, &inst, &cnt) == 0 && inst != plan.instance)
        r = 0;
    if (r == 0 && t > c->deadline) {
        snprintf(msg, sizeof msg, "checkpoint %s: no daemon serving rank 0 opened the save "
                 "within --part-timeout %u s (is rank 0's ckptd running on the same root?)",
                 c->name, sv->o.part_timeout);
        ck__sv_fail(sv, c, -ETIMEDOUT, msg);
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
    char pend[PATH_MAX];
    ck__name_save(c->name, c->token, pend, sizeof pend);
    /* The directory's identity, which the commit's rename keeps: reached beneath the
     * root, never through a link, and a directory. */
    if (r > 0 && (r = ck__save_join(c->s, c->token, any, &err)) == 0 &&
        ((r = data_stat(sv, pend, &st)) < 0 || !S_ISDIR(st.st_mode)))
        r = ck_err_set(&err, r < 0 ? r : -ENOTDIR, "%s/%s: %s", ck__sv_data_root(sv), pend,
                       r < 0 ? ck__why(r) : "not a directory");
    if (r >= 0) {
        c->dev = st.st_dev;
        c->ino = st.st_ino;
        ck__meet_dir(sv->root, c->name, c->token, c->meet);
        c->role = &ck__sv_member;
        if (!peer_add(c, plan.coord, plan.instance, 0))
            r = ck_err_set(&err, -ENOMEM, "out of memory");
    }
    if (r >= 0)
        r = ck__meet_join(sv->root, c->meet, CK_MEET_JOIN, sv->o.node_id, sv->o.instance, any,
                          &err);
    if (r >= 0)
        r = ck__sv_resolve(sv, c, &err);
    if (r < 0) {
        snprintf(msg, sizeof msg, "checkpoint %s: joining the save: %s", c->name,
                 ck_err_msg(&err));
        ck__sv_fail(sv, c, r, msg);
        return;
    }
    ck__sv_log(sv, "checkpoint %s: joined daemon %s's save %s", c->name, plan.coord, c->token);
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
    ck__name_meet_file(CK_MEET_PART, sv->o.node_id, c->seq++, name, sizeof name);
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
        ck__sv_fail(sv, c, r, msg);
    } else if (c->state == C_FAILED) {
        ck__sv_finish_failed(sv, c);
    }
}

/* Whether ROOT/NAME is the pending directory this member wrote into (the rename keeps
 * its inode): a directory reached beneath the root, never a link to it, which anyone
 * who may write in the root could plant to fake the commit. */
static bool committed_as(ck__saver *sv, const sv_ckpt *c)
{
    struct stat st;
    return !sv->o.local_root && root_stat(sv, c->name, &st) == 0 && S_ISDIR(st.st_mode) && st.st_dev == c->dev &&
           st.st_ino == c->ino;
}

/* A member: the failure another daemon recorded (its code, its reason in err), or the
 * meeting gone without a commit; 0 when there is neither. */
static int heard_failure(ck__saver *sv, sv_ckpt *c, ck_err *err)
{
    scan x = { .sv = sv, .c = c };
    struct stat st;
    int r = ck__meet_each(sv->root, c->meet, CK_MEET_FAILED, on_failed, &x, &x.err);
    if (r < 0 && root_stat(sv, ck__rel(sv->root, c->meet), &st) < 0 && !committed_as(sv, c))
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
    if (sv->o.local_root && ck__sv_tier_member(sv, c))
        return;
    char msg[CK_ERR_MSG_MAX + 512];
    if (!c->writes && committed_as(sv, c)) {
        ck__sv_log(sv, "checkpoint %s committed by daemon %s: %llu ranks written here, %.3f s",
              c->name, c->peers[0].id, (unsigned long long)c->durable, ck__sv_now() - c->t0);
        ck__sv_emit(sv, CK_SAVER_COMMITTED, c, 0);
        ck__sv_unlink(sv, c);
        ck_save_abort(c->s);        /* shared: frees only; the directory is committed */
        ck__sv_free_parts(c, true);
        return;
    }
    ck_err err = { 0 };
    int r = heard_failure(sv, c, &err);
    if (r != 0) {
        if (committed_as(sv, c))
            return;                 /* committed since the first look: the next round */
        snprintf(msg, sizeof msg, "checkpoint %s: %s", c->name, ck_err_msg(&err));
        c->heard = true;
        ck__sv_fail(sv, c, r, msg);
        return;
    }
    const char *why = NULL;
    if (t >= c->next_watch) {
        c->next_watch = t + sv->beat_every;
        why = peer_dead(sv, &c->peers[0], t);
    }
    if (why) {
        char beat[CK_NODE_ID_MAX + 16];
        ck__name_engine(c->peers[0].id, CK_ENGINE_BEAT, beat, sizeof beat);
        snprintf(msg, sizeof msg, "checkpoint %s: the coordinating engine %s %s (heartbeat "
                 "%s/%s, --dead-after %u s); the save cannot commit", c->name, c->peers[0].id,
                 why, sv->root, beat, sv->o.dead_after);
        ck__sv_fail(sv, c, -EHOSTDOWN, msg);
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
            ck__sv_log(sv, "checkpoint %s: failed, and its writes have not returned %u s later "
                  "(the storage under %s hangs?): their staging is given up", c->name,
                  sv->o.dead_after, sv->root);
            ck__sv_emit(sv, CK_SAVER_STUCK, c, 0);
        }
}

void *ck__sv_meet_thread(void *arg)
{
    ck__saver *sv = arg;
    uint64_t counter = 0;
    double next_beat = 0, every = sv->beat_every;
    pthread_mutex_lock(&sv->mu);
    while (!sv->stop) {
        double t = ck__sv_now();
        if (t >= next_beat) {
            pthread_mutex_unlock(&sv->mu);
            ck_err err = { 0 };
            if (ck__beat_write(sv->root, sv->o.node_id, sv->o.instance, ++counter, &err) < 0)
                ck__sv_log(sv, "heartbeat: %s", ck_err_msg(&err));
            pthread_mutex_lock(&sv->mu);
            next_beat = t + every;
        }
        for (sv_ckpt *c = sv->list; c; c = c->next) {
            int state = c->state;
            if (state != C_COLLECTING && state != C_SETTLING)
                continue;
            sv_ckpt *before = sv->list;
            if (state == C_SETTLING) {
                ck__sv_settle_watch(sv, c, t);
                ck__sv_tier_tick(sv, c, t);
            } else {
                c->role->tick(sv, c, t);
            }
            /* A save that ended may have freed c, or taken others out of the list (and
             * the lock was let go): the rest wait for the next round. c is looked up by
             * address, since reading its name could read freed memory. */
            if (sv->list != before || !ck__sv_listed(sv, c) || c->state != state)
                break;
            if (state == C_COLLECTING)
                early(sv, c);
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

/* ---- the roles ---- */

/* This engine serves rank 0 of a save of several engines: it makes the save's directory
 * (holding its lock) and the meeting the others look for, and takes the blobs of the
 * parts staged while it looked for a meeting itself into its manifest. */
static int coordinate(ck__saver *sv, sv_ckpt *c, ck_err *err)
{
    if (!sv->o.node_id)
        return ck_err_set(err, -EINVAL, "checkpoint %s: declared for %u daemons, but this "
                          "engine serves one node only (run ckptd on each node)", c->name,
                          c->nodes);
    c->role = &ck__sv_coordinator;
    int r = sv->o.local_root ? ck__sv_tier_lock(sv, c, err) : 0;
    if (r == 0)
        r = ck__save_share(c->s, c->token, err);
    ck__meet_plan plan = { .step = c->step, .world = c->world, .nodes = c->nodes,
                           .instance = sv->o.instance };
    snprintf(plan.coord, sizeof plan.coord, "%s", sv->o.node_id);
    snprintf(plan.job, sizeof plan.job, "%s", c->job_hex);
    if (r == 0 && (r = ck__meet_create(sv->root, c->name, c->token, &plan, err)) == 0)
        ck__meet_dir(sv->root, c->name, c->token, c->meet);
    for (uint64_t k = 0; r == 0 && k < c->world; k++) {
        part *p = &c->parts[k];
        const uint8_t *b = p->blob_bytes;
        for (uint32_t i = 0; b && r == 0 && i < p->nblobs; i++) {
            r = ck_save_blob(c->s, p->blobs[i].name, b, p->blobs[i].len, err);
            b += p->blobs[i].len;
        }
        free(p->blob_bytes);
        p->blob_bytes = NULL;
    }
    if (r == 0)
        r = ck__sv_resolve(sv, c, err);
    if (r == 0)
        ck__sv_log(sv, "checkpoint %s: coordinating %u daemons in %s", c->name, c->nodes, c->meet);
    return r;
}

/* A save that one engine serves has a meeting of one: its directory, and no files. */
static int coord_open(ck__saver *sv, sv_ckpt *c, ck_err *err)
{
    return c->nodes == 1 ? ck__save_prepare(c->s, err) : coordinate(sv, c, err);
}

/* A finder learns of rank 0's refusal only through the meeting, later: a name that is
 * taken already is refused here and now, as rank 0's engine refuses it (under the
 * root, never through a link; and without a look at the name's lock, which would take
 * it for an instant, just when rank 0's engine may be taking it). */
static int finder_open(ck__saver *sv, sv_ckpt *c, ck_err *err)
{
    struct stat st;
    return data_stat(sv, c->name, &st) == 0
         ? ck_err_set(err, -EEXIST, "checkpoint %s: %s: a checkpoint named %s already exists",
                      c->name, ck__sv_data_root(sv), c->name)
         : 0;
}

static int coord_rank0(ck__saver *sv, sv_ckpt *c, ck_err *err)
{
    (void)sv, (void)c, (void)err;
    return 0;
}

static int member_rank0(ck__saver *sv, sv_ckpt *c, ck_err *err)
{
    return ck_err_set(err, -EINVAL, "checkpoint %s: rank 0 came to daemon %s, but daemon %s "
                      "coordinates the save", c->name, sv->o.node_id, c->peers[0].id);
}

/* Rank 0 came: this engine coordinates, and if it cannot, its own parts fail with the
 * save (the members hear of it from no meeting). */
static int finder_rank0(ck__saver *sv, sv_ckpt *c, ck_err *err)
{
    int r = coordinate(sv, c, err);
    if (r < 0) {
        char msg[CK_ERR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", ck_err_msg(err));
        ck__sv_fail(sv, c, r, msg);
    }
    return r;
}

static int coord_blobs(sv_ckpt *c, part *p, const uint8_t *blob, uint64_t len, ck_err *err)
{
    (void)len;
    int r = 0;
    for (uint32_t i = 0; i < p->nblobs && r == 0; i++) {
        r = ck_save_blob(c->s, p->blobs[i].name, blob, p->blobs[i].len, err);
        blob += p->blobs[i].len;
    }
    return r;
}

/* The staging goes back at DURABLE; the blobs travel later, in the part record. */
static int member_blobs(sv_ckpt *c, part *p, const uint8_t *blob, uint64_t len, ck_err *err)
{
    if (!len)
        return 0;
    if (!(p->blob_bytes = malloc(len)))
        return ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory", c->name);
    memcpy(p->blob_bytes, blob, len);
    return 0;
}

static int coord_written(ck__saver *sv, sv_ckpt *c, uint64_t rank, int r, ck_err *err)
{
    (void)sv, (void)c, (void)rank, (void)err;
    return r;
}

/* A member's write fails when the coordinator gave the save up and removed its
 * directory: then its reason is the one to tell. A written rank is proved to the
 * coordinator by its part record, which the meeting thread writes with the others ready
 * by then. */
static int member_written(ck__saver *sv, sv_ckpt *c, uint64_t rank, int r, ck_err *err)
{
    if (r < 0) {
        int why = heard_failure(sv, c, err);
        c->heard |= why != 0;
        return why ? why : r;
    }
    if (c->state != C_COLLECTING)
        return 0;
    part *p = &c->parts[rank];
    ck_err ok = { 0 };
    r = ck__save_part(c->s, rank, &ok, &p->rec, &p->rec_len, err);
    pthread_cond_signal(&sv->meet_cv);
    return r;
}

/* The coordinator completes the save without any client once its own ranks are staged
 * and rank 0 asked: the others' parts come as records, and of one engine every rank is
 * its own. A member does once the ranks it serves are staged (the commit is rank 0's). */
static bool coord_committable(const sv_ckpt *c)
{
    return c->commit_requested && c->staged == c->joined &&
           (c->nodes > 1 || c->joined == c->world);
}

static bool member_committable(const sv_ckpt *c)
{
    return c->staged == c->joined;
}

static void coord_commit(ck__saver *sv, sv_ckpt *c)
{
    if (c->state != C_COLLECTING || !c->commit_requested || c->durable + c->remote != c->world)
        return;
    c->state = C_COMMITTING;
    if (ck__sv_push(sv, c, 0, JOB_COMMIT) < 0) {
        c->state = C_COLLECTING;
        ck__sv_fail(sv, c, -ENOMEM, "out of memory queueing the commit");
    }
}

static void member_commit(ck__saver *sv, sv_ckpt *c)
{
    (void)sv, (void)c;
}

/* The other engines of a shared save hear of this engine's failure through its
 * failed.ID record (one it heard from the meeting it does not tell again). */
static void member_failed(ck__saver *sv, sv_ckpt *c)
{
    ck_err err = { 0 };
    if (c->meet[0] && !c->heard &&
        ck__meet_fail(sv->root, c->meet, sv->o.node_id, c->fail_code, c->fail_msg, &err) < 0)
        ck__sv_log(sv, "checkpoint %s: telling the other daemons of the failure: %s", c->name,
                   ck_err_msg(&err));
}

/* The coordinator then removes the meeting, after a grace period in which the others
 * can read why (they poll every poll_ms). */
static void coord_failed(ck__saver *sv, sv_ckpt *c)
{
    member_failed(sv, c);
    grave *g = c->meet[0] ? calloc(1, sizeof *g) : NULL;
    if (!g)
        return;
    snprintf(g->dir, sizeof g->dir, "%s", c->meet);
    g->when = ck__sv_now() + 2.0 + 4.0 * sv->o.poll_ms / 1000.0;
    g->next = sv->graves;
    sv->graves = g;
}

static void coord_tick(ck__saver *sv, sv_ckpt *c, double t)
{
    if (c->nodes > 1)
        tick_coord(sv, c, t);
}

const sv_role ck__sv_coordinator = {
    .open = coord_open, .rank0 = coord_rank0, .blobs = coord_blobs, .waits = false,
    .coordinates = true,
    .written = coord_written, .committable = coord_committable, .commit = coord_commit,
    .failed = coord_failed, .abort = ck__save_discard, .tick = coord_tick,
};

const sv_role ck__sv_member = {
    .open = finder_open, .rank0 = member_rank0, .blobs = member_blobs, .waits = false,
    .written = member_written, .committable = member_committable, .commit = member_commit,
    .failed = member_failed, .abort = ck_save_abort, .tick = tick_member,
};

const sv_role ck__sv_finder = {
    .open = finder_open, .rank0 = finder_rank0, .blobs = member_blobs, .waits = true,
    .written = member_written, .committable = member_committable, .commit = member_commit,
    .failed = member_failed, .abort = ck_save_abort, .tick = tick_find,
};
