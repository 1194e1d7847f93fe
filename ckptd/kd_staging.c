/* kd_staging.c - staging areas: the clients' memfds, mapped read-only here and
 * written to the data files in place.
 *
 * The daemon's memory is bounded by --staging: a part is mapped only when its bytes
 * fit beside the parts mapped already (admission); otherwise it waits in a FIFO, and
 * its client waits for ADMIT before copying, which is the back-pressure. A part that
 * could never fit is refused outright.
 */
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kd.h"

int kd_staging_check(int fd, uint64_t size, ck_err *err)
{
    /* Without F_SEAL_SHRINK the client could truncate the memfd while a writer reads
     * it, and the daemon would die of SIGBUS. */
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK))
        return ck_err_set(err, -EINVAL, "the staging area must be a memfd sealed with "
                          "F_SEAL_SHRINK");
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < size)
        return ck_err_set(err, -EINVAL, "the staging area holds %lld bytes, %llu declared",
                          (long long)st.st_size, (unsigned long long)size);
    return 0;
}

static int map_part(kd_server *s, kd_part *p, ck_err *err)
{
    if (p->need) {
        void *m = mmap(NULL, p->need, PROT_READ, MAP_SHARED, p->fd, 0);
        if (m == MAP_FAILED)
            return ck_err_set(err, -errno, "mapping %llu bytes of staging: %s",
                              (unsigned long long)p->need, strerror(errno));
        p->map = m;
    }
    close(p->fd);
    p->fd = -1;
    p->admitted = true;
    s->staging_used += p->need;
    return 0;
}

int kd_staging_admit(kd_server *s, kd_part *p, ck_err *err)
{
    if (p->need > s->o.staging)
        return ck_err_set(err, -E2BIG, "rank %llu needs %llu bytes of staging and ckptd's "
                          "--staging is %llu: it can never fit", (unsigned long long)p->rank,
                          (unsigned long long)p->need, (unsigned long long)s->o.staging);
    if (!s->wait_head && s->staging_used + p->need <= s->o.staging) {
        int r = map_part(s, p, err);
        return r < 0 ? r : 1;
    }
    p->waiting = true;
    if (s->wait_tail)
        s->wait_tail->wait_next = p;
    else
        s->wait_head = p;
    s->wait_tail = p;
    return 0;
}

static void unqueue(kd_server *s, kd_part *p)
{
    kd_part *prev = NULL;
    for (kd_part *q = s->wait_head; q; prev = q, q = q->wait_next)
        if (q == p) {
            if (prev)
                prev->wait_next = p->wait_next;
            else
                s->wait_head = p->wait_next;
            if (s->wait_tail == p)
                s->wait_tail = prev;
            break;
        }
    p->waiting = false;
    p->wait_next = NULL;
}

void kd_staging_release(kd_server *s, kd_part *p)
{
    if (p->waiting)
        unqueue(s, p);
    if (p->admitted) {
        if (p->map)
            munmap(p->map, p->need);
        p->map = NULL;
        s->staging_used -= p->need;
        p->admitted = false;
    }
    if (p->fd >= 0)
        close(p->fd);
    p->fd = -1;
}

kd_part *kd_staging_admit_waiting(kd_server *s)
{
    /* First come, first served: a big part at the head is not overtaken. */
    while (s->wait_head && s->staging_used + s->wait_head->need <= s->o.staging) {
        kd_part *q = s->wait_head;
        unqueue(s, q);
        ck_err err = { 0 };
        if (map_part(s, q, &err) == 0)
            return q;
        kd_log(s, "checkpoint %s: %s", q->ckpt->name, ck_err_msg(&err));
        ck__saver_abandon(s->saver, q->ckpt->name, &q->ckpt->job, ck_err_msg(&err));
    }
    return NULL;
}
