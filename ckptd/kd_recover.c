/* kd_recover.c - owning the root before serving it: one ckptd per id and root, holding
 * ROOT/.ckptd.ID.lock for its whole life (a second one of that id is refused, naming
 * the first; daemons of other ids, one per node, share the root);
 * then what a crash (or SIGKILL) left under ROOT/.pending by writers that are dead is
 * an incomplete save, never visible: remove it and reconcile the catalog, so a new
 * save starts from a clean root. Saves whose writers live (a trainer saving embedded
 * beside the daemon) keep their directories: their writers hold their locks. */
#include <stdio.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "kd.h"

#include "ck/catalog.h"
#include "format/owner.h"
#include "io/rootfs.h"

int kd_recover(kd_server *s, ck_err *err)
{
    char what[PATH_MAX + 64];
    snprintf(what, sizeof what, "root %s is served by another ckptd with id %s", s->root,
             s->o.id);
    int r = ck__engine_lock(s->root, s->o.id, what, &s->lock_fd, err);
    if (r < 0)
        return r;
    size_t removed = 0;
    if ((r = ck_root_recover(s->root, &removed, kd_log_cb, s, err)) < 0)
        return r;
    kd_log(s, "recovered %s: removed %zu incomplete save(s) of dead writers", s->root,
           removed);
    if (getrandom(&s->instance, sizeof s->instance, 0) != sizeof s->instance)
        s->instance = (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL);
    return 0;
}
