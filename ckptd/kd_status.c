/* kd_status.c - the STATUS reply: the saves in flight, what is staged and written,
 * how fast, and by how many clients (ckptctl status prints it). */
#include <stdlib.h>
#include <string.h>

#include "kd.h"

/* By name, then job: a save is both. */
static int by_name_cmp(const void *a, const void *b)
{
    const kd_ckpt *x = *(kd_ckpt *const *)a, *y = *(kd_ckpt *const *)b;
    int c = strcmp(x->name, y->name);
    return c ? c : memcmp(x->job.bytes, y->job.bytes, CK_JOB_ID_LEN);
}

/* Out of memory for the matching, the rows go without their client counts. */
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
    /* The saver's rows and the daemon's saves are matched by name and job through a sorted
     * array: O(S log S) for S saves in flight, where a walk per row was O(S^2). */
    size_t n = 0;
    for (kd_ckpt *k = s->ckpts; k; k = k->next)
        n++;
    kd_ckpt **by_name = malloc((n ? n : 1) * sizeof *by_name);
    n = 0;
    for (kd_ckpt *k = s->ckpts; by_name && k; k = k->next)
        by_name[n++] = k;
    if (by_name)
        qsort(by_name, n, sizeof *by_name, by_name_cmp);
    for (uint32_t i = 0; by_name && i < st.n; i++) {
        kd_ckpt key, *kp = &key;
        snprintf(key.name, sizeof key.name, "%s", st.ckpts[i].name);
        key.job = st.ckpts[i].job;
        kd_ckpt **k = bsearch(&kp, by_name, n, sizeof *by_name, by_name_cmp);
        if (k)
            st.ckpts[i].clients = kd_ckpt_clients(*k, s);
    }
    free(by_name);
    ck__wbuf w = { 0 };
    ck__proto_start(&w, CK_MSG_STATUS_OK);
    ck__proto_put_status(&w, &st);
    kd_send(s, c, &w);
    ck__wbuf_free(&w);
    free(st.ckpts);
}
