/* kd_tiersave.c - the daemon's side of tiered saves (issue 31; docs/decisions/0174 and
 * 0175): the saver (async/saver_tier.c) commits each node's copy in its local tier and
 * calls kd_tiersave_replicate, on one of its worker threads, to send that copy to all
 * the other members of the node's clique at once over the peer service, read once for
 * all of them (kd_peer_put_fan: each peer checks every block's SHA-256 as it arrives
 * and commits under LOCAL/.replicas/ID/), save the peers that committed their replica
 * through the PUT begun beside the local write (kd_early.c, decision 0204), which it
 * finishes first;
 * kd_tiersave_settled hears where a save ended up once its levels are final: a
 * replicated save is offered to the drain to the durable tier (kd_drain.c), and
 * retention counts the new copies (kd_retain.c); kd_tiersave_durable drains a save that
 * asked for level durable at once, its engine waiting to hear how that ends (decision
 * 0176). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kd.h"

int kd_tiersave_replicate(void *arg, const char *name, const char *const *peers, uint32_t n,
                          ck_err *err)
{
    kd_server *s = arg;
    kd_fan f;
    bool *done = calloc(n ? n : 1, sizeof *done);
    int r = done ? kd_fan_open(&f, err) : ck_err_set(err, -ENOMEM, "out of memory");
    if (r < 0) {
        free(done);
        return r;
    }
    /* The peers that committed a replica begun beside the local write are done; the
     * others are sent the copy now (decision 0204). */
    kd_early_finish(s, name, peers, n, done);
    const kd_peer_call proto = { .id = s->o.id, .key = &s->peer_key,
                                 .timeout = s->o.peer_timeout };
    /* A peer whose address is not to be had fails its replica; the others go on. */
    for (uint32_t i = 0; i < n; i++) {
        ck_err why = { 0 };
        if (done[i])
            continue;
        int a = kd_fan_add(&f, s->root, peers[i], true, &proto, &why);
        if (a < 0 && r == 0)
            r = ck_err_set(err, a, "replica of %s for ckptd %s: its peer address: %s", name,
                           peers[i], ck_err_msg(&why));
    }
    /* The F-1 peers of a clique are sent to at once, from one read of the copy
     * (decision 0201): the replicated level costs the slowest transfer, not their sum,
     * and the local disk reads the copy once whatever F. */
    if (f.n > 1)
        kd_log(s, "checkpoint %s: its copy is read once for %u peers", name, f.n);
    if (f.n)
        kd_peer_put_fan(f.to, f.n, s->local_root, name);
    for (uint32_t i = 0; i < f.n; i++) {
        if (f.to[i].r < 0 && r == 0)
            r = ck_err_set(err, f.to[i].r, "replica of %s at ckptd %s: %s", name, f.p[i].name,
                           ck_err_msg(&f.to[i].err));
        else if (f.to[i].r == 0)
            kd_log(s, "checkpoint %s: replica committed by ckptd %s at %s, %.3f s", name,
                   f.p[i].name, f.p[i].addr, f.to[i].secs);
    }
    kd_fan_free(&f);
    free(done);
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
