/* saver_tier.c - tiered saves (docs/FORMAT.md, "Local copies of a save"; decisions
 * 0174 and 0175): the engines of a save write their ranks' files into their own local
 * tiers, meet on the durable root as every shared save does (saver_meet.c), and then:
 *
 *   coordinator  builds the manifest once, commits its own copy (its ranks' files, the
 *                whole manifest, NAME/copy) by rename in its local tier, and publishes
 *                the manifest with the order of the nodes in the meeting (tier);
 *   each member  takes that manifest byte for byte and commits its own copy the same
 *                way; every engine says so with copy.ID;
 *   each engine  sends its copy to the other members of its clique (opts.replicate,
 *                ckptd's peer service) and records the outcome in repl.ID.
 *
 * Every engine watches the meeting (SETTLING) and tells its clients COMMITTED once the
 * level they asked for holds: LOCAL when every engine's copy is committed, REPLICATED
 * when also every replication ended well, DURABLE when the drain of the save, which
 * every engine asks its daemon for once any engine's ranks want durable and the
 * replication ended, committed it in the durable root (drain.ID, decision 0176); a
 * replication or drain that fails or outlives the deadline leaves the save committed
 * at the level reached, said in the note, never FAILED. A save
 * of one engine has no meeting: its copy is complete, and the clique rule allows no
 * replica (F = 1). The training stall is untouched: all of this runs after the part is
 * durable, on the engine's threads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "async/saver_int.h"
#include "format/owner.h"
#include "io/rootfs.h"
#include "ops/copy.h"

#define TIER_MAGIC "libshard tier 1\n"

static uint32_t factor(const ck__saver *sv)
{
    return sv->o.replicas ? sv->o.replicas : 1;
}

static uint32_t jump(const ck__saver *sv)
{
    return sv->o.jump ? sv->o.jump : 1;
}

int ck__sv_tier_lock(ck__saver *sv, sv_ckpt *c, ck_err *err)
{
    char rel[PATH_MAX], what[CK_NAME_MAX + 64], who[CK_LOCK_WHO_MAX], theirs[CK_JOB_HEX_MAX];
    int r = ck__save_lock_rel(c->name, rel, err);
    if (r == 0 && (c->meet_rootfd = ck__root_open(sv->root, err)) < 0)
        r = c->meet_rootfd;
    /* The durable root's .pending holds only meetings of tiered saves: made here when
     * missing (a link there is refused by the lock's open, which follows none). */
    if (r == 0 && (r = ck__mkdirat(c->meet_rootfd, CK_PENDING, 0755)) == -EEXIST)
        r = 0;
    if (r < 0 && !err->code)
        ck_err_set(err, r, "%s/%s: %s", sv->root, CK_PENDING, ck__why(r));
    snprintf(what, sizeof what, "checkpoint %s is being saved by another writer", c->name);
    if (r == 0)
        r = ck__lock_take(c->meet_rootfd, sv->root, rel, what, c->job_hex, who, &c->meet_lock,
                          err);
    if (r == -EBUSY && ck__lock_job(who, theirs) && strcmp(theirs, c->job_hex))
        ck_err_set(err, r, "checkpoint %s is being saved by another job (held by %s, lock "
                   "%s/%s); this job's save of it fails", c->name, who, sv->root, rel);
    return r;
}

const char *ck__sv_data_root(const ck__saver *sv)
{
    return sv->o.local_root ? sv->o.local_root : sv->root;
}

int ck__clique(uint32_t i, uint32_t n, uint32_t f, uint32_t j, uint32_t *out, ck_err *err)
{
    f = f ? f : 1;
    j = j ? j : 1;
    uint64_t b = (uint64_t)f * j;
    if (n == 0 || n % b)
        return ck_err_set(err, -EINVAL, "%u node(s) cannot form cliques of --replicas %u with "
                          "--jump %u: the node count must be a multiple of replicas x jump = "
                          "%llu (decision 0174)", n, f, j, (unsigned long long)b);
    if (i >= n)
        return ck_err_set(err, -EINVAL, "node %u of %u", i, n);
    uint32_t base = (uint32_t)(i / b * b), k = 0;
    for (uint32_t m = 0; m < f; m++) {
        uint32_t x = base + i % j + m * j;
        if (x != i && out)
            out[k++] = x;
    }
    return 0;
}

int ck__sv_tier_check(const ck__saver *sv, const ck__begin *b, ck_err *err)
{
    if (!sv->o.local_root)
        return 0;
    ck_err why = { 0 };
    int r = ck__clique(0, b->nodes > 1 ? b->nodes : 1, factor(sv), jump(sv), NULL, &why);
    return r < 0 ? ck_err_set(err, r, "checkpoint %s: %s", b->name, ck_err_msg(&why)) : 0;
}

/* ---- the tier file: node order, F and J, and the manifest ---- */

/* The engines of c in the order of the first rank each serves: this one (the
 * coordinator: the least rank it wrote) and the others (the least of their records). */
static char (*node_order(ck__saver *sv, const sv_ckpt *c, uint32_t *n))[CK_NODE_ID_MAX]
{
    uint32_t k = c->npeers + 1;
    uint64_t *first = calloc(k, sizeof *first);
    char (*ids)[CK_NODE_ID_MAX] = calloc(k, sizeof *ids);
    if (!first || !ids) {
        free(first);
        free(ids);
        return NULL;
    }
    first[0] = UINT64_MAX;
    for (uint64_t r = 0; r < c->world && first[0] == UINT64_MAX; r++)
        if (c->parts[r].state == P_DURABLE)
            first[0] = r;
    snprintf(ids[0], CK_NODE_ID_MAX, "%s", sv->o.node_id);
    for (uint32_t i = 1; i < k; i++) {
        first[i] = c->peers[i - 1].first;
        snprintf(ids[i], CK_NODE_ID_MAX, "%s", c->peers[i - 1].id);
    }
    for (uint32_t i = 1; i < k; i++)          /* a handful of nodes: insertion sort */
        for (uint32_t m = i; m > 0 && first[m] < first[m - 1]; m--) {
            uint64_t f = first[m];
            first[m] = first[m - 1];
            first[m - 1] = f;
            char id[CK_NODE_ID_MAX];
            memcpy(id, ids[m], sizeof id);
            memcpy(ids[m], ids[m - 1], sizeof id);
            memcpy(ids[m - 1], id, sizeof id);
        }
    free(first);
    *n = k;
    return ids;
}

static uint8_t *tier_encode(const ck__saver *sv, char (*ids)[CK_NODE_ID_MAX], uint32_t n,
                            const void *man, size_t mlen, size_t *len)
{
    size_t cap = 128 + (size_t)n * CK_NODE_ID_MAX + mlen;
    uint8_t *b = malloc(cap);
    if (!b)
        return NULL;
    size_t k = (size_t)snprintf((char *)b, cap, TIER_MAGIC "replicas %u\njump %u\nnodes %u\n",
                                factor(sv), jump(sv), n);
    for (uint32_t i = 0; i < n; i++)
        k += (size_t)snprintf((char *)b + k, cap - k, "%s\n", ids[i]);
    k += (size_t)snprintf((char *)b + k, cap - k, "manifest %zu\n", mlen);
    memcpy(b + k, man, mlen);
    *len = k + mlen;
    return b;
}

typedef struct tier {
    uint32_t f, j, n;
    char (*ids)[CK_NODE_ID_MAX];
    const uint8_t *man;
    size_t mlen;
} tier;

/* One line of the tier file at *pos, without its newline, into out (cap bytes). */
static int line(const uint8_t *b, size_t len, size_t *pos, char *out, size_t cap)
{
    const uint8_t *nl = memchr(b + *pos, '\n', len - *pos);
    size_t k = nl ? (size_t)(nl - (b + *pos)) : 0;
    if (!nl || k >= cap)
        return -EBADMSG;
    memcpy(out, b + *pos, k);
    out[k] = 0;
    *pos += k + 1;
    return 0;
}

/* Every field checked: a tier file that is not one whole is -EBADMSG, naming it. */
static int tier_decode(const uint8_t *b, size_t len, tier *t, ck_err *err)
{
    char l[128];
    size_t pos = strlen(TIER_MAGIC), mlen = 0;
    memset(t, 0, sizeof *t);
    int r = len >= pos && !memcmp(b, TIER_MAGIC, pos) ? 0 : -EBADMSG;
    if (r == 0 && (line(b, len, &pos, l, sizeof l) < 0 || sscanf(l, "replicas %u", &t->f) != 1 ||
                   line(b, len, &pos, l, sizeof l) < 0 || sscanf(l, "jump %u", &t->j) != 1 ||
                   line(b, len, &pos, l, sizeof l) < 0 || sscanf(l, "nodes %u", &t->n) != 1 ||
                   t->n == 0 || t->n > 1u << 20))
        r = -EBADMSG;
    if (r == 0 && !(t->ids = calloc(t->n, sizeof *t->ids)))
        return ck_err_set(err, -ENOMEM, "out of memory");
    for (uint32_t i = 0; r == 0 && i < t->n; i++)
        if (line(b, len, &pos, t->ids[i], CK_NODE_ID_MAX) < 0 ||
            ck__node_id_check(t->ids[i], NULL) < 0)
            r = -EBADMSG;
    if (r == 0 && (line(b, len, &pos, l, sizeof l) < 0 || sscanf(l, "manifest %zu", &mlen) != 1 ||
                   mlen != len - pos || mlen == 0))
        r = -EBADMSG;
    if (r < 0) {
        free(t->ids);
        t->ids = NULL;
        return ck_err_set(err, r, "the meeting's tier file is malformed (%zu bytes)", len);
    }
    t->man = b + pos;
    t->mlen = mlen;
    return 0;
}

/* ---- commit and replication ---- */

/* The clique of this engine among the nodes of t (the others' ids, into c). */
static int clique_of(ck__saver *sv, sv_ckpt *c, const tier *t, ck_err *err)
{
    uint32_t self = t->n;
    for (uint32_t i = 0; i < t->n; i++)
        if (!strcmp(t->ids[i], sv->o.node_id))
            self = i;
    if (self == t->n)
        return ck_err_set(err, -EBADMSG, "the coordinator's node order does not name engine %s",
                          sv->o.node_id);
    if (t->f != factor(sv) || t->j != jump(sv))
        return ck_err_set(err, -EINVAL, "the coordinator replicates with --replicas %u --jump "
                          "%u, engine %s with --replicas %u --jump %u (every ckptd of a job "
                          "must agree)", t->f, t->j, sv->o.node_id, factor(sv), jump(sv));
    uint32_t *idx = calloc(t->f, sizeof *idx);
    c->clique = calloc(t->f, sizeof *c->clique);
    if (!idx || !c->clique) {
        free(idx);
        return ck_err_set(err, -ENOMEM, "out of memory");
    }
    int r = ck__clique(self, t->n, t->f, t->j, idx, err);
    for (uint32_t k = 0; r == 0 && k + 1 < t->f; k++)
        snprintf(c->clique[c->nclique++], CK_NODE_ID_MAX, "%s", t->ids[idx[k]]);
    free(idx);
    return r;
}

/* ---- replication beside the local write (decision 0204) ---- */

typedef struct early_node {
    uint64_t rank;
    const char *id;
} early_node;

static int by_rank(const void *a, const void *b)
{
    uint64_t x = ((const early_node *)a)->rank, y = ((const early_node *)b)->rank;
    return x < y ? -1 : x > y;
}

bool ck__sv_tier_early_ready(const ck__saver *sv, const sv_ckpt *c)
{
    /* The share a uniform job gives each node: a job whose nodes serve unequal shares
     * replicates at the commit. */
    return sv->o.replicate_begin && c->nodes > 1 && factor(sv) > 1 &&
           c->level >= CK_LEVEL_REPLICATED && c->state == C_COLLECTING && !c->role->waits &&
           c->meet[0] && c->world % c->nodes == 0 && c->joined == c->world / c->nodes;
}

/* This engine's least rank: of its own ranks, not those adopted from part records. */
static uint64_t least_own(const sv_ckpt *c)
{
    for (uint64_t q = 0; q < c->world; q++)
        if (c->parts[q].state != P_NONE && c->parts[q].state != P_REMOTE)
            return q;
    return UINT64_MAX;
}

void ck__sv_tier_early(ck__saver *sv, sv_ckpt *c)
{
    if (c->early || !ck__sv_tier_early_ready(sv, c))
        return;
    /* The nodes' order is the order of their least ranks (decision 0174), which a join
     * does not say (it names the rank that came first): a member says its least once
     * all its ranks are in, and the clique waits for every member's. */
    if (!c->role->coordinates && !c->shared) {
        ck_err err = { 0 };
        c->shared = true;
        if (ck__meet_join(sv->root, c->meet, CK_MEET_SHARE, sv->o.node_id, sv->o.instance,
                          least_own(c), &err) < 0) {
            ck__sv_log(sv, "checkpoint %s: its replicas go after the commit: %s", c->name,
                       ck_err_msg(&err));
            c->early = true;
            return;
        }
    }
    if (c->npeers + 1 != c->nodes)
        return;
    for (unsigned i = 0; i < c->npeers; i++)
        if (c->peers[i].least == UINT64_MAX)
            return;
    c->early = true;
    uint32_t n = c->nodes, self = 0, k = 0, nf = 0;
    early_node *v = calloc(n, sizeof *v);
    uint32_t *idx = calloc(factor(sv), sizeof *idx);
    const char **peers = calloc(factor(sv), sizeof *peers);
    ck_file *files = calloc(c->joined, sizeof *files);
    int r = v && idx && peers && files ? 0 : -ENOMEM;
    for (uint32_t i = 0; r == 0 && i < n; i++)
        v[i] = i == 0 ? (early_node){ .rank = least_own(c), .id = sv->o.node_id }
                      : (early_node){ .rank = c->peers[i - 1].least, .id = c->peers[i - 1].id };
    if (r == 0)
        qsort(v, n, sizeof *v, by_rank);
    while (r == 0 && strcmp(v[self].id, sv->o.node_id))
        self++;
    ck_err err = { 0 };
    if (r == 0)
        r = ck__clique(self, n, factor(sv), jump(sv), idx, &err);
    for (uint32_t m = 0; r == 0 && m + 1 < factor(sv); m++)
        peers[k++] = v[idx[m]].id;
    /* This engine's ranks: not those adopted from the others' part records. */
    for (uint64_t q = 0; r == 0 && q < c->world && nf < c->joined; q++)
        if (c->parts[q].state != P_NONE && c->parts[q].state != P_REMOTE &&
            ck__save_rank_file(c->s, q, &files[nf]))
            nf++;
    if (r == 0 && nf) {
        sv->o.replicate_begin(sv->o.arg, c->name, ck__save_dir(c->s), peers, k, files, nf,
                              ck__save_block_size(c->s));
        ck__sv_log(sv, "checkpoint %s: its %u data file(s) here go to %u peer(s) of its clique "
                   "as they are written", c->name, nf, k);
    }
    free(v);
    free(idx);
    free(peers);
    free(files);
}

/* Commits this engine's copy: the coordinator's from its own manifest, which it then
 * publishes, a member's from the published one. Runs without the engine's lock. */
static int commit_copy(ck__saver *sv, sv_ckpt *c, ck_save *s, const bool *mine, bool coord,
                       const uint8_t *tf, size_t tf_len, char (*ids)[CK_NODE_ID_MAX],
                       uint32_t n, ck_err *err)
{
    void *man = NULL;
    size_t mlen = 0;
    tier t = { 0 };
    int r = 0;
    if (coord) {
        r = ck__save_commit_copy(s, sv->o.node_id, mine, NULL, 0, &man, &mlen, err);
        uint8_t *b = NULL;
        size_t blen = 0;
        if (r == 0 && c->nodes > 1 && !(b = tier_encode(sv, ids, n, man, mlen, &blen)))
            r = ck_err_set(err, -ENOMEM, "out of memory");
        if (r == 0 && c->nodes > 1)
            r = ck__meet_put(sv->root, c->meet, ck__meet_prefix(CK_MEET_TIER), b, blen, true, err);
        if (r == 0 && c->nodes > 1)
            r = tier_decode(b, blen, &t, err);
        free(b);
    } else {
        r = tier_decode(tf, tf_len, &t, err);
        if (r == 0)
            r = ck__save_commit_copy(s, sv->o.node_id, mine, t.man, t.mlen, NULL, NULL, err);
        else
            ck_save_abort(s);
    }
    if (r == 0 && c->nodes > 1)
        r = clique_of(sv, c, &t, err);
    if (r == 0 && c->nodes > 1) {
        /* Kept for the drain: the first of the order drains the save, and the others
         * stand by in turn (decision 0192). */
        c->order = t.ids;
        c->norder = t.n;
        t.ids = NULL;
    }
    /* copy.ID names the level this engine's ranks ask for: a save some daemon's ranks
     * want durable is drained whatever the others ask (ck__sv_tier_tick). */
    char name[CK_NODE_ID_MAX + 8], rec[32];
    int len = snprintf(rec, sizeof rec, "committed\nlevel %u\n", (unsigned)c->level);
    ck__name_meet_file(CK_MEET_COPY, sv->o.node_id, 0, name, sizeof name);
    if (r == 0 && c->nodes > 1)
        r = ck__meet_put(sv->root, c->meet, name, rec, (size_t)len, true, err);
    free(t.ids);
    free(man);
    return r;
}

void ck__sv_tier_commit(ck__saver *sv, sv_ckpt *c)
{
    ck_err err = { 0 };
    bool coord = c->role->coordinates;
    bool *mine = calloc(c->world, sizeof *mine);
    uint32_t n = 0;
    char (*ids)[CK_NODE_ID_MAX] = coord && c->nodes > 1 ? node_order(sv, c, &n) : NULL;
    for (uint64_t r = 0; mine && r < c->world; r++)
        mine[r] = c->parts[r].state == P_DURABLE;
    uint8_t *tf = c->tier;
    size_t tf_len = c->tier_len;
    c->tier = NULL;
    ck_save *s = c->s;
    c->s = NULL;       /* freed by the commit, whatever its result */
    int r = 0;
    pthread_mutex_unlock(&sv->mu);
    if (!mine || (coord && c->nodes > 1 && !ids)) {
        coord ? ck__save_discard(s) : ck_save_abort(s);
        r = ck_err_set(&err, -ENOMEM, "out of memory");
    } else {
        r = commit_copy(sv, c, s, mine, coord, tf, tf_len, ids, n, &err);
    }
    pthread_mutex_lock(&sv->mu);
    free(mine);
    free(ids);
    free(tf);
    if (r < 0) {
        char msg[CK_ERR_MSG_MAX + 64];
        snprintf(msg, sizeof msg, "checkpoint %s: its copy in the local tier %s: %s", c->name,
                 sv->o.local_root, ck_err_msg(&err));
        c->state = C_COLLECTING;
        ck__sv_fail(sv, c, r, msg);
        return;
    }
    ck__sv_log(sv, "checkpoint %s: copy committed in the local tier %s (%llu ranks written "
               "here), %.3f s", c->name, sv->o.local_root, (unsigned long long)c->durable,
               ck__sv_now() - c->t0);
    if (c->nodes == 1 && c->level < CK_LEVEL_DURABLE) {
        /* One engine: its copy is complete, and the only clique is itself (F = 1). */
        c->reached = c->level;
        ck__sv_emit(sv, CK_SAVER_COMMITTED, c, 0);
        ck__sv_emit(sv, CK_SAVER_SETTLED, c, 0);
        ck__sv_unlink(sv, c);
        ck__sv_free_parts(c, true);
        return;
    }
    c->state = C_SETTLING;
    c->deadline = ck__sv_now() + sv->o.part_timeout;
    if (c->nodes == 1) {
        /* One engine asked for durable: no meeting and no replica; the drain is next. */
        pthread_cond_signal(&sv->meet_cv);
        return;
    }
    c->writes++;
    if (ck__sv_push(sv, c, 0, JOB_REPLICATE) < 0) {
        c->writes--;
        ck__sv_log(sv, "checkpoint %s: out of memory queueing its replication", c->name);
    }
    pthread_cond_signal(&sv->meet_cv);
}

/* repl.ID and drain.ID: "code C\nMESSAGE\n", C 0 for a replication or drain that ended
 * well. */
static void put_outcome(ck__saver *sv, const sv_ckpt *c, ck__meet_file kind, int code,
                        const char *msg)
{
    char name[CK_NODE_ID_MAX + 8], buf[CK_ERR_MSG_MAX + 32];
    ck__name_meet_file(kind, sv->o.node_id, 0, name, sizeof name);
    int n = snprintf(buf, sizeof buf, "code %d\n%s\n", code, msg);
    if (n >= (int)sizeof buf)
        n = (int)sizeof buf - 1;
    ck_err err = { 0 };
    if (ck__meet_put(sv->root, c->meet, name, buf, (size_t)n, true, &err) < 0)
        ck__sv_log(sv, "checkpoint %s: recording its %s: %s", c->name,
                   kind == CK_MEET_DRAIN ? "drain" : "replication", ck_err_msg(&err));
}

void ck__sv_tier_replicate(ck__saver *sv, sv_ckpt *c)
{
    uint32_t n = c->nclique;
    const char **peers = calloc(n ? n : 1, sizeof *peers);
    for (uint32_t i = 0; peers && i < n; i++)
        peers[i] = c->clique[i];
    double t0 = ck__sv_now();
    pthread_mutex_unlock(&sv->mu);
    ck_err err = { 0 };
    int r = !peers ? ck_err_set(&err, -ENOMEM, "out of memory")
          : n && sv->o.replicate ? sv->o.replicate(sv->o.arg, c->name, peers, n, &err) : 0;
    put_outcome(sv, c, CK_MEET_REPL, r, r < 0 ? ck_err_msg(&err) : "");
    pthread_mutex_lock(&sv->mu);
    free(peers);
    c->writes--;
    if (r < 0)
        ck__sv_log(sv, "checkpoint %s: replicating this node's copy failed: %s", c->name,
                   ck_err_msg(&err));
    else if (n)
        ck__sv_log(sv, "checkpoint %s: this node's copy replicated to %u peer(s), %.3f s",
                   c->name, n, ck__sv_now() - t0);
    pthread_cond_signal(&sv->meet_cv);
}

static int on_tier(void *arg, const char *file, const uint8_t *buf, size_t len)
{
    sv_ckpt *c = arg;
    (void)file;
    if (!(c->tier = malloc(len)))
        return -ENOMEM;
    memcpy(c->tier, buf, len);
    c->tier_len = len;
    return 1;
}

bool ck__sv_tier_member(ck__saver *sv, sv_ckpt *c)
{
    ck_err err = { 0 };
    if (c->writes || c->durable != c->joined ||
        ck__meet_each(sv->root, c->meet, CK_MEET_TIER, on_tier, c, &err) <= 0)
        return false;
    c->state = C_COMMITTING;
    if (ck__sv_push(sv, c, 0, JOB_COMMIT) < 0) {
        c->state = C_COLLECTING;
        ck__sv_fail(sv, c, -ENOMEM, "out of memory queueing the commit");
    }
    return true;
}

/* ---- settling ---- */

/* What the meeting says of a settling save: the copies committed, the replications
 * and drains that ended (ok of them well), the engines that failed. */
typedef struct outcome {
    unsigned n, ok;
    char why[CK_ERR_MSG_MAX];      /* the first that did not end well */
} outcome;

typedef struct settle {
    sv_ckpt *c;
    unsigned copies, failed, settled;
    uint8_t want;                  /* the highest level an engine's ranks ask for */
    outcome repl, drain;
    char why[CK_ERR_MSG_MAX];
} settle;

/* Engine ID's record of a kind (a SEEN_*) is in: its own engine's is not watched. */
static void seen(sv_ckpt *c, const char *file, uint8_t kind)
{
    char id[CK_NODE_ID_MAX];
    ck__meet_file_of(file, id);
    peer *q = ck__sv_peer(c, id);
    if (q)
        q->seen |= kind;
}

/* copy.ID: "committed\nlevel L\n" (no level line: revision 6's, asking for no drain). */
static int on_copy(void *arg, const char *file, const uint8_t *buf, size_t len)
{
    settle *x = arg;
    char rec[32];
    unsigned level = 0;
    seen(x->c, file, SEEN_COPY);
    snprintf(rec, sizeof rec, "%.*s", (int)(len < sizeof rec ? len : sizeof rec - 1),
             (const char *)buf);
    if (sscanf(rec, "committed\nlevel %u", &level) == 1 && level <= CK_LEVEL_DURABLE &&
        level > x->want)
        x->want = (uint8_t)level;
    x->copies++;
    return 0;
}

/* A repl.ID or drain.ID record. */
static int outcome_of(outcome *x, const char *file, const uint8_t *buf, size_t len)
{
    char id[CK_NODE_ID_MAX];
    int code = -EIO;
    const char *nl = memchr(buf, '\n', len);
    ck__meet_file_of(file, id);
    x->n++;
    if (nl && sscanf((const char *)buf, "code %d", &code) == 1 && code == 0) {
        x->ok++;
        return 0;
    }
    size_t n = nl ? len - (size_t)(nl + 1 - (const char *)buf) : 0;
    while (n && nl[n] == '\n')
        n--;
    if (!x->why[0])
        snprintf(x->why, sizeof x->why, "engine %s: %.*s", id, (int)n, nl ? nl + 1 : "");
    return 0;
}

static int on_repl(void *arg, const char *file, const uint8_t *buf, size_t len)
{
    settle *x = arg;
    seen(x->c, file, SEEN_REPL);
    return outcome_of(&x->repl, file, buf, len);
}

static int on_drain(void *arg, const char *file, const uint8_t *buf, size_t len)
{
    return outcome_of(&((settle *)arg)->drain, file, buf, len);
}

static int on_fail(void *arg, const char *file, const uint8_t *buf, size_t len)
{
    settle *x = arg;
    char id[CK_NODE_ID_MAX], msg[CK_ERR_MSG_MAX];
    int code;
    ck__meet_file_of(file, id);
    if (ck__meet_fail_decode(buf, len, &code, msg, sizeof msg) < 0)
        snprintf(msg, sizeof msg, "(its record is unreadable)");
    x->failed++;
    snprintf(x->why, sizeof x->why, "engine %s: %s", id, msg);
    return 0;
}

static int on_settled(void *arg, const char *file, const uint8_t *buf, size_t len)
{
    settle *x = arg;
    (void)buf, (void)len;
    seen(x->c, file, SEEN_SETTLED);
    x->settled++;
    return 0;
}

/* What an engine taken for dead owes is never coming: no copy (the save fails), a
 * replication that ended badly, and its settling. Without this a member lost mid-save
 * would hold the others' final level, the drain offer and NAME's lock in the durable
 * root until --part-timeout (600 s by default). */
static void settle_dead(const ck__saver *sv, sv_ckpt *c, settle *x)
{
    for (unsigned i = 0; i < c->npeers; i++) {
        const peer *q = &c->peers[i];
        char why[CK_ERR_MSG_MAX];
        if (!q->dead)
            continue;
        snprintf(why, sizeof why, "engine %s %s (--dead-after %u s)", q->id, q->dead,
                 sv->o.dead_after);
        if (!(q->seen & SEEN_COPY)) {
            x->failed++;
            snprintf(x->why, sizeof x->why, "%s before its copy was committed", why);
        }
        if (!(q->seen & SEEN_REPL)) {
            x->repl.n++;
            if (!x->repl.why[0])
                snprintf(x->repl.why, sizeof x->repl.why, "%s before its replication ended",
                         why);
        }
        if (c->role->coordinates && !(q->seen & SEEN_SETTLED))
            x->settled++;
    }
}

/* The records of c's meeting into x; a save of one engine has none, and its own state
 * is the whole of it. */
static int read_meeting(ck__saver *sv, sv_ckpt *c, settle *x, ck_err *err)
{
    if (c->nodes == 1) {
        x->copies = x->repl.n = x->repl.ok = 1;
        x->want = c->level;
        if (c->drain_known) {
            x->drain.n = 1;
            x->drain.ok = c->drain_code == 0;
            snprintf(x->drain.why, sizeof x->drain.why, "%s", c->drain_msg);
        }
        return 0;
    }
    /* This engine's daemon drained it: the others hear it through drain.ID. */
    if (c->drain_known && !c->drain_put) {
        put_outcome(sv, c, CK_MEET_DRAIN, c->drain_code, c->drain_msg);
        c->drain_put = true;
    }
    for (unsigned i = 0; i < c->npeers; i++)
        c->peers[i].seen = 0;
    int r = ck__meet_each(sv->root, c->meet, CK_MEET_COPY, on_copy, x, err);
    if (r == 0)
        r = ck__meet_each(sv->root, c->meet, CK_MEET_FAILED, on_fail, x, err);
    if (r == 0)
        r = ck__meet_each(sv->root, c->meet, CK_MEET_REPL, on_repl, x, err);
    if (r == 0)
        r = ck__meet_each(sv->root, c->meet, CK_MEET_DRAIN, on_drain, x, err);
    if (r == 0 && c->role->coordinates)
        r = ck__meet_each(sv->root, c->meet, CK_MEET_SETTLED, on_settled, x, err);
    if (r == 0)
        settle_dead(sv, c, x);
    return r;
}

void ck__saver_drained(ck__saver *sv, const char *name, int code, const char *msg)
{
    pthread_mutex_lock(&sv->mu);
    for (sv_ckpt *c = sv->list; c; c = c->next)
        if (c->state == C_SETTLING && c->drain_asked && !c->drain_known &&
            !strcmp(c->name, name)) {
            c->drain_known = true;
            c->drain_code = code;
            snprintf(c->drain_msg, sizeof c->drain_msg, "%s", code ? msg : "");
            pthread_cond_signal(&sv->meet_cv);
            break;
        }
    pthread_mutex_unlock(&sv->mu);
}

static void tell(ck__saver *sv, sv_ckpt *c, uint8_t level, const char *note)
{
    c->told = true;
    c->reached = level;
    snprintf(c->note, sizeof c->note, "%s", note);
    ck__sv_log(sv, "checkpoint %s committed at level %s%s%s", c->name,
               ck_level_name((ck_level)level), note[0] ? ": " : "", note);
    ck__sv_emit(sv, CK_SAVER_COMMITTED, c, 0);
}

/* A save whose local copies never all committed is no checkpoint that can be loaded
 * (a node's part is nowhere): FAILED, naming why; the copies committed stay, partial
 * copies that restore never takes for a whole checkpoint. */
static void fail_settling(ck__saver *sv, sv_ckpt *c, int code, const char *why)
{
    c->told = true;
    c->fail_code = code;
    snprintf(c->fail_msg, sizeof c->fail_msg, "checkpoint %s: not every node committed its "
             "local copy: %s", c->name, why);
    ck__sv_log(sv, "%s", c->fail_msg);
    ck__sv_emit(sv, CK_SAVER_FAILED, c, 0);
}

/* The highest level x shows (local copies all committed: local), and in note why it is
 * below the level c asked. */
static uint8_t level_of(const sv_ckpt *c, const settle *x, bool local, char *note, size_t len)
{
    uint8_t level = !local ? 0 : x->drain.ok ? CK_LEVEL_DURABLE
                  : x->repl.ok >= c->nodes ? CK_LEVEL_REPLICATED : CK_LEVEL_LOCAL;
    note[0] = 0;
    if (level && level < c->level && c->level == CK_LEVEL_DURABLE)
        snprintf(note, len, "not durable: %s", x->drain.why[0] ? x->drain.why
                 : "the drain to the durable root did not commit within --part-timeout (it "
                   "goes on: ckptctl drain NAME says how it ends)");
    else if (level && level < c->level)
        snprintf(note, len, "not replicated: %s", x->repl.why[0] ? x->repl.why : x->why[0]
                 ? x->why : "not every engine replicated within --part-timeout");
    return level;
}

/* The save's levels are final here. A member says so in the meeting (settled.ID)
 * before its daemon hears it; the coordinator, which settles last, removes the meeting
 * and lets NAME's lock in the durable root go before its daemon hears it, so that a
 * drain the daemon starts never meets the lock of the save it drains. */
static void settle_end(ck__saver *sv, sv_ckpt *c, uint8_t level, const char *note, bool gone,
                       bool all)
{
    ck_err err = { 0 };
    char file[CK_NAME_MAX];
    c->reached = level;
    snprintf(c->note, sizeof c->note, "%s", note);
    ck__sv_log(sv, "checkpoint %s settled at level %s%s%s", c->name,
               c->reached ? ck_level_name((ck_level)c->reached) : "none",
               c->note[0] ? ": " : "", c->note);
    if (c->nodes > 1 && c->meet[0] && !gone && !c->role->coordinates &&
        ck__name_meet_file(CK_MEET_SETTLED, sv->o.node_id, 0, file, sizeof file) == 0 &&
        ck__meet_put(sv->root, c->meet, file, "", 0, false, &err) < 0)
        /* The coordinator then waits for it until its deadline: said, not fatal. */
        ck__sv_log(sv, "checkpoint %s: telling the coordinator this engine settled: %s",
                   c->name, ck_err_msg(&err));
    if (c->role->coordinates && c->meet[0] && all) {
        ck__meet_remove(sv->root, c->meet);     /* every member is done with it */
    } else if (c->role->coordinates && c->meet[0]) {
        /* Its deadline passed first: the members still there read the last records
         * within a poll; the grace covers them. */
        grave *g = calloc(1, sizeof *g);
        if (g) {
            snprintf(g->dir, sizeof g->dir, "%s", c->meet);
            g->when = ck__sv_now() + 2.0 + 4.0 * sv->o.poll_ms / 1000.0;
            g->next = sv->graves;
            sv->graves = g;
        }
    }
    ck__sv_tier_unlock(c);
    ck__sv_emit(sv, CK_SAVER_SETTLED, c, 0);
    ck__sv_unlink(sv, c);
    ck__sv_free_parts(c, true);
}

/* Whether the durable root holds c whole, of this engine's own copy's save
 * (ck__copy_whole_in): 1 yes, 0 not (yet), or 0 without a look when the last was less
 * than a second ago. */
static int drained_here(ck__saver *sv, sv_ckpt *c, double t)
{
    if (t < c->next_look)
        return 0;
    c->next_look = t + 1.0;
    return ck__copy_whole_in(sv->o.local_root, sv->root, c->name) == 1;
}

void ck__sv_tier_tick(ck__saver *sv, sv_ckpt *c, double t)
{
    settle x = { .c = c };
    ck_err err = { 0 };
    int r = read_meeting(sv, c, &x, &err);
    /* A closing engine waits for its own replication (its worker's job), not for the
     * others': its clients hear what holds now. */
    bool local = x.copies >= c->nodes, late = t > c->deadline || sv->closing;
    if (sv->closing && !x.why[0])
        snprintf(x.why, sizeof x.why, "ckptd %s is shutting down before every replication "
                 "ended", sv->o.node_id);
    if (r < 0) {
        /* The meeting is gone: the coordinator ended it, which it does once every
         * record was in (or the deadline passed); what this engine saw last stands. */
        snprintf(x.why, sizeof x.why, "the meeting %s ended (%s)", c->meet, ck_err_msg(&err));
        local = c->reached >= CK_LEVEL_LOCAL || c->told;
        /* Or, once a drain was asked, a daemon that started took it for debris: NAME's
         * lock in the durable root was the drain's to take, and a drain queued behind
         * another holds none yet. The drain goes on; the durable root says how it ends,
         * and the deadline bounds the wait for it. */
        int d = !c->drain_asked || c->drain_known ? 0 : drained_here(sv, c, t);
        if (d == 0 && c->drain_asked && !c->drain_known && t <= c->deadline && !sv->closing)
            return;
        if (d == 1 || (c->drain_known && c->drain_code == 0))
            x.drain.n = x.drain.ok = 1;
        late = true;
    }
    if (local && c->reached < CK_LEVEL_LOCAL)
        c->reached = CK_LEVEL_LOCAL;
    bool durable = c->level == CK_LEVEL_DURABLE;
    bool replicated = x.repl.n >= c->nodes || x.failed || late;   /* its replication ended */
    /* Level durable (asked by any engine's ranks): the drain starts once the replicas
     * are in (they are sources), or once they cannot all be, from what there is. Every
     * engine asks its daemon, since the one that drains may serve other ranks, and
     * stays until the drain's outcome is in the meeting for the others to read. */
    if ((durable || x.want == CK_LEVEL_DURABLE) && local && replicated && !late &&
        !c->drain_asked) {
        c->drain_asked = true;
        /* The drain commits NAME in the durable root under NAME's lock there: the
         * coordinator's passes to it. Another job's save of NAME still meets a lock,
         * the drain's, or, once committed, the checkpoint. */
        ck__sv_tier_unlock(c);
        ck__sv_emit(sv, CK_SAVER_DRAIN, c, 0);
    }
    bool drained = !(durable || c->drain_asked) || x.drain.n || late;   /* its drain ended */
    char note[CK_ERR_MSG_MAX];
    uint8_t level = level_of(c, &x, local, note, sizeof note);
    /* An engine that finds the meeting gone (the coordinator's deadline passed while
     * this engine was held up, or a daemon that started removed it) keeps the level
     * it saw there: the level its daemon acts on (the drain policy counts replicated
     * saves on every node alike) must not fall because the records are gone. */
    if (r == 0 && level > c->seen)
        c->seen = level;
    else if (r < 0 && c->seen > level) {
        level = c->seen;
        if (level >= c->level)
            note[0] = 0;
    }
    if (!c->told) {
        /* The caller hears as soon as its level holds, or as soon as it cannot: a
         * replication or drain that ended badly, rather than the deadline. */
        bool final = level >= c->level || late ||
                     (durable ? replicated && drained : x.repl.n > x.repl.ok || x.failed);
        if (local && final)
            tell(sv, c, level < c->level ? level : c->level, note);
        else if (!local && (x.failed || late))
            fail_settling(sv, c, x.failed ? -EIO : -ETIMEDOUT, x.why[0] ? x.why
                          : "the copies were not all committed within --part-timeout");
    }
    /* The coordinator settles last, once every member said it settled (decision
     * 0189): a member held up past the coordinator's end (a slow disk, a stopped
     * process) would find the meeting gone and could not tell the level it reached. */
    bool all = x.settled + 1 >= c->nodes;
    if (c->told && !c->writes && replicated && drained && (!c->role->coordinates || all || late))
        settle_end(sv, c, level, note, r < 0, all);
}
