/* kd_recover.c - before serving: what a crash (or SIGKILL) left under ROOT/.pending is
 * an incomplete save, never visible; remove it and reconcile the catalog, so a new
 * save starts from a clean root. */
#include "kd.h"

#include "ck/catalog.h"

int kd_recover(kd_server *s, ck_err *err)
{
    size_t removed = 0;
    int r = ck_root_recover(s->root, &removed, kd_log_cb, s, err);
    if (r < 0)
        return r;
    kd_log(s, "recovered %s: removed %zu incomplete save(s)", s->root, removed);
    return 0;
}
