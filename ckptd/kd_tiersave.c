/* kd_tiersave.c - the daemon's side of tiered saves (issue 31; docs/decisions/0174 and
 * 0175): the saver (async/saver_tier.c) commits each node's copy in its local tier and
 * calls kd_tiersave_replicate, on one of its worker threads, to send that copy to all
 * the other members of the node's clique at once over the peer service, read once for
 * all of them (kd_peer_put_fan: each peer checks every block's SHA-256 as it arrives
 * and commits under LOCAL/.replicas/ID/);
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

/* A peer of the clique: where it listens, and the call made to it. */
typedef struct clique_peer {
    char addr[KD_PEER_ADDR_MAX];
    kd_peer_call c;
    const char *id;
} clique_peer;

int kd_tiersave_replicate(void *arg, const char *name, const char *const *peers, uint32_t n,
                          ck_err *err)
{
    kd_server *s = arg;
    clique_peer *p = calloc(n ? n : 1, sizeof *p);
    kd_peer_put_to *to = calloc(n ? n : 1, sizeof *to);
    if (!p || !to) {
        free(p);
        free(to);
        return ck_err_set(err, -ENOMEM, "replica of %s: out of memory", name);
    }
    int r = 0;
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t instance;
        ck_err why = { 0 };
        int a = kd_addr_lookup(s->root, peers[i], p[k].addr, sizeof p[k].addr, &instance, &why);
        if (a < 0) {
            if (r == 0)
                r = ck_err_set(err, a, "replica of %s for ckptd %s: its peer address: %s", name,
                               peers[i], ck_err_msg(&why));
            continue;
        }
        p[k].id = peers[i];
        p[k].c = (kd_peer_call){ .addr = p[k].addr, .id = s->o.id, .key = &s->peer_key,
                                 .timeout = s->o.peer_timeout };
        to[k].c = &p[k].c;
        k++;
    }
    /* The F-1 peers of a clique are sent to at once, from one read of the copy
     * (decision 0201): the replicated level costs the slowest transfer, not their sum,
     * and the local disk reads the copy once whatever F. */
    if (k > 1)
        kd_log(s, "checkpoint %s: its copy is read once for %u peers", name, k);
    if (k)
        kd_peer_put_fan(to, k, s->local_root, name);
    for (uint32_t i = 0; i < k; i++) {
        if (to[i].r < 0 && r == 0)
            r = ck_err_set(err, to[i].r, "replica of %s at ckptd %s: %s", name, p[i].id,
                           ck_err_msg(&to[i].err));
        else if (to[i].r == 0)
            kd_log(s, "checkpoint %s: replica committed by ckptd %s at %s, %.3f s", name,
                   p[i].id, p[i].addr, to[i].secs);
    }
    free(p);
    free(to);
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
