/* client_slots.c - the client's staging areas (async/client_int.h).
 *
 * Two slots per client, double buffering: a part is copied into a free one while the
 * engine writes the part before it from the other. A slot is a sealed memfd, faulted
 * in when it is made (io/staging.h) and reused from save to save; a size not reserved
 * ahead is made by the save that needs it, and the other slot meanwhile on a thread
 * (the reserver), so that the next save finds it made.
 */
#include <stdarg.h>
#include <stdio.h>

#include "async/client_int.h"

static void say(ck_client *cl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void say(ck_client *cl, const char *fmt, ...)
{
    if (!cl->log)
        return;
    char msg[CK_ERR_MSG_MAX + 128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cl->log(cl->log_arg, msg);
}

void ck__client_slot_release(ck_client *cl, ck__client_slot *s)
{
    if (s->lost)
        return;
    if (s->hooked && s->map)
        cl->staging_unmapping(cl->staging_arg, s->map, s->size);
    s->hooked = false;
    ck__staging m = { .fd = s->fd, .map = s->map, .size = s->size };
    ck__staging_unmap(&m);
    s->fd = -1;
    s->map = NULL;
    s->size = 0;
}

int ck__slot_map(ck_client *cl, ck__client_slot *s, uint64_t need, ck_err *err)
{
    if (s->map && s->size >= need)
        return 0;
    ck__client_slot_release(cl, s);
    ck__staging m = CK_STAGING_NONE;
    int r = ck__staging_map(&m, need, CK_STAGING_MEMFD |
                            (cl->small_pages ? CK_STAGING_SMALL_PAGES : 0u), err);
    if (r < 0)
        return r;
    s->fd = m.fd;
    s->map = m.map;
    s->size = m.size;
    s->pages = m.pages;
    s->hooked = cl->staging_mapped && cl->staging_unmapping &&
                cl->staging_mapped(cl->staging_arg, s->map, s->size) == 0;
    if (!cl->pages_logged) {
        cl->pages_logged = true;
        say(cl, "checkpoint staging on %s%s", ck__staging_pages_name(m.pages),
            m.pages != CK_PAGES_SMALL ? "" : cl->small_pages ? " (as asked)"
            : " (no hugetlb pool)");
    }
    return 0;
}

static bool slot_free(const ck__client_slot *s)
{
    return !s->lost && (!s->user || s->user->state >= CK_CLIENT_DURABLE);
}

bool ck__slots_any_free(ck_client *cl, const void *arg)
{
    (void)arg;
    for (int i = 0; i < CK_CLIENT_SLOTS; i++)
        if (slot_free(&cl->slots[i]))
            return true;
    return false;
}

/* A lost slot is never free, and never waited for either. */
bool ck__slots_all_free(ck_client *cl, const void *arg)
{
    (void)arg;
    for (int i = 0; i < CK_CLIENT_SLOTS; i++)
        if (!cl->slots[i].lost && !slot_free(&cl->slots[i]))
            return false;
    return true;
}

static void *reserve_main(void *arg)
{
    ck_client *cl = arg;
    for (int i = 0; i < CK_CLIENT_SLOTS; i++) {
        ck_err err = { 0 };
        if ((cl->reserve_mask & (1u << i)) &&
            ck__slot_map(cl, &cl->slots[i], cl->reserve_bytes, &err) < 0) {
            say(cl, "checkpoint staging made ahead: %s (the next save makes it itself)",
                ck_err_msg(&err));
            break;
        }
    }
    return NULL;
}

void ck__slots_join(ck_client *cl)
{
    if (cl->reserving)
        pthread_join(cl->reserver, NULL);
    cl->reserving = false;
}

void ck__slots_reserve(ck_client *cl, uint64_t bytes)
{
    ck__slots_join(cl);
    unsigned mask = 0;
    cl->t->lock(cl);
    for (int i = 0; i < CK_CLIENT_SLOTS; i++)
        if (slot_free(&cl->slots[i]) && (!cl->slots[i].map || cl->slots[i].size < bytes))
            mask |= 1u << i;
    cl->t->unlock(cl);
    if (!mask)
        return;
    cl->reserve_mask = mask;
    cl->reserve_bytes = bytes;
    cl->reserving = pthread_create(&cl->reserver, NULL, reserve_main, cl) == 0;
    if (!cl->reserving)
        say(cl, "checkpoint staging made ahead: no thread (the next save makes it itself)");
}

int ck__slot_take(ck_client_save *sv)
{
    ck_client *cl = sv->cl;
    cl->t->lock(cl);
    int k = -1;
    for (int i = 0; i < CK_CLIENT_SLOTS && k < 0; i++) {
        int j = (int)((cl->next_slot + (unsigned)i) % CK_CLIENT_SLOTS);
        if (slot_free(&cl->slots[j]))
            k = j;
    }
    if (k >= 0) {
        cl->slots[k].user = sv;
        sv->slot = k;
        cl->next_slot = (unsigned)k + 1;
    }
    cl->t->unlock(cl);
    return k;
}
