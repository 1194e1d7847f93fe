/* kd_status.c - the STATUS reply: the saves in flight, what is staged and written,
 * how fast, and by how many clients (ckptctl status prints it). */
#include <stdlib.h>
#include <string.h>

#include "kd.h"

void kd_status_reply(kd_server *s, kd_client *c)
{
    ck__proto_status st = { .staging_limit = s->o.staging, .staging_used = s->staging_used,
                           .clients = s->nclients };
    for (kd_part *p = s->wait_head; p; p = p->wait_next)
        st.waiting++;
    if (ck__saver_status(s->saver, &st.ckpts, &st.n) < 0) {
        kd_send_error(s, c, "", -ENOMEM, "out of memory building the status");
        return;
    }
    for (uint32_t i = 0; i < st.n; i++)
        for (kd_ckpt *k = s->ckpts; k; k = k->next)
            if (!strcmp(k->name, st.ckpts[i].name))
                st.ckpts[i].clients = kd_ckpt_clients(k, s);
    ck__wbuf w = { 0 };
    ck__proto_start(&w, CK_MSG_STATUS_OK);
    ck__proto_put_status(&w, &st);
    kd_send(s, c, &w);
    ck__wbuf_free(&w);
    free(st.ckpts);
}
