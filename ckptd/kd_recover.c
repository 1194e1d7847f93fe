/* kd_recover.c - owning the root before serving it: one ckptd per root, holding
 * ROOT/.ckptd.lock for its whole life (a second one is refused, naming the first);
 * then what a crash (or SIGKILL) left under ROOT/.pending by writers that are dead is
 * an incomplete save, never visible: remove it and reconcile the catalog, so a new
 * save starts from a clean root. Saves whose writers live (a trainer saving embedded
 * beside the daemon) keep their directories: their writers hold their locks. */
#include <stdio.h>

#include "kd.h"

#include "ck/catalog.h"
#include "format/owner.h"

int kd_recover(kd_server *s, ck_err *err)
{
    char path[PATH_MAX + 16], what[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", s->root, CK_DAEMON_LOCK);
    snprintf(what, sizeof what, "root %s is served by another ckptd", s->root);
    int r = ck__lock_take(path, what, &s->lock_fd, err);
    if (r < 0)
        return r;
    size_t removed = 0;
    if ((r = ck_root_recover(s->root, &removed, kd_log_cb, s, err)) < 0)
        return r;
    kd_log(s, "recovered %s: removed %zu incomplete save(s) of dead writers", s->root,
           removed);
    return 0;
}
