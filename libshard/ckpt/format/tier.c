/* tier.c - the roots a node's local tier holds below itself (ck_tier_roots; see
 * ck/catalog.h and docs/FORMAT.md, "Copies"): LOCAL/.replicas/SRC, the replicas kept for
 * daemon SRC, and LOCAL/.fetched/N, the copies fetched to restore from, each an
 * ordinary root. Listed beneath LOCAL's descriptor: directories whose names are daemon
 * ids (a fetched root's number is one), never links. What else lies there is named by
 * ck_tier_strays, and a root left empty is removed by ck_tier_root_drop. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* What entry de of dir (a descriptor) is, when it is no tier root: NULL when it is one. */
static const char *stray_kind(int fd, const struct dirent *de)
{
    struct stat st;
    if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return NULL;              /* gone meanwhile */
    if (S_ISLNK(st.st_mode))
        return "a symbolic link";
    if (S_ISFIFO(st.st_mode))
        return "a FIFO";
    if (S_ISSOCK(st.st_mode))
        return "a socket";
    if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
        return "a device";
    if (S_ISREG(st.st_mode))
        return "a regular file";
    if (ck__copy_source_check(de->d_name, NULL) < 0)
        return "a directory whose name is no daemon id";
    return NULL;
}

/* The roots under LOCAL/dir into v, or (stray not NULL) what is no root there, each
 * told to stray with its path and what it is. */
static int list(int lfd, const char *local, const char *dir, ck_tier_kind kind,
                ck_tier_root **v, size_t *n, ck_tier_stray_fn stray, void *arg, ck_err *err)
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
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (stray) {
            const char *what = stray_kind(dirfd(d), de);
            char path[4096];
            snprintf(path, sizeof path, "%s/%s/%s", local, dir, de->d_name);
            if (what) {
                stray(arg, path, what);
                (*n)++;
            }
            continue;
        }
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
    int r = list(lfd, local, CK_REPLICAS, CK_TIER_REPLICAS, out, n, NULL, NULL, err);
    if (r == 0)
        r = list(lfd, local, CK_FETCHED, CK_TIER_FETCHED, out, n, NULL, NULL, err);
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

int ck_tier_strays(const char *local, ck_tier_stray_fn fn, void *arg, ck_err *err)
{
    size_t n = 0;
    int lfd = ck__root_open(local, err);
    if (lfd < 0)
        return lfd;
    int r = list(lfd, local, CK_REPLICAS, CK_TIER_REPLICAS, NULL, &n, fn, arg, err);
    if (r == 0)
        r = list(lfd, local, CK_FETCHED, CK_TIER_FETCHED, NULL, &n, fn, arg, err);
    close(lfd);
    return r < 0 ? r : (int)n;
}

int ck_tier_root_drop(const char *local, const ck_tier_root *t, ck_err *err)
{
    /* Empty: no checkpoint and nothing pending (a save or removal in progress, or
     * debris, which recovery removes first). */
    ck_scan sc;
    int r = ck_root_scan(t->path, &sc, err);
    if (r < 0)
        return r;
    bool empty = sc.n_committed == 0 && sc.n_pending == 0;
    ck_scan_free(&sc);
    if (!empty)
        return 0;
    char rel[CK_COPY_ID_MAX + 16];
    int lfd = ck__root_open(local, err);
    if (lfd < 0)
        return lfd;
    snprintf(rel, sizeof rel, "%s/%s", t->kind == CK_TIER_REPLICAS ? CK_REPLICAS : CK_FETCHED,
             t->id);
    int fd = ck__openat(lfd, rel, O_RDONLY | O_DIRECTORY, 0);
    if (fd < 0) {
        close(lfd);
        return fd == -ENOENT ? 0 : ck_err_set(err, fd, "%s: %s", t->path, ck__why(fd));
    }
    /* Only the names an empty root holds: its catalog and its lock, and .pending. What
     * else lies there keeps the root (its rmdir fails), never removed. */
    ck__unlinkat(fd, CK_CATALOG, 0);
    ck__unlinkat(fd, CK_CATALOG_LOCK, 0);
    ck__unlinkat(fd, CK_PENDING, AT_REMOVEDIR);
    close(fd);
    r = ck__unlinkat(lfd, rel, AT_REMOVEDIR);
    close(lfd);
    if (r == -ENOTEMPTY || r == -EEXIST || r == -ENOENT)
        return 0;
    return r < 0 ? ck_err_set(err, r, "%s: rmdir: %s", t->path, ck__why(r)) : 1;
}
