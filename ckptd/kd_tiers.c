/* kd_tiers.c - where the copies of checkpoints are, seen from this node, and restoring
 * from the nearest (docs/ARCHITECTURE.md, "Tiers"; docs/PROTOCOL.md, "Restoring").
 *
 * A view gathers every copy the daemon can reach: its local tier's (its own copies,
 * the replicas it keeps, what it fetched), the durable root's committed checkpoints,
 * and every live peer's: each daemon that publishes a peer address in the durable root
 * (ROOT/.ckptd.ID.peer) is asked for its INVENTORY, at once, each within the peer
 * timeout; one that does not answer is lost, and the view says why. Copies are of one
 * checkpoint when they have its name and its commit time: another save of the name is
 * another checkpoint.
 *
 * A checkpoint can be restored when each of its data files has a copy in the view. A
 * RESOLVE picks the newest that can (the newest PREFIX<step>, by the rule of
 * ck/steps.h, or of a name its newest save) and says why when that is not the newest
 * saved. A FETCH makes data files readable from this node, nearest first: a copy in
 * the local tier; else one fetched from a live peer (GET, every block checked as it
 * arrives, committed as a copy of its own under LOCAL/.fetched/N), the peer that holds
 * most of what is missing first, and a copy that fails (a flipped byte, a peer that
 * dies mid-transfer) skipped for the next; else the durable root's complete copy, read
 * where it is. A daemon without a local tier has no peers to ask: the durable root is
 * all it sees.
 *
 * Everything here runs on the restorer's thread (kd_restore.c), never on the event loop:
 * the peer calls block, each wait bounded by the peer timeout.
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kd.h"

#include "ck/catalog.h"
#include "ck/steps.h"
#include "io/rootfs.h"
#include "save/meet.h"
#include "format/steps.h"
#include "format/layout.h"

#define ASK_AT_ONCE 16             /* peers asked for their INVENTORY at once */
#define NAMED_MAX 8                /* files a message names before "and N more" */

/* ---- the view ---- */

static int add_copy(kd_tview *t, const kd_tcopy *c)
{
    if ((t->n & (t->n - 1)) == 0) {          /* 0, 1, 2, 4, ...: grow to twice */
        kd_tcopy *v = realloc(t->v, (t->n ? 2 * t->n : 1) * sizeof *v);
        if (!v)
            return -ENOMEM;
        t->v = v;
    }
    t->v[t->n++] = *c;
    return 0;
}

static bool wanted(const char *name, const char *only)
{
    return !only[0] || !strcmp(name, only);
}

static int local_copies(const kd_tiers_opts *o, const char *only, kd_tview *t, ck_err *err)
{
    kd_peer_copy *v = NULL;
    char (*roots)[PATH_MAX] = NULL;
    size_t n = 0;
    int r = kd_inv_scan(o->local, o->id, &v, &roots, &n, err);
    for (size_t i = 0; r == 0 && i < n; i++) {
        if (!wanted(v[i].name, only))
            continue;
        kd_tcopy c = { .c = v[i], .where = KD_AT_LOCAL };
        snprintf(c.holder, sizeof c.holder, "%s", o->id);
        snprintf(c.root, sizeof c.root, "%s", roots[i]);
        if ((r = add_copy(t, &c)) == 0)
            v[i].held = NULL;                 /* the view's now */
    }
    kd_peer_copies_free(v, n);
    free(roots);
    return r == -ENOMEM ? ck_err_set(err, r, "out of memory") : r;
}

/* The durable root's committed checkpoints, from its catalog (each checked on disk): a
 * copy there is complete unless it holds a copy file, whose files are then read. */
static int durable_copies(const kd_tiers_opts *o, const char *only, kd_tview *t, ck_err *err)
{
    ck_cat_view cv;
    int r = ck_catalog_view(o->durable, &cv, err);
    if (r < 0)
        return r;
    int rootfd = ck__root_open(o->durable, err);
    if (rootfd < 0) {
        ck_cat_view_free(&cv);
        return rootfd;
    }
    for (size_t i = 0; r == 0 && i < cv.n; i++) {
        const ck_cat_entry *e = &cv.entries[i];
        char rel[CK_NAME_MAX + 8];
        struct stat st;
        if (!wanted(e->name, only))
            continue;
        kd_tcopy c = { .where = KD_AT_DURABLE, .c = { .step = e->step, .time_ns = e->time_ns,
                                                      .complete = true } };
        snprintf(c.c.name, sizeof c.c.name, "%s", e->name);
        snprintf(c.root, sizeof c.root, "%s", o->durable);
        snprintf(rel, sizeof rel, "%s/%s", e->name, CK_COPY_FILE);
        ck_ckpt *ck;
        if (ck__statat(rootfd, rel, &st) == 0) {
            /* A partial copy in the durable root: what it holds is in its copy file. */
            if (ck_open(o->durable, e->name, &ck, NULL) < 0)
                continue;
            const ck_copy *cp = ck_get_copy(ck);
            c.c.complete = !cp->partial;
            c.c.n_files = ck_get_info(ck)->n_files;
            c.c.n_held = cp->files_held;
            if (cp->partial && cp->files_held &&
                !(c.c.held = calloc(cp->files_held, sizeof *c.c.held)))
                r = -ENOMEM;
            for (uint32_t f = 0, k = 0; r == 0 && cp->partial && f < c.c.n_files; f++)
                if (ck_file_held(ck, f))
                    snprintf(c.c.held[k++], sizeof c.c.held[0], "%s", ck_file_get(ck, f)->name);
            ck_close(ck);
        }
        if (r == 0 && (r = add_copy(t, &c)) < 0)
            free(c.c.held);
    }
    close(rootfd);
    ck_cat_view_free(&cv);
    return r == -ENOMEM ? ck_err_set(err, r, "out of memory") : r;
}

static int by_id(const void *a, const void *b)
{
    return strcmp(((const kd_tpeer *)a)->id, ((const kd_tpeer *)b)->id);
}

/* The daemons other than this one that publish a peer address in the durable root. */
static int find_peers(const kd_tiers_opts *o, kd_tview *t, ck_err *err)
{
    int fd = ck__root_open(o->durable, err);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int r = fd < 0 ? fd : -errno;
        if (fd >= 0)
            close(fd);
        return fd < 0 ? r : ck_err_set(err, r, "%s: %s", o->durable, strerror(-r));
    }
    struct dirent *de;
    int r = 0;
    while (r == 0 && (de = readdir(d))) {
        char id[CK_NODE_ID_MAX];
        if (!ck__engine_file_of(de->d_name, CK_ENGINE_PEER, id) ||
            ck__node_id_check(id, NULL) < 0 || !strcmp(id, o->id))
            continue;
        kd_tpeer *p = realloc(t->peers, (t->npeers + 1) * sizeof *p);
        if (!p) {
            r = ck_err_set(err, -ENOMEM, "out of memory");
            break;
        }
        t->peers = p;
        p = &t->peers[t->npeers++];
        *p = (kd_tpeer){ .r = 0 };
        snprintf(p->id, sizeof p->id, "%s", id);
        ck_err why = { 0 };
        uint64_t instance;
        if ((p->r = kd_addr_lookup(o->durable, id, p->addr, sizeof p->addr, &instance, &why)) < 0)
            snprintf(p->why, sizeof p->why, "%s", ck_err_msg(&why));
    }
    closedir(d);
    /* In id order, so that of copies equally near the first peer's is tried first, on
     * every node the same. */
    if (r == 0 && t->npeers > 1)
        qsort(t->peers, t->npeers, sizeof *t->peers, by_id);
    return r;
}

typedef struct inv_ask {
    const kd_tiers_opts *o;
    kd_tpeer *p;
    kd_peer_copy *v;
    size_t n;
} inv_ask;

static void *ask_one(void *arg)
{
    inv_ask *a = arg;
    ck_err err = { 0 };
    kd_peer_call c = { .addr = a->p->addr, .id = a->o->id, .key = a->o->key,
                       .timeout = a->o->timeout };
    if ((a->p->r = kd_peer_inventory(&c, &a->v, &a->n, &err)) < 0)
        snprintf(a->p->why, sizeof a->p->why, "%s", ck_err_msg(&err));
    return NULL;
}

/* Every peer's INVENTORY, ASK_AT_ONCE at a time: the view waits for the slowest of a
 * batch, one timeout at most, not for the sum of them. */
static int ask_peers(const kd_tiers_opts *o, const char *only, kd_tview *t, ck_err *err)
{
    int r = 0;
    for (size_t b = 0; r == 0 && b < t->npeers; b += ASK_AT_ONCE) {
        inv_ask a[ASK_AT_ONCE] = { { 0 } };
        pthread_t th[ASK_AT_ONCE];
        bool started[ASK_AT_ONCE] = { false };
        size_t k = t->npeers - b < ASK_AT_ONCE ? t->npeers - b : ASK_AT_ONCE;
        for (size_t i = 0; i < k; i++) {
            a[i] = (inv_ask){ .o = o, .p = &t->peers[b + i] };
            /* Read before the thread starts: it writes p->r. */
            bool ask = a[i].p->r == 0;
            if (ask)
                started[i] = pthread_create(&th[i], NULL, ask_one, &a[i]) == 0;
            if (ask && !started[i])
                ask_one(&a[i]);           /* no thread to be had: ask it here */
        }
        for (size_t i = 0; i < k; i++) {
            if (started[i])
                pthread_join(th[i], NULL);
            if (a[i].p->r < 0)
                kd_log_to(o->log, o->log_arg, "peer ckptd %s is lost to this view: %s",
                          a[i].p->id, a[i].p->why);
            for (size_t j = 0; j < a[i].n; j++) {
                if (r < 0 || !wanted(a[i].v[j].name, only))
                    continue;
                kd_tcopy c = { .c = a[i].v[j], .where = KD_AT_PEER, .peer = (uint32_t)(b + i) };
                snprintf(c.holder, sizeof c.holder, "%s", a[i].p->id);
                if ((r = add_copy(t, &c)) == 0)
                    a[i].v[j].held = NULL;
            }
            kd_peer_copies_free(a[i].v, a[i].n);
        }
    }
    return r < 0 ? ck_err_set(err, r, "out of memory") : 0;
}

int kd_tiers_gather(const kd_tiers_opts *o, const char *name, bool peers, kd_tview *t,
                    ck_err *err)
{
    *t = (kd_tview){ 0 };
    int r = o->local ? local_copies(o, name, t, err) : 0;
    if (r == 0)
        r = durable_copies(o, name, t, err);
    if (r == 0 && peers && o->local && (r = find_peers(o, t, err)) == 0)
        r = ask_peers(o, name, t, err);
    if (r < 0)
        kd_tview_free(t);
    return r;
}

/* ---- checkpoints: copies of one name and commit time ---- */

typedef struct group {
    const char *name;
    uint64_t time;
    uint64_t step;                 /* the number in its name, for PREFIX<step> */
    size_t *idx;                   /* its copies in the view, nearest first */
    size_t n;
} group;

static bool of(const kd_tcopy *c, const char *name, uint64_t time)
{
    return !strcmp(c->c.name, name) && c->c.time_ns == time;
}

/* Newest first: by the step in the name, then the name, then the commit time. */
static int newest_first(const void *a, const void *b)
{
    const group *x = a, *y = b;
    if (x->step != y->step)
        return x->step > y->step ? -1 : 1;
    int c = strcmp(y->name, x->name);
    return c ? c : x->time > y->time ? -1 : x->time < y->time;
}

static void groups_free(group *g, size_t n)
{
    for (size_t i = 0; g && i < n; i++)
        free(g[i].idx);
    free(g);
}

/* The checkpoints of t that are what (newest: PREFIX<step>; else the name), newest
 * first, each with its copies nearest first (local, peers, durable). */
static int groups_of(const kd_tview *t, const char *what, bool newest, group **out, size_t *n)
{
    group *g = NULL;
    size_t k = 0;
    *out = NULL;
    *n = 0;
    for (int where = KD_AT_LOCAL; where <= KD_AT_DURABLE; where++)
        for (size_t i = 0; i < t->n; i++) {
            const kd_tcopy *c = &t->v[i];
            uint64_t step = c->c.step;
            if (c->where != where || (newest ? !ck__step_of(c->c.name, what, &step)
                                             : strcmp(c->c.name, what)))
                continue;
            size_t j = 0;
            while (j < k && !of(c, g[j].name, g[j].time))
                j++;
            if (j == k) {
                group *ng = realloc(g, (k + 1) * sizeof *g);
                if (!ng)
                    return groups_free(g, k), -ENOMEM;
                g = ng;
                g[k++] = (group){ .name = c->c.name, .time = c->c.time_ns, .step = step };
            }
            size_t *idx = realloc(g[j].idx, (g[j].n + 1) * sizeof *idx);
            if (!idx)
                return groups_free(g, k), -ENOMEM;
            g[j].idx = idx;
            g[j].idx[g[j].n++] = i;
        }
    if (k > 1)
        qsort(g, k, sizeof *g, newest_first);
    *out = g;
    *n = k;
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* The data files some copy of g holds (sorted, unique; malloc'd), or, when a copy is
 * complete, *whole. *of_all gets the checkpoint's data file count. */
static char (*held_by(const kd_tview *t, const group *g, size_t *n, bool *whole,
                      uint32_t *of_all))[CK_FILE_NAME_MAX]
{
    size_t total = 0;
    *whole = false;
    *of_all = 0;
    for (size_t i = 0; i < g->n; i++) {
        const kd_peer_copy *c = &t->v[g->idx[i]].c;
        *whole |= c->complete;
        *of_all = c->n_files > *of_all ? c->n_files : *of_all;
        total += c->complete ? 0 : c->n_held;
    }
    char (*v)[CK_FILE_NAME_MAX] = malloc((total ? total : 1) * sizeof *v);
    size_t k = 0;
    for (size_t i = 0; v && i < g->n; i++) {
        const kd_peer_copy *c = &t->v[g->idx[i]].c;
        for (uint32_t f = 0; !c->complete && f < c->n_held; f++)
            memcpy(v[k++], c->held[f], sizeof v[0]);
    }
    if (v)
        qsort(v, k, sizeof *v, by_name);
    size_t u = 0;
    for (size_t i = 0; v && i < k; i++)
        if (u == 0 || strcmp(v[u - 1], v[i]))
            memcpy(v[u++], v[i], sizeof v[0]);
    *n = u;
    return v;
}

static bool has(char (*set)[CK_FILE_NAME_MAX], size_t n, const char *name)
{
    return n && bsearch(name, set, n, sizeof *set, by_name) != NULL;
}

/* Whether each data file of g has a copy in the view. */
static bool whole(const kd_tview *t, const group *g)
{
    size_t n;
    bool all;
    uint32_t of_all;
    char (*set)[CK_FILE_NAME_MAX] = held_by(t, g, &n, &all, &of_all);
    free(set);
    return all || (set && n == of_all);
}

bool kd_tiers_whole(const kd_tview *t, const char *name, uint64_t time)
{
    group *g;
    size_t n;
    bool ok = false;
    if (groups_of(t, name, false, &g, &n) < 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (g[i].time == time)
            ok = whole(t, &g[i]);
    groups_free(g, n);
    return ok;
}

/* The peers lost to the view, into out ("" when none was). */
static void lost(const kd_tview *t, char *out, size_t len)
{
    size_t at = 0;
    out[0] = '\0';
    for (size_t i = 0; i < t->npeers && at < len; i++)
        if (t->peers[i].r < 0)
            at += (size_t)snprintf(out + at, len - at, "%sckptd %s (%s)",
                                   at ? "; " : "; unreachable: ", t->peers[i].id,
                                   t->peers[i].why);
}

static int from_peers(const kd_tiers_opts *o, const kd_tview *t, const group *g,
                      char (*files)[CK_FILE_NAME_MAX], uint32_t n, uint8_t *need,
                      bool manifest, char *said, size_t len, char *into, ck_err *err);

/* Why g cannot be restored: the data files no copy in the view holds, and the daemons
 * the view lost. The files are named from a copy of g's manifest: one here, else one
 * fetched from a live peer's copy (every copy holds the whole manifest), else counted. */
static void why_not(const kd_tiers_opts *o, const kd_tview *t, const group *g, char *why,
                    size_t len)
{
    size_t n, at = 0, named = 0, missing = 0;
    bool all;
    uint32_t of_all;
    char (*set)[CK_FILE_NAME_MAX] = held_by(t, g, &n, &all, &of_all);
    char files[CK_ERR_MSG_MAX / 2] = "", gone[CK_ERR_MSG_MAX / 2];
    ck_ckpt *ck = NULL;
    for (size_t i = 0; !ck && i < g->n; i++) {
        const kd_tcopy *c = &t->v[g->idx[i]];
        if (c->where != KD_AT_PEER && ck_open(c->root, g->name, &ck, NULL) == 0 &&
            ck_get_info(ck)->time_ns != g->time) {
            ck_close(ck);
            ck = NULL;
        }
    }
    char fetched[PATH_MAX] = "", said[CK_ERR_MSG_MAX] = "";
    uint8_t none = 0;
    ck_err e = { 0 };
    if (!ck && o->local &&
        from_peers(o, t, g, NULL, 0, &none, true, said, sizeof said, fetched, &e) == 0 &&
        fetched[0] && ck_open(fetched, g->name, &ck, NULL) < 0)
        ck = NULL;
    for (uint32_t f = 0; ck && set && f < ck_get_info(ck)->n_files; f++) {
        const char *fn = ck_file_get(ck, f)->name;
        if (has(set, n, fn))
            continue;
        if (missing++ < NAMED_MAX)
            at += (size_t)snprintf(files + at, sizeof files - at, "%s%s", named++ ? ", " : "",
                                   fn);
    }
    if (missing > named)
        snprintf(files + at, sizeof files - at, " and %zu more", missing - named);
    if (!ck)
        snprintf(files, sizeof files, "%zu of its %u data files", of_all - n, of_all);
    ck_close(ck);
    /* The manifest's copy served its one purpose: removed as retention removes, its
     * root left empty for the next pass to drop. */
    if (fetched[0] && ck_root_remove(fetched, g->name, NULL, &e) < 0)
        kd_log_to(o->log, o->log_arg, "RESOLVE of %s: removing the manifest fetched to name "
                  "what was lost: %s", g->name, ck_err_msg(&e));
    free(set);
    lost(t, gone, sizeof gone);
    snprintf(why, len, "%s (step %llu): %s %s no live copy%s", g->name,
             (unsigned long long)g->step, files, missing == 1 || (!ck && of_all - n == 1)
             ? "has" : "have", gone);
}

/* Where the copies of g are, in words: the daemons holding them, the durable root. */
static void where_from(const kd_tview *t, const group *g, char *out, size_t len)
{
    size_t at = 0;
    bool durable = false;
    out[0] = '\0';
    for (size_t i = 0; i < g->n && at < len; i++) {
        const kd_tcopy *c = &t->v[g->idx[i]];
        bool seen = false;
        for (size_t j = 0; j < i; j++)
            seen |= !strcmp(t->v[g->idx[j]].holder, c->holder);
        if (c->where == KD_AT_DURABLE)
            durable = true;
        else if (!seen)
            at += (size_t)snprintf(out + at, len - at, "%sckptd %s", at ? ", " : "the copies "
                                   "of ", c->holder);
    }
    if (durable && at < len)
        snprintf(out + at, len - at, "%sthe durable tier", at ? " and " : "");
}

int kd_tiers_resolve(const kd_tiers_opts *o, const char *what, bool newest,
                     ck__restore_pick *pick, ck_err *err)
{
    kd_tview t;
    group *g = NULL;
    size_t n = 0, at = 0;
    int r = kd_tiers_gather(o, newest ? "" : what, true, &t, err);
    if (r < 0)
        return r;
    if ((r = groups_of(&t, what, newest, &g, &n)) < 0) {
        kd_tview_free(&t);
        return ck_err_set(err, r, "out of memory");
    }
    while (at < n && !whole(&t, &g[at]))
        at++;
    char why[CK_ERR_MSG_MAX], gone[CK_ERR_MSG_MAX / 2], from[CK_ERR_MSG_MAX / 2];
    lost(&t, gone, sizeof gone);
    if (n == 0) {
        r = ck_err_set(err, -ENOENT, "no copy of %s%s in any tier (the local tier %s, the "
                       "durable root %s, %zu peer(s)%s)", what, newest ? "<step>" : "",
                       o->local ? o->local : "(none)", o->durable, t.npeers, gone);
    } else if (at == n) {
        why_not(o, &t, &g[0], why, sizeof why);
        r = ck_err_set(err, -ENODATA, "%s%s", why, !newest ? "" : n > 1 ? "; no older "
                       "checkpoint can be restored either" : "; nothing older to restore");
    } else {
        *pick = (ck__restore_pick){ .step = g[at].step, .time_ns = g[at].time };
        snprintf(pick->name, sizeof pick->name, "%s", g[at].name);
        if (at > 0) {
            why_not(o, &t, &g[0], why, sizeof why);
            where_from(&t, &g[at], from, sizeof from);
            snprintf(pick->why, sizeof pick->why, "%s; restoring %s (step %llu) from %s", why,
                     g[at].name, (unsigned long long)g[at].step, from);
        }
    }
    groups_free(g, n);
    kd_tview_free(&t);
    return r;
}

/* ---- fetching ---- */

/* The files of files[0, n) that no local copy of g holds, into need (flags). */
static size_t left_near(const kd_tview *t, const group *g, char (*files)[CK_FILE_NAME_MAX],
                        uint32_t n, uint8_t *need)
{
    size_t left = 0;
    for (uint32_t f = 0; f < n; f++) {
        need[f] = 1;
        for (size_t i = 0; need[f] && i < g->n; i++) {
            const kd_tcopy *c = &t->v[g->idx[i]];
            if (c->where != KD_AT_LOCAL)
                continue;
            for (uint32_t h = 0; need[f] && (c->c.complete || h < c->c.n_held); h++)
                need[f] = !(c->c.complete || !strcmp(c->c.held[h], files[f]));
        }
        left += need[f];
    }
    return left;
}

bool kd_tiers_holds(const kd_peer_copy *c, const char *file)
{
    for (uint32_t h = 0; !c->complete && h < c->n_held; h++)
        if (!strcmp(c->held[h], file))
            return true;
    return c->complete;
}

/* Fetches files[f] for each need[f] of g from the peers' copies, the copy that holds
 * most of them first; a copy that fails is skipped for the next. A holder busy with
 * other transfers is passed over while another holder can serve, and asked again,
 * waiting its turn, only when none can (so that a busy node delays a restore only when
 * it alone holds what is needed). Clears need[f] for what came. said collects the
 * failures, for the error if a file cannot be had. */
static int from_peers(const kd_tiers_opts *o, const kd_tview *t, const group *g,
                      char (*files)[CK_FILE_NAME_MAX], uint32_t n, uint8_t *need,
                      bool manifest, char *said, size_t len, char *into, ck_err *err)
{
    bool *failed = calloc(g->n ? g->n : 1, sizeof *failed);
    bool *busy = calloc(g->n ? g->n : 1, sizeof *busy);
    bool patient = false;              /* busy holders are waited for */
    kd_preq ask = { .files = calloc(n ? n : 1, sizeof *ask.files) };
    size_t at = strlen(said);
    int r = failed && busy && ask.files ? 0 : ck_err_set(err, -ENOMEM, "out of memory");
    for (;;) {
        size_t best = SIZE_MAX, most = 0;
        bool waiting = false;          /* a busy holder passed over could serve */
        for (size_t i = 0; r == 0 && i < g->n; i++) {
            const kd_tcopy *c = &t->v[g->idx[i]];
            bool usable = c->where == KD_AT_PEER && !failed[i];
            size_t k = 0;
            for (uint32_t f = 0; usable && f < n; f++)
                k += need[f] && kd_tiers_holds(&c->c, files[f]);
            if (usable && busy[i] && !patient) {
                waiting |= k > 0 || manifest;
                continue;
            }
            if (usable && (k > most || (manifest && best == SIZE_MAX)))
                best = i, most = k;
        }
        if (r == 0 && (best == SIZE_MAX || (!most && !manifest)) && waiting) {
            patient = true;
            kd_log_to(o->log, o->log_arg, "FETCH of %s: only holders busy with other "
                      "transfers are left; asking them again, waiting for a turn", g->name);
            continue;
        }
        if (r < 0 || best == SIZE_MAX || (!most && !manifest))
            break;
        const kd_tcopy *c = &t->v[g->idx[best]];
        char root[PATH_MAX];
        ck_err why = { 0 };
        ask.n = 0;
        for (uint32_t f = 0; f < n; f++)
            if (need[f] && kd_tiers_holds(&c->c, files[f]))
                memcpy(ask.files[ask.n++].name, files[f], sizeof files[f]);
        snprintf(ask.name, sizeof ask.name, "%s", g->name);
        snprintf(ask.source, sizeof ask.source, "%s", c->c.source);
        ask.time_ns = g->time;
        kd_peer_call call = { .addr = t->peers[c->peer].addr, .id = o->id, .key = o->key,
                              .timeout = o->timeout, .checkers = o->checkers,
                              .busy_fails = !patient, .progress = o->progress,
                              .arg = o->progress_arg };
        /* The root is empty until the GET's copy begins: retention must not take it
         * for one left empty meanwhile. */
        if (o->fetching)
            pthread_rwlock_rdlock(o->fetching);
        int x = kd_inv_fetch_root(o->local, root, &why);
        if (x == 0 && (x = kd_peer_get(&call, &ask, root, &why)) < 0)
            kd_inv_fetch_drop(root, g->name);
        if (o->fetching)
            pthread_rwlock_unlock(o->fetching);
        if (x == -EBUSY && !patient) {
            kd_log_to(o->log, o->log_arg, "FETCH of %s: ckptd %s, which holds a copy of "
                      "ckptd %s, is busy (%s); asking another holder first", g->name,
                      c->holder, c->c.source, ck_err_msg(&why));
            busy[best] = true;
            continue;
        }
        if (x < 0) {
            kd_log_to(o->log, o->log_arg, "FETCH of %s: the copy of ckptd %s at ckptd %s "
                      "failed: %s; trying the next holder", g->name, c->c.source, c->holder,
                      ck_err_msg(&why));
            at += (size_t)snprintf(said + at, at < len ? len - at : 0, "%sthe copy of ckptd %s "
                                   "at ckptd %s: %s", at ? "; " : "", c->c.source, c->holder,
                                   ck_err_msg(&why));
            failed[best] = true;
            continue;
        }
        kd_log_to(o->log, o->log_arg, "FETCH of %s: %u data file(s)%s from the copy of ckptd "
                  "%s at ckptd %s, into %s", g->name, ask.n, ask.n ? "" : " (the manifest)",
                  c->c.source, c->holder, root);
        for (uint32_t f = 0; f < n; f++)
            need[f] = need[f] && !kd_tiers_holds(&c->c, files[f]);
        if (into)
            memcpy(into, root, PATH_MAX);
        manifest = false;
    }
    free(failed);
    free(busy);
    kd_preq_free(&ask);
    return r;
}

/* The save of name to fetch from: the newest whose every data file has a copy, else
 * the newest saved (what is missing then fails, named). */
static const group *choose(const kd_tview *t, const group *g, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (whole(t, &g[i]))
            return &g[i];
    return n ? &g[0] : NULL;
}

int kd_tiers_fetch(const kd_tiers_opts *o, const char *name, char (*files)[CK_FILE_NAME_MAX],
                   uint32_t n, uint64_t *time, ck_err *err)
{
    kd_tview t;
    group *g = NULL;
    size_t ng = 0;
    uint8_t *need = calloc(n ? n : 1, 1);
    if (!need)
        return ck_err_set(err, -ENOMEM, "out of memory");
    /* Near first: what the local tier holds needs no peer. */
    int r = kd_tiers_gather(o, name, false, &t, err);
    if (r == 0 && (r = groups_of(&t, name, false, &g, &ng)) < 0)
        ck_err_set(err, r, "out of memory");
    const group *c = r == 0 ? choose(&t, g, ng) : NULL;
    bool near = false;
    for (size_t i = 0; c && !near && i < c->n; i++)
        near = t.v[c->idx[i]].where == KD_AT_LOCAL;
    if (c && near && left_near(&t, c, files, n, need) == 0) {
        *time = c->time;
        goto out;
    }
    groups_free(g, ng);
    kd_tview_free(&t);
    g = NULL;
    ng = 0;
    if (r < 0 || (r = kd_tiers_gather(o, name, true, &t, err)) < 0)
        goto done;
    if ((r = groups_of(&t, name, false, &g, &ng)) < 0) {
        ck_err_set(err, r, "out of memory");
        goto out;
    }
    char gone[CK_ERR_MSG_MAX / 2], said[CK_ERR_MSG_MAX] = "";
    lost(&t, gone, sizeof gone);
    if (!(c = choose(&t, g, ng))) {
        r = ck_err_set(err, -ENOENT, "no copy of %s in any tier (the local tier %s, the durable "
                       "root %s, %zu peer(s)%s)", name, o->local ? o->local : "(none)",
                       o->durable, t.npeers, gone);
        goto out;
    }
    *time = c->time;
    near = false;
    for (size_t i = 0; !near && i < c->n; i++)
        near = t.v[c->idx[i]].where != KD_AT_PEER;
    size_t left = left_near(&t, c, files, n, need);
    if (o->local && (left || !near) &&
        (r = from_peers(o, &t, c, files, n, need, !near, said, sizeof said, NULL, err)) < 0)
        goto out;
    bool durable = false;
    for (size_t i = 0; i < c->n; i++)
        durable |= t.v[c->idx[i]].where == KD_AT_DURABLE && t.v[c->idx[i]].c.complete;
    left = 0;
    for (uint32_t f = 0; f < n; f++)
        left += need[f];
    if (left && durable)
        kd_log_to(o->log, o->log_arg, "FETCH of %s: %zu data file(s) read from the durable "
                  "tier's copy%s", name, left, said[0] ? " (the copies fetched failed)" : "");
    else if (left) {
        char files_said[CK_ERR_MSG_MAX / 2];
        size_t at = 0, k = 0;
        for (uint32_t f = 0; f < n && at < sizeof files_said; f++)
            if (need[f] && k++ < NAMED_MAX)
                at += (size_t)snprintf(files_said + at, sizeof files_said - at, "%s%s",
                                       k > 1 ? ", " : "", files[f]);
        if (k > NAMED_MAX && at < sizeof files_said)
            snprintf(files_said + at, sizeof files_said - at, " and %zu more", k - NAMED_MAX);
        r = ck_err_set(err, -ENODATA, "checkpoint %s: %s: no copy could be had%s%s%s", name,
                       files_said, said[0] ? " (" : "", said, said[0] ? ")" : gone);
    }
out:
    groups_free(g, ng);
    kd_tview_free(&t);
done:
    free(need);
    return r;
}

int kd_tiers_refetch(const kd_tiers_opts *o, const char *name, uint64_t time,
                     const char *file, char *root, ck_err *err)
{
    kd_tview t;
    group *g = NULL;
    size_t ng = 0;
    char files[1][CK_FILE_NAME_MAX], said[CK_ERR_MSG_MAX] = "", gone[CK_ERR_MSG_MAX / 2];
    uint8_t need = 1;
    snprintf(files[0], sizeof files[0], "%s", file);
    if (!o->local)
        return ck_err_set(err, -ENODATA, "checkpoint %s: %s: no local tier to fetch it into",
                          name, file);
    int r = kd_tiers_gather(o, name, true, &t, err);
    if (r < 0)
        return r;
    if ((r = groups_of(&t, name, false, &g, &ng)) < 0)
        ck_err_set(err, r, "out of memory");
    const group *c = NULL;
    for (size_t i = 0; r == 0 && i < ng; i++)
        if (g[i].time == time)
            c = &g[i];
    if (c)
        r = from_peers(o, &t, c, files, 1, &need, false, said, sizeof said, root, err);
    lost(&t, gone, sizeof gone);
    if (r == 0 && need)
        r = ck_err_set(err, -ENODATA, "checkpoint %s: %s: no peer's copy could be had%s%s%s%s",
                       name, file, said[0] ? " (" : "", said, said[0] ? ")" : "", gone);
    groups_free(g, ng);
    kd_tview_free(&t);
    return r;
}

/* ---- the directories to open ---- */

/* -ENOENT naming the first of files that is no data file of the checkpoint in dir. */
static int its_files(const char *dir, char (*files)[CK_FILE_NAME_MAX], uint32_t n,
                     ck_err *err)
{
    ck_ckpt *ck;
    int r = ck_open_dir(dir, &ck, err);
    if (r < 0)
        return r;
    uint32_t nf = ck_get_info(ck)->n_files;
    char (*names)[CK_FILE_NAME_MAX] = malloc((nf ? nf : 1) * sizeof *names);
    if (!names)
        r = ck_err_set(err, -ENOMEM, "out of memory");
    for (uint32_t f = 0; names && f < nf; f++)
        memcpy(names[f], ck_file_get(ck, f)->name, sizeof names[0]);
    if (names)
        qsort(names, nf, sizeof *names, by_name);
    for (uint32_t f = 0; r == 0 && f < n; f++)
        if (!has(names, nf, files[f]))
            r = ck_err_set(err, -ENOENT, "checkpoint %s has no data file %s",
                           ck_get_info(ck)->name, files[f]);
    free(names);
    ck_close(ck);
    return r;
}

int kd_tiers_cover(const kd_tiers_opts *o, const char *name, uint64_t time,
                   char (*files)[CK_FILE_NAME_MAX], uint32_t n, ck__restore_dirs *out,
                   ck_err *err)
{
    kd_tview t;
    *out = (ck__restore_dirs){ 0 };
    snprintf(out->name, sizeof out->name, "%s", name);
    uint8_t *need = malloc(n ? n : 1);
    out->dirs = calloc(CK_COPIES_MAX, sizeof *out->dirs);
    int r = need && out->dirs ? kd_tiers_gather(o, name, false, &t, err)
                              : ck_err_set(err, -ENOMEM, "out of memory");
    if (r < 0) {
        free(need);
        ck__restore_dirs_free(out);
        return r;
    }
    memset(need, 1, n ? n : 1);
    size_t left = n;
    /* Nearest first: the view lists the local tier's copies before the durable root's.
     * Each copy that holds a file still wanted is taken; with no file wanted, the
     * nearest copy, for its manifest. */
    for (size_t i = 0; i < t.n && (left || !out->n) && out->n < CK_COPIES_MAX; i++) {
        const kd_tcopy *c = &t.v[i];
        size_t k = 0;
        if (!of(c, name, time))
            continue;
        for (uint32_t f = 0; f < n; f++)
            if (need[f] && kd_tiers_holds(&c->c, files[f]))
                need[f] = 0, k++;
        if (!k && n)
            continue;
        left -= k;
        snprintf(out->dirs[out->n++], PATH_MAX, "%s/%s", c->root, name);
    }
    bool manifest = !out->n;
    kd_tview_free(&t);
    for (uint32_t f = 0; left && f < n; f++)
        if (need[f]) {
            r = ck_err_set(err, -ENODATA, "checkpoint %s: no copy on this node holds %s%s", name,
                           files[f], out->n == CK_COPIES_MAX ? " within 64 copies" : "");
            break;
        }
    if (r == 0 && manifest)
        r = ck_err_set(err, -ENOENT, "checkpoint %s: no copy of it on this node", name);
    if (r == 0 && n)
        r = its_files(out->dirs[0], files, n, err);
    free(need);
    if (r < 0)
        ck__restore_dirs_free(out);
    return r;
}
