/* kd_plan.c - the planner: one thread that joins ranks to saves, so that the event
 * loop never computes a plan. The first rank of a save makes the saver lay out the
 * whole save (every shard's writer and offset, every rank's file): O(shards + ranks)
 * time and memory, seconds for the largest plans the limits allow. Joins run in the
 * order their BEGINs arrived; each finished one waits in the done queue, and the
 * eventfd wakes the loop, which takes it with kd_plan_done.
 *
 * What a plan may cost is bounded before it is queued (kd_plan_cost, checked against
 * --plan-memory by kd_ckpt.c): shard records, ranks and tensors, each at a measured
 * upper bound of the bytes the core keeps for it while the save is in flight.
 *
 * The first rank's join seals the save's declaration: its layouts are checked and its
 * box lists' tiling (O(n log n): 2^20 boxes are a tenth of a second nobody else should
 * wait for) here, never on the loop.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kd.h"

#include "format/decl.h"

/* Bytes the core keeps per shard record (plan shard, manifest shard and extent, the
 * writer's run and source), per rank that writes a file (file, path, hashes, the
 * saver's part, the plan's per-rank offsets) and per tensor (two copies of its
 * declaration, its record and its place in the name index). Measured on x86-64 with
 * glibc as the daemon's RSS at ADMIT: 450 bytes per shard record and 275 per writing
 * rank (256x256 and 64x64 meshes, 262144 records each); the tensor's from its
 * structures. Rounded up, so the estimate bounds the real cost. */
#define KD_COST_SHARD 512
#define KD_COST_RANK 512
#define KD_COST_TENSOR 1024

uint64_t kd_plan_cost(const ck__begin *d)
{
    /* Shard records are known as the tensors are declared (a box list's one per box):
     * at most 2^18 tensors of 2^20 shards, no overflow. */
    return ck__decl_shards(d->decl) * KD_COST_SHARD + ck__begin_world(d) * KD_COST_RANK +
           (uint64_t)ck__decl_ntensors(d->decl) * KD_COST_TENSOR;
}

uint64_t kd_join_bytes(const ck__begin *d)
{
    return (uint64_t)ck__decl_ntensors(d->decl) * sizeof(ck_tensor) +
           (uint64_t)d->nblobs * sizeof *d->blobs +
           ck__decl_nboxes(d->decl) * (sizeof(ck_box) + sizeof(uint64_t));
}

void kd_join_free(kd_join *j)
{
    if (!j)
        return;
    if (j->fd >= 0)
        close(j->fd);
    ck__begin_free(&j->d);
    free(j);
}

static void push(kd_joinq *q, kd_join *j)
{
    j->next = NULL;
    if (q->tail)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
}

static kd_join *pop(kd_joinq *q)
{
    kd_join *j = q->head;
    if (j && !(q->head = j->next))
        q->tail = NULL;
    return j;
}

static void *planner(void *arg)
{
    kd_server *s = arg;
    pthread_mutex_lock(&s->plan_mu);
    for (;;) {
        while (!s->plan_todo.head && !s->plan_stop)
            pthread_cond_wait(&s->plan_cv, &s->plan_mu);
        kd_join *j = pop(&s->plan_todo);
        if (!j)
            break;
        pthread_mutex_unlock(&s->plan_mu);
        ck_err err = { 0 };
        j->r = ck__saver_join(s->saver, &j->d, &j->image, &err);
        if (j->r < 0)
            snprintf(j->msg, sizeof j->msg, "%s", ck_err_msg(&err));
        pthread_mutex_lock(&s->plan_mu);
        push(&s->plan_done, j);
        uint64_t one = 1;
        if (write(s->ev_fd, &one, sizeof one) < 0)
            kd_log(s, "eventfd: %s", strerror(errno));
    }
    pthread_mutex_unlock(&s->plan_mu);
    return NULL;
}

int kd_plan_start(kd_server *s, ck_err *err)
{
    pthread_mutex_init(&s->plan_mu, NULL);
    pthread_cond_init(&s->plan_cv, NULL);
    int r = pthread_create(&s->plan_th, NULL, planner, s);
    if (r)
        return ck_err_set(err, -r, "starting the planner thread: %s", strerror(r));
    s->plan_running = true;
    return 0;
}

void kd_plan_stop(kd_server *s)
{
    if (!s->plan_running)
        return;
    pthread_mutex_lock(&s->plan_mu);
    s->plan_stop = true;
    pthread_cond_signal(&s->plan_cv);
    pthread_mutex_unlock(&s->plan_mu);
    pthread_join(s->plan_th, NULL);
    s->plan_running = false;
    for (kd_join *j; (j = pop(&s->plan_done));)
        kd_join_free(j);
}

void kd_plan_submit(kd_server *s, kd_join *j)
{
    pthread_mutex_lock(&s->plan_mu);
    push(&s->plan_todo, j);
    s->plan_queued++;
    pthread_cond_signal(&s->plan_cv);
    pthread_mutex_unlock(&s->plan_mu);
}

kd_join *kd_plan_done(kd_server *s)
{
    pthread_mutex_lock(&s->plan_mu);
    kd_join *j = pop(&s->plan_done);
    if (j)
        s->plan_queued--;
    pthread_mutex_unlock(&s->plan_mu);
    return j;
}
