/* kd_early.c - replication beside the local write (decision 0204): a node's part of a
 * tiered save goes to its clique while it is being written.
 *
 * The saver tells, per data file, the bytes of this node's files whose writes landed
 * (kd_early_landed, on its writers' threads) and, once the save's clique is known from
 * the meeting's joins and this node's ranks are all in, the peers and the files
 * (kd_early_begin, under its lock: it only starts a thread). That thread PUTs the files
 * to every peer at once, as a stream that grows as they land (kd_xsend_open_grow,
 * kd_peer_put_stream). At the local commit the replication (kd_tiersave.c) asks
 * kd_early_finish: when the commit's clique is the one begun with and the committed copy
 * holds the files sent, the copy's manifest ends the stream and the peers commit their
 * replicas; a peer whose early PUT failed, or every peer when anything differs, is sent
 * a PUT after the commit as before. A save that fails takes its early PUT down (kd_early_cancel), and
 * its peers drop what they took: nothing of it is committed anywhere.
 *
 * The registry (s->early, under s->early_mu) holds one entry per save being written;
 * the writers' landed counts are kept there from the first, since writes may begin
 * before the clique is known. Every wait is bounded: the PUT's lanes by the peer
 * timeout, a cancel by the call's stop (within 100 ms). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kd.h"

typedef struct kd_early {
    struct kd_early *next;
    kd_server *s;
    char name[CK_NAME_MAX];
    /* The node's files: their landed bytes from the first write, their sizes and order
     * once begun. */
    ck_file *files;
    uint64_t *landed;
    uint32_t n, cap;
    bool begun;
    char dir[PATH_MAX];
    char (*peers)[CK_NODE_ID_MAX];
    uint32_t npeers;
    uint32_t block_size;
    kd_xsend *x;                   /* while the thread streams */
    pthread_cond_t cv;             /* the thread waits for the first bytes, or a cancel */
    atomic_bool cancel;
    bool th_live;
    pthread_t th;
    kd_fan fan;                    /* the peers' calls, and how each PUT ended */
    ck_err why;                    /* the stream that never began: why */
    double t0;
} kd_early;

static kd_early *find(kd_server *s, const char *name)
{
    kd_early *e = s->early;
    while (e && strcmp(e->name, name))
        e = e->next;
    return e;
}

static void unlink_early(kd_server *s, kd_early *e)
{
    for (kd_early **p = &s->early; *p; p = &(*p)->next)
        if (*p == e) {
            *p = e->next;
            return;
        }
}

/* The entry of name's file, made when new and the PUT not begun (-1: out of memory, or
 * a file the begun PUT does not carry: the commit then finds other files, and the copy
 * goes after it). Once begun, the list never changes: the thread reads it. */
static int64_t file_of(kd_early *e, const char *file)
{
    for (uint32_t i = 0; i < e->n; i++)
        if (!strcmp(e->files[i].name, file))
            return i;
    if (e->begun)
        return -1;
    if (e->n == e->cap) {
        uint32_t cap = e->cap ? 2 * e->cap : 4;
        ck_file *f = realloc(e->files, cap * sizeof *f);
        if (f)
            e->files = f;
        uint64_t *l = f ? realloc(e->landed, cap * sizeof *l) : NULL;
        if (!l)
            return -1;
        e->landed = l;
        e->cap = cap;
    }
    memset(&e->files[e->n], 0, sizeof e->files[e->n]);
    snprintf(e->files[e->n].name, sizeof e->files[e->n].name, "%s", file);
    e->landed[e->n] = 0;
    return e->n++;
}

static kd_early *entry(kd_server *s, const char *name)
{
    kd_early *e = find(s, name);
    if (e || !(e = calloc(1, sizeof *e)))
        return e;
    e->s = s;
    snprintf(e->name, sizeof e->name, "%s", name);
    atomic_init(&e->cancel, false);
    pthread_cond_init(&e->cv, NULL);
    e->next = s->early;
    s->early = e;
    return e;
}

static void free_early(kd_early *e)
{
    pthread_cond_destroy(&e->cv);
    kd_fan_free(&e->fan);
    free(e->files);
    free(e->landed);
    free(e->peers);
    free(e);
}

void kd_early_landed(void *arg, const char *name, const char *file, uint64_t bytes)
{
    kd_server *s = arg;
    pthread_mutex_lock(&s->early_mu);
    kd_early *e = s->stopping_early ? NULL : entry(s, name);
    int64_t f = e ? file_of(e, file) : -1;
    if (f >= 0 && bytes > e->landed[f]) {
        e->landed[f] = bytes;
        if (e->x)
            kd_xsend_grow(e->x, (uint32_t)f, bytes);
        else
            pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&s->early_mu);
}

static bool stopped(void *arg)
{
    return atomic_load(&((kd_early *)arg)->cancel);
}

/* Whether any of e's files has bytes written (under the lock). */
static bool any_landed(const kd_early *e)
{
    for (uint32_t i = 0; i < e->n; i++)
        if (e->landed[i])
            return true;
    return false;
}

/* The early PUT, on a thread of its own. Its connections open once the first bytes
 * are written, not at the begin: a rank's staging is filled first, and a peer waits
 * for DATA at most its --peer-timeout. */
static void *run(void *arg)
{
    kd_early *e = arg;
    kd_server *s = e->s;
    const kd_peer_call proto = { .id = s->o.id, .key = &s->peer_key,
                                 .timeout = s->o.peer_timeout, .stop = stopped,
                                 .stop_arg = e };
    pthread_mutex_lock(&s->early_mu);
    while (!any_landed(e) && !atomic_load(&e->cancel))
        pthread_cond_wait(&e->cv, &s->early_mu);
    pthread_mutex_unlock(&s->early_mu);
    kd_preq q;
    kd_xsend *x = NULL;
    kd_fan fan = { 0 };
    ck_err why = { 0 };
    int r = atomic_load(&e->cancel) ? ck_err_set(&why, -ECANCELED, "the save failed")
                                     : kd_fan_open(&fan, &why);
    for (uint32_t i = 0; r == 0 && i < e->npeers; i++) {
        ck_err no = { 0 };
        if (kd_fan_add(&fan, s->root, e->peers[i], true, &proto, &no) < 0)
            kd_log(s, "checkpoint %s: ckptd %s is sent its replica after the commit: its "
                   "peer address: %s", e->name, e->peers[i], ck_err_msg(&no));
    }
    if (r == 0)
        r = kd_xsend_open_grow(s->local_root, e->dir, e->name, s->o.id, e->files, e->n,
                               e->block_size, &q, &x, &why);
    pthread_mutex_lock(&s->early_mu);
    e->why = why;
    if (r == 0) {
        e->fan = fan;
        e->x = x;
        for (uint32_t i = 0; i < e->n; i++)
            kd_xsend_grow(x, i, e->landed[i]);
    }
    pthread_mutex_unlock(&s->early_mu);
    if (r < 0) {
        kd_fan_free(&fan);
        return NULL;
    }
    /* One read of the files for every peer (decision 0201). */
    if (e->fan.n > 1)
        kd_log(s, "checkpoint %s: its copy is read once for %u peers, as it is written",
               e->name, e->fan.n);
    /* e->fan is this thread's until it ends: kd_early_finish reads it after the join. */
    kd_peer_put_stream(e->fan.to, e->fan.n, x, &q, e->name);
    pthread_mutex_lock(&s->early_mu);
    e->x = NULL;
    pthread_mutex_unlock(&s->early_mu);
    kd_xsend_free(x);
    kd_preq_free(&q);
    return NULL;
}

void kd_early_begin(void *arg, const char *name, const char *dir, const char *const *peers,
                    uint32_t n, const ck_file *files, uint32_t nfiles, uint32_t block_size)
{
    kd_server *s = arg;
    pthread_mutex_lock(&s->early_mu);
    kd_early *e = s->stopping_early ? NULL : entry(s, name);
    /* The files in the saver's order, with what landed of each already. */
    ck_file *f = malloc((nfiles ? nfiles : 1) * sizeof *f);
    uint64_t *l = calloc(nfiles ? nfiles : 1, sizeof *l);
    char (*p)[CK_NODE_ID_MAX] = calloc(n ? n : 1, sizeof *p);
    bool ok = e && !e->begun && f && l && p;
    for (uint32_t i = 0; ok && i < nfiles; i++) {
        f[i] = files[i];
        for (uint32_t k = 0; k < e->n; k++)
            if (!strcmp(e->files[k].name, files[i].name))
                l[i] = e->landed[k];
    }
    for (uint32_t i = 0; ok && i < n; i++)
        snprintf(p[i], sizeof p[i], "%s", peers[i]);
    if (ok) {
        free(e->files);
        free(e->landed);
        e->files = f;
        e->landed = l;
        e->n = e->cap = nfiles;
        e->peers = p;
        e->npeers = n;
        e->block_size = block_size;
        snprintf(e->dir, sizeof e->dir, "%s", dir);
        e->t0 = kd_now();
        e->begun = true;
        e->th_live = pthread_create(&e->th, NULL, run, e) == 0;
        f = NULL;
        l = NULL;
        p = NULL;
    }
    pthread_mutex_unlock(&s->early_mu);
    if (!ok && e)
        kd_log(s, "checkpoint %s: its replicas go after the commit (%s)", name,
               e->begun ? "begun twice" : "out of memory");
    free(f);
    free(l);
    free(p);
}

/* Takes e out of the registry and ends its thread (cancelled: its peers drop what
 * they took). */
static void end_early(kd_server *s, kd_early *e, bool cancel)
{
    if (cancel) {
        pthread_mutex_lock(&s->early_mu);
        atomic_store(&e->cancel, true);
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&s->early_mu);
    }
    if (e->th_live)
        pthread_join(e->th, NULL);
    e->th_live = false;
}

void kd_early_cancel(kd_server *s, const char *name)
{
    pthread_mutex_lock(&s->early_mu);
    kd_early *e = find(s, name);
    if (e)
        unlink_early(s, e);
    pthread_mutex_unlock(&s->early_mu);
    if (!e)
        return;
    if (e->begun)
        kd_log(s, "checkpoint %s: its PUT begun beside the local write is given up: the save "
               "failed", name);
    end_early(s, e, true);
    free_early(e);
}

/* Whether the clique at the commit is the one the early PUT went to. */
static bool same_peers(const kd_early *e, const char *const *peers, uint32_t n)
{
    if (n != e->npeers)
        return false;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t k = 0;
        while (k < n && strcmp(peers[i], e->peers[k]))
            k++;
        if (k == n)
            return false;
    }
    return true;
}

int kd_early_finish(kd_server *s, const char *name, const char *const *peers, uint32_t n,
                    bool *done)
{
    memset(done, 0, n * sizeof *done);
    pthread_mutex_lock(&s->early_mu);
    kd_early *e = find(s, name);
    if (e)
        unlink_early(s, e);
    ck_err why = { 0 };
    int r = !e || !e->begun ? -ENOENT
          : !same_peers(e, peers, n)
          ? ck_err_set(&why, -ESTALE, "its clique at the commit is not the one its files went "
                       "to as they were written")
          : !e->x ? ck_err_set(&why, -ECANCELED, "%s", e->why.code ? ck_err_msg(&e->why)
                                                                  : "every early PUT ended")
                  : kd_xsend_finish(e->x, &why);
    uint64_t early_bytes = e && e->x ? kd_xsend_sent(e->x) : 0;
    pthread_mutex_unlock(&s->early_mu);
    if (!e)
        return 0;
    if (r == -ENOENT) {
        free_early(e);
        return 0;
    }
    if (r < 0)
        kd_log(s, "checkpoint %s: its replicas go after the commit: %s", name, ck_err_msg(&why));
    else
        kd_log(s, "checkpoint %s: %llu bytes of it had gone to its clique when it was committed "
               "here, %.3f s after its files began to go", name,
               (unsigned long long)early_bytes, kd_now() - e->t0);
    end_early(s, e, r < 0);
    for (uint32_t i = 0; r == 0 && i < e->fan.n; i++) {
        const kd_fan_peer *p = &e->fan.p[i];
        for (uint32_t k = 0; k < n; k++)
            if (!strcmp(peers[k], p->name) && e->fan.to[i].r == 0)
                done[k] = true;
        if (e->fan.to[i].r == 0)
            kd_log(s, "checkpoint %s: replica committed by ckptd %s at %s, begun beside the "
                   "local write, %.3f s", name, p->name, p->addr, e->fan.to[i].secs);
        else
            kd_log(s, "checkpoint %s: its replica at ckptd %s goes after the commit: %s", name,
                   p->name, ck_err_msg(&e->fan.to[i].err));
    }
    free_early(e);
    return 1;
}

void kd_early_stop(kd_server *s)
{
    pthread_mutex_lock(&s->early_mu);
    kd_early *all = s->early;
    s->early = NULL;
    s->stopping_early = true;
    pthread_mutex_unlock(&s->early_mu);
    while (all) {
        kd_early *e = all;
        all = e->next;
        end_early(s, e, true);
        free_early(e);
    }
}
