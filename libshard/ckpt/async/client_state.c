/* client_state.c - what the client's transports may do to a client: move a save's
 * state, wait for the engine's news, give up a part's staging (async/client_int.h).
 *
 * The transports (client_embedded.c, client_connected.c) bring the engine's news and
 * client.c drives the saves; both need these, and neither calls the other, so that the
 * calls point one way: client.c opens a transport and calls it through its table, the
 * transports call only this file.
 */
#include <stdio.h>
#include <stdlib.h>

#include "async/client_int.h"
#include "async/proto.h"

void ck__client_set_state(ck_client_save *sv, ck_client_state st, int code, const char *msg)
{
    if (sv->state == CK_CLIENT_COMMITTED || sv->state == CK_CLIENT_FAILED)
        return;
    if (st == CK_CLIENT_FAILED) {
        sv->code = code;
        snprintf(sv->msg, sizeof sv->msg, "%s", msg);
    } else if (st <= sv->state) {
        return;
    }
    sv->state = st;
}

void ck__client_committed(ck_client_save *sv, uint8_t level, const char *note)
{
    if (sv->state == CK_CLIENT_COMMITTED || sv->state == CK_CLIENT_FAILED)
        return;
    sv->reached = level;
    snprintf(sv->note, sizeof sv->note, "%s", note ? note : "");
    ck__client_set_state(sv, CK_CLIENT_COMMITTED, 0, NULL);
}

void ck__client_wait_for(ck_client *cl, bool (*done)(ck_client *, const void *),
                         const void *arg, double limit, const char *what)
{
    cl->wait_limit = limit;
    cl->wait_until = ck__conn_now() + limit;
    cl->waiting_for = what;
    cl->t->lock(cl);
    while (!done(cl, arg))
        if (cl->t->await(cl) < 0)
            break;      /* every save has FAILED now: done() holds for what we wait on */
    cl->t->unlock(cl);
}

/* ---- what was handed over on a link given up ---- */

void ck__client_forsake(ck_client_save *sv)
{
    ck_client *cl = sv->cl;
    if (sv->slot >= 0 && cl->slots[sv->slot].user == sv)
        ck__client_slot_release(cl, &cl->slots[sv->slot]);
}

void ck__client_direct_forsake(ck_client_save *sv, ck__client_direct **keep)
{
    ck__client_direct *d = sv->direct;
    if (!d)
        return;
    pthread_rwlock_wrlock(&d->lock);    /* waits out a read in progress (one block) */
    d->gone = true;
    pthread_rwlock_unlock(&d->lock);
    sv->direct = NULL;
    d->next = *keep;
    *keep = d;
}

void ck__client_direct_free(ck__client_direct *d)
{
    if (!d)
        return;
    pthread_rwlock_destroy(&d->lock);
    free(d->src);
    free(d->args);
    free(d);
}
