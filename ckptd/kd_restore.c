/* kd_restore.c - the restorer: one thread that answers RESOLVE, FETCH and TIERS
 * (docs/PROTOCOL.md, "Restoring"), so that the event loop never waits on a peer or a
 * transfer. Requests run in the order they came; the replies wait in the done queue,
 * and the eventfd wakes the loop, which sends each to its client if it is still
 * connected (kd_restore_replies), as the planner's joins come back (kd_plan.c).
 *
 * The ranks of a node ask for their files at once, often the same ones: the FETCHes
 * of one checkpoint waiting in the queue are taken together, the union of their files
 * fetched once, and each answered with the copies that hold its own. A FETCH that
 * comes while its files are being fetched finds them in the local tier when its turn
 * comes. What waits is bounded (KD_RESTORE_QUEUED, KD_RESTORE_BYTES): past it a request
 * is refused at once with -EAGAIN.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kd.h"

#define KD_RESTORE_QUEUED 1024         /* requests waiting */
#define KD_RESTORE_BYTES (64u << 20)   /* of their file lists */
/* A reply is sent whole, with MSG_DONTWAIT (kd_send), to a client that waits for it on
 * a connection of its own: it must fit a socket's send buffer (about 200 KiB). */
#define KD_RESTORE_REPLY_MAX (128u << 10)

typedef struct rreq {
    struct rreq *next;
    uint64_t client;
    pid_t pid;                         /* the client's process: owner of its pins */
    uint16_t type;
    ck__restore_req q;
    uint64_t bytes;
    int code;                          /* < 0: the reply is ERROR code, msg */
    char msg[CK_ERR_MSG_MAX];
    ck__wbuf reply;
} rreq;

struct kd_restorer {
    kd_tiers_opts o;
    kd_server *s;                      /* for its eventfd and log only */
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    rreq *todo, *done;                 /* todo in arrival order */
    unsigned queued;
    uint64_t bytes;
    bool retain;                       /* a retention pass is due (kd_retain.c) */
    bool stop;
};

static const char *type_name(uint16_t type)
{
    return type == CK_MSG_RESOLVE ? "RESOLVE" : type == CK_MSG_FETCH ? "FETCH" : "TIERS";
}

static void rreq_free(rreq *r)
{
    ck__restore_req_free(&r->q);
    ck__wbuf_free(&r->reply);
    free(r);
}

static void fail(rreq *r, int code, const ck_err *err)
{
    r->code = code;
    snprintf(r->msg, sizeof r->msg, "%s", ck_err_msg(err));
}

/* Makes the reply of r from w (taken): ERROR -E2BIG when it is larger than one that is
 * sent whole. */
static void reply(rreq *r, ck__wbuf *w)
{
    if (w->oom || w->len > KD_RESTORE_REPLY_MAX + CK_PROTO_HDR) {
        ck_err e = { 0 };
        ck_err_set(&e, w->oom ? -ENOMEM : -E2BIG, "the %s reply is %s (at most %u bytes)%s",
                   type_name(r->type), w->oom ? "out of memory" : "too large", KD_RESTORE_REPLY_MAX,
                   r->type == CK_MSG_TIERS ? "; name one checkpoint" : "");
        fail(r, e.code, &e);
        ck__wbuf_free(w);
        return;
    }
    r->reply = *w;
}

static void resolve(struct kd_restorer *k, rreq *r)
{
    ck_err err = { 0 };
    ck__restore_pick pick;
    int x = kd_tiers_resolve(&k->o, r->q.name, r->q.newest, &pick, &err);
    if (x < 0) {
        kd_log(k->s, "RESOLVE of %s%s: %s", r->q.name, r->q.newest ? "<step>" : "",
               ck_err_msg(&err));
        fail(r, x, &err);
        return;
    }
    kd_retain_pin(k->s, (uint64_t)r->pid, pick.name);  /* its process reads it next */
    kd_log(k->s, "RESOLVE of %s%s: %s%s%s", r->q.name, r->q.newest ? "<step>" : "", pick.name,
           pick.why[0] ? ": " : " (the newest saved)", pick.why);
    ck__wbuf w = { 0 };
    ck__proto_start(&w, CK_MSG_RESOLVE_OK);
    ck__proto_put_pick(&w, &pick);
    reply(r, &w);
}

static void tiers(struct kd_restorer *k, rreq *r)
{
    ck_err err = { 0 };
    kd_tview t;
    int x = kd_tiers_gather(&k->o, r->q.name, true, &t, &err);
    if (x < 0) {
        fail(r, x, &err);
        return;
    }
    ck__wbuf w = { 0 };
    ck__proto_start(&w, CK_MSG_TIERS_OK);
    kd_pw_tiers(&w, &t);
    kd_tview_free(&t);
    reply(r, &w);
}

static int by_file(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* The FETCHes of batch (one checkpoint): the union of their files once, then each its
 * copies. */
static void fetch(struct kd_restorer *k, rreq *batch)
{
    ck_err err = { 0 };
    size_t total = 0, n = 0, asks = 0;
    for (rreq *r = batch; r; r = r->next)
        total += r->q.n, asks++;
    char (*all)[CK_FILE_NAME_MAX] = malloc((total ? total : 1) * sizeof *all);
    int x = all ? 0 : ck_err_set(&err, -ENOMEM, "out of memory");
    for (rreq *r = batch; all && r; r = r->next)
        for (uint32_t i = 0; i < r->q.n; i++)
            memcpy(all[n++], r->q.files[i], sizeof all[0]);
    if (all)
        qsort(all, n, sizeof *all, by_file);
    size_t u = 0;
    for (size_t i = 0; all && i < n; i++)
        if (u == 0 || strcmp(all[u - 1], all[i]))
            memcpy(all[u++], all[i], sizeof all[0]);
    uint64_t time = 0;
    for (rreq *r = batch; r; r = r->next)
        kd_retain_pin(k->s, (uint64_t)r->pid, r->q.name);
    if (x == 0)
        x = kd_tiers_fetch(&k->o, batch->q.name, all, (uint32_t)u, &time, &err);
    kd_log(k->s, "FETCH of %s for %zu request(s): %zu data file(s)%s%s", batch->q.name, asks, u,
           x < 0 ? ": " : "", x < 0 ? ck_err_msg(&err) : "");
    free(all);
    for (rreq *r = batch; r; r = r->next) {
        ck__restore_dirs d;
        ck_err e2 = { 0 };
        int y = x < 0 ? x : kd_tiers_cover(&k->o, r->q.name, time, r->q.files, r->q.n, &d, &e2);
        if (y < 0) {
            fail(r, y, x < 0 ? &err : &e2);
            continue;
        }
        ck__wbuf w = { 0 };
        ck__proto_start(&w, CK_MSG_FETCH_OK);
        ck__proto_put_dirs(&w, &d);
        ck__restore_dirs_free(&d);
        reply(r, &w);
    }
}

/* Takes the first request, and with a FETCH every other FETCH of its checkpoint. */
static rreq *take(struct kd_restorer *k)
{
    rreq *first = k->todo, **tail = &first->next;
    k->todo = first->next;
    first->next = NULL;
    for (rreq **pp = &k->todo; first->type == CK_MSG_FETCH && *pp;) {
        rreq *r = *pp;
        if (r->type == CK_MSG_FETCH && !strcmp(r->q.name, first->q.name)) {
            *pp = r->next;
            r->next = NULL;
            *tail = r;
            tail = &r->next;
        } else {
            pp = &r->next;
        }
    }
    for (rreq *r = first; r; r = r->next) {
        k->queued--;
        k->bytes -= r->bytes;
    }
    return first;
}

static void *restorer(void *arg)
{
    struct kd_restorer *k = arg;
    pthread_mutex_lock(&k->mu);
    for (;;) {
        while (!k->todo && !k->stop && !k->retain)
            pthread_cond_wait(&k->cv, &k->mu);
        if (k->stop)
            break;
        if (k->retain) {
            k->retain = false;
            pthread_mutex_unlock(&k->mu);
            kd_retain_run(k->s);
            pthread_mutex_lock(&k->mu);
            continue;
        }
        rreq *batch = take(k);
        pthread_mutex_unlock(&k->mu);
        if (batch->type == CK_MSG_RESOLVE)
            resolve(k, batch);
        else if (batch->type == CK_MSG_TIERS)
            tiers(k, batch);
        else
            fetch(k, batch);
        pthread_mutex_lock(&k->mu);
        rreq *last = batch;
        while (last->next)
            last = last->next;
        last->next = k->done;
        k->done = batch;
        uint64_t one = 1;
        if (write(k->s->ev_fd, &one, sizeof one) < 0)
            kd_log(k->s, "eventfd: %s", strerror(errno));
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

/* Retention's wake (kd_retain_runs_on): a pass is due. */
static void retain_due(void *arg)
{
    struct kd_restorer *k = arg;
    pthread_mutex_lock(&k->mu);
    k->retain = true;
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
}

int kd_restore_start(kd_server *s, ck_err *err)
{
    struct kd_restorer *k = calloc(1, sizeof *k);
    if (!k)
        return ck_err_set(err, -ENOMEM, "out of memory");
    k->s = s;
    k->o = (kd_tiers_opts){ .local = s->local_root[0] ? s->local_root : NULL,
                            .durable = s->root, .id = s->o.id, .key = &s->peer_key,
                            .timeout = s->o.peer_timeout, .checkers = s->o.peer_checkers,
                            .log = kd_log_cb, .log_arg = s, .fetching = &s->fetching };
    pthread_mutex_init(&k->mu, NULL);
    pthread_cond_init(&k->cv, NULL);
    k->retain = true;                  /* a retention pass at start */
    int r = pthread_create(&k->th, NULL, restorer, k);
    if (r) {
        free(k);
        return ck_err_set(err, -r, "starting the restorer thread: %s", strerror(r));
    }
    s->restorer = k;
    kd_retain_runs_on(s, retain_due, k);
    return 0;
}

static void drop_all(rreq *r)
{
    while (r) {
        rreq *next = r->next;
        rreq_free(r);
        r = next;
    }
}

void kd_restore_stop(kd_server *s)
{
    struct kd_restorer *k = s->restorer;
    if (!k)
        return;
    kd_retain_runs_on(s, NULL, NULL);
    pthread_mutex_lock(&k->mu);
    k->stop = true;
    pthread_cond_signal(&k->cv);
    pthread_mutex_unlock(&k->mu);
    pthread_join(k->th, NULL);
    drop_all(k->todo);
    drop_all(k->done);
    pthread_mutex_destroy(&k->mu);
    pthread_cond_destroy(&k->cv);
    free(k);
    s->restorer = NULL;
}

void kd_restore_submit(kd_server *s, kd_client *c, uint16_t type, ck__restore_req *q)
{
    struct kd_restorer *k = s->restorer;
    uint64_t bytes = sizeof(rreq) + (uint64_t)q->n * sizeof *q->files;
    char msg[256];
    rreq *r = k ? calloc(1, sizeof *r) : NULL;
    if (!r) {
        kd_send_error(s, c, q->name, k ? -ENOMEM : -ENOTSUP,
                      k ? "out of memory" : "this ckptd does not restore (no restorer)");
        ck__restore_req_free(q);
        return;
    }
    *r = (rreq){ .client = c->id, .pid = c->pid, .type = type, .q = *q, .bytes = bytes };
    *q = (ck__restore_req){ 0 };
    pthread_mutex_lock(&k->mu);
    bool full = k->queued >= KD_RESTORE_QUEUED || k->bytes + bytes > KD_RESTORE_BYTES;
    if (!full) {
        rreq **pp = &k->todo;
        while (*pp)
            pp = &(*pp)->next;
        *pp = r;
        k->queued++;
        k->bytes += bytes;
        pthread_cond_signal(&k->cv);
    }
    pthread_mutex_unlock(&k->mu);
    if (full) {
        snprintf(msg, sizeof msg, "ckptd's restorer has %u requests (%u MiB of file lists) "
                 "waiting, at most %u (%u MiB); ask again later", k->queued,
                 (unsigned)(k->bytes >> 20), KD_RESTORE_QUEUED, KD_RESTORE_BYTES >> 20);
        kd_send_error(s, c, r->q.name, -EAGAIN, msg);
        rreq_free(r);
    }
}

void kd_restore_replies(kd_server *s)
{
    struct kd_restorer *k = s->restorer;
    if (!k)
        return;
    pthread_mutex_lock(&k->mu);
    rreq *r = k->done;
    k->done = NULL;
    pthread_mutex_unlock(&k->mu);
    while (r) {
        rreq *next = r->next;
        kd_client *c = kd_client_find(s, r->client);
        if (c && r->code < 0)
            kd_send_error(s, c, r->q.name, r->code, r->msg);
        else if (c)
            kd_send(s, c, &r->reply);
        rreq_free(r);
        r = next;
    }
}
