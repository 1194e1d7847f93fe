/* tier.c - the roots a node's local tier holds below itself (ck_tier_roots; see
 * ck/catalog.h and docs/FORMAT.md, "Copies"): LOCAL/.replicas/SRC, the replicas kept for
 * daemon SRC, and LOCAL/.fetched/N, the copies fetched to restore from, each an
 * ordinary root. Listed beneath LOCAL's descriptor: directories whose names are daemon
 * ids (a fetched root's number is one), never links. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ck/catalog.h"
#include "format/copy.h"
#include "io/rootfs.h"
#include "format/layout.h"

/* Replica roots by name, fetched roots by number ("9" before "10"). */
static int order(const void *a, const void *b)
{
    const ck_tier_root *x = a, *y = b;
    if (x->kind != y->kind)
        return x->kind == CK_TIER_REPLICAS ? -1 : 1;
    size_t nx = strlen(x->id), ny = strlen(y->id);
    if (x->kind == CK_TIER_FETCHED && nx != ny)
        return nx < ny ? -1 : 1;
    return strcmp(x->id, y->id);
}

static int list(int lfd, const char *local, const char *dir, ck_tier_kind kind,
                ck_tier_root **v, size_t *n, ck_err *err)
{
    int fd = ck__openat(lfd, dir, O_RDONLY | O_DIRECTORY, 0);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int r = fd >= 0 ? -errno : fd;
        if (fd >= 0)
            close(fd);
        return r == -ENOENT ? 0 : ck_err_set(err, r, "%s/%s: %s", local, dir, ck__why(r));
    }
    struct dirent *de;
    int r = 0;
    while (r == 0 && (de = readdir(d))) {
        if (de->d_type != DT_DIR || ck__copy_source_check(de->d_name, NULL) < 0)
            continue;
        ck_tier_root *p = realloc(*v, (*n + 1) * sizeof *p);
        if (!p) {
            r = ck_err_set(err, -ENOMEM, "%s/%s: out of memory", local, dir);
            break;
        }
        *v = p;
        p = &p[(*n)++];
        p->kind = kind;
        snprintf(p->id, sizeof p->id, "%s", de->d_name);
        if (snprintf(p->path, sizeof p->path, "%s/%s/%s", local, dir, de->d_name) >=
            (int)sizeof p->path)
            r = ck_err_set(err, -ENAMETOOLONG, "%s/%s/%s: path too long", local, dir,
                           de->d_name);
    }
    closedir(d);
    return r;
}

int ck_tier_roots(const char *local, ck_tier_root **out, size_t *n, ck_err *err)
{
    *out = NULL;
    *n = 0;
    int lfd = ck__root_open(local, err);
    if (lfd < 0)
        return lfd;
    int r = list(lfd, local, CK_REPLICAS, CK_TIER_REPLICAS, out, n, err);
    if (r == 0)
        r = list(lfd, local, CK_FETCHED, CK_TIER_FETCHED, out, n, err);
    close(lfd);
    if (r < 0) {
        free(*out);
        *out = NULL;
        *n = 0;
        return r;
    }
    if (*n > 1)
        qsort(*out, *n, sizeof **out, order);
    return 0;
}
