/* kd_tiersave.c - the daemon's side of tiered saves (issue 31; docs/decisions/0174 and
 * 0175): the saver (async/saver_tier.c) commits each node's copy in its local tier and
 * calls kd_tiersave_replicate, on one of its worker threads, to send that copy to all
 * the other members of the node's clique at once over the peer service (kd_peer_put:
 * the peer checks every block's SHA-256 as it arrives and commits under
 * LOCAL/.replicas/ID/);
 * kd_tiersave_settled hears where a save ended up once its levels are final: a
 * replicated save is offered to the drain to the durable tier (kd_drain.c), and
 * retention counts the new copies (kd_retain.c); kd_tiersave_durable drains a save that
 * asked for level durable at once, its engine waiting to hear how that ends (decision
 * 0176). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kd.h"

/* One peer's replica: its PUT, on a thread of its own (kd_peer_put owns what it uses). */
typedef struct put_job {
    kd_server *s;
    const char *name, *peer;
    int r;
    double secs;
    char addr[KD_PEER_ADDR_MAX];
    ck_err err;
    pthread_t th;
    bool apart;                    /* runs on th (else on the caller's thread) */
} put_job;

static void *put_one(void *arg)
{
    put_job *j = arg;
    uint64_t instance;
    ck_err why = { 0 };
    int r = kd_addr_lookup(j->s->root, j->peer, j->addr, sizeof j->addr, &instance, &why);
    if (r < 0) {
        j->r = ck_err_set(&j->err, r, "replica of %s for ckptd %s: its peer address: %s",
                          j->name, j->peer, ck_err_msg(&why));
        return NULL;
    }
    kd_peer_call c = { .addr = j->addr, .id = j->s->o.id, .key = &j->s->peer_key,
                       .timeout = j->s->o.peer_timeout };
    double t0 = kd_now();
    if ((r = kd_peer_put(&c, j->s->local_root, j->name, &why)) < 0)
        j->r = ck_err_set(&j->err, r, "replica of %s at ckptd %s: %s", j->name, j->peer,
                          ck_err_msg(&why));
    j->secs = kd_now() - t0;
    return NULL;
}

int kd_tiersave_replicate(void *arg, const char *name, const char *const *peers, uint32_t n,
                          ck_err *err)
{
    kd_server *s = arg;
    put_job *jobs = calloc(n ? n : 1, sizeof *jobs);
    if (!jobs)
        return ck_err_set(err, -ENOMEM, "replica of %s: out of memory", name);
    /* The F-1 peers of a clique are sent to at once: the replicated level then costs the
     * slowest transfer, not their sum. The first runs here, and so does one whose thread
     * cannot be made. */
    for (uint32_t i = 0; i < n; i++) {
        jobs[i] = (put_job){ .s = s, .name = name, .peer = peers[i] };
        jobs[i].apart = i > 0 && pthread_create(&jobs[i].th, NULL, put_one, &jobs[i]) == 0;
    }
    for (uint32_t i = 0; i < n; i++)
        if (!jobs[i].apart)
            put_one(&jobs[i]);
    int r = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (jobs[i].apart)
            pthread_join(jobs[i].th, NULL);
        if (jobs[i].r < 0 && r == 0)
            r = ck_err_set(err, jobs[i].r, "%s", ck_err_msg(&jobs[i].err));
        else if (jobs[i].r == 0)
            kd_log(s, "checkpoint %s: replica committed by ckptd %s at %s, %.3f s", name,
                   peers[i], jobs[i].addr, jobs[i].secs);
    }
    free(jobs);
    return r;
}

void kd_tiersave_settled(kd_server *s, const kd_event *e)
{
    kd_log(s, "checkpoint %s: final level %s%s%s", e->name,
           e->level ? ck_level_name((ck_level)e->level) : "none", e->msg[0] ? ": " : "",
           e->msg);
    /* Every node hears it and offers it alike: the drain's policy keeps every
     * --drain-every'th, the first node of the save drains it and the others stand by
     * (decisions 0178 and 0192). Its step is read from the copy when it drains. */
    if (e->level == CK_LEVEL_REPLICATED)
        kd_drain_offer(s, e->name, 0, (const char (*)[CK_NODE_ID_MAX])e->nodes, e->n_nodes);
    /* The replicas are in: a retention pass counts them. */
    kd_retain_after_commit(s, e->name);
}

void kd_tiersave_durable(kd_server *s, const kd_event *e)
{
    if (kd_drain_wait(s, e->name, (const char (*)[CK_NODE_ID_MAX])e->nodes, e->n_nodes) < 0)
        ck__saver_drained(s->saver, e->name, -EAGAIN, "the drain queue of this daemon is full");
}
