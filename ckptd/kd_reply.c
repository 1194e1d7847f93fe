/* kd_reply.c - finding a client by id and sending it replies.
 *
 * Below every file that answers a client (proto, status, ckpt), so that none of them
 * calls back up into the event loop to reply. A reply is sent whole or not at all: the
 * loop thread never blocks on a client's socket.
 */
#include <sys/socket.h>

#include "kd.h"

kd_client *kd_client_find(kd_server *s, uint64_t id)
{
    for (kd_client *c = s->clients; id && c; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

void kd_send(kd_server *s, kd_client *c, ck__wbuf *w)
{
    if (c->drop || ck__proto_end(w) < 0)
        return;
    /* Replies are small and few per save; a client whose socket buffer is full is not
     * reading them, and must not stall the daemon. */
    ssize_t n = send(c->fd, w->p, w->len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n != (ssize_t)w->len) {
        kd_log(s, "client %llu (pid %d) does not take its replies: closing it",
               (unsigned long long)c->id, (int)c->pid);
        c->drop = true;
    }
}

void kd_send_error(kd_server *s, kd_client *c, const char *name, int code, const char *msg)
{
    ck__wbuf w = { 0 };
    ck__proto_start(&w, CK_MSG_ERROR);
    ck__put_str(&w, name);
    ck__put_u32(&w, (uint32_t)(code < 0 ? code : -EIO));
    char m[CK_ERR_MSG_MAX];
    snprintf(m, sizeof m, "%s", msg);   /* the wire holds at most a u16 length */
    ck__put_str(&w, m);
    kd_send(s, c, &w);
    ck__wbuf_free(&w);
}

void kd_send_committed(kd_server *s, kd_client *c, const char *name, uint8_t level,
                       const char *note)
{
    ck__wbuf w = { 0 };
    ck__proto_start(&w, CK_MSG_COMMITTED);
    ck__put_str(&w, name);
    ck__put_u8(&w, level);
    ck__put_str(&w, note);
    kd_send(s, c, &w);
    ck__wbuf_free(&w);
}

void kd_send_named(kd_server *s, kd_client *c, uint16_t type, const char *name,
                   const uint64_t *a, const uint64_t *b)
{
    ck__wbuf w = { 0 };
    ck__proto_start(&w, type);
    ck__put_str(&w, name);
    if (a)
        ck__put_u64(&w, *a);
    if (b)
        ck__put_u64(&w, *b);
    kd_send(s, c, &w);
    ck__wbuf_free(&w);
}
