/* kd_peer_inv.c - the copies a node's local tier holds (docs/FORMAT.md, "Copies"):
 *
 *   LOCAL/NAME                 its own copies: complete, or partial (NAME/copy)
 *   LOCAL/.replicas/SRC/NAME   replicas of daemon SRC's copies, kept for it
 *
 * Each of these roots is an ordinary root (catalog, .pending, locks, recovery). A
 * replica root is made by this daemon, mode 0700, and is reached only as a directory
 * of this user, never through a link: a peer names SRC, and nothing it names may
 * lead a write outside LOCAL. What fails to open as a checkpoint is left out.
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kd.h"

#include "ck/catalog.h"
#include "format/copy.h"
#include "io/rootfs.h"

/* Calls fn for every copy under LOCAL that opens, own copies first, then each replica
 * root's in name order; a non-zero return stops the walk. */
typedef int (*copy_fn)(const char *root, const char *source, bool replica, ck_ckpt *ck,
                       void *arg);

static int each_in_root(const char *root, const char *source, bool replica, copy_fn fn,
                        void *arg, ck_err *err)
{
    ck_scan sc;
    int r = ck_root_scan(root, &sc, err);
    if (r < 0)
        return r;
    for (size_t i = 0; r == 0 && i < sc.n_committed; i++) {
        ck_ckpt *ck;
        if (ck_open(root, sc.committed[i], &ck, NULL) < 0)
            continue;
        const ck_copy *cp = ck_get_copy(ck);
        r = fn(root, cp->partial ? cp->source : source, replica, ck, arg);
        ck_close(ck);
    }
    ck_scan_free(&sc);
    return r;
}

/* The names under LOCAL/.replicas that are replica roots: daemon ids, directories. */
static int replica_sources(const char *local, char ***out, size_t *n)
{
    *out = NULL;
    *n = 0;
    int lfd = ck__root_open(local, NULL);
    int fd = lfd < 0 ? lfd : ck__openat(lfd, KD_REPLICAS, O_RDONLY | O_DIRECTORY, 0);
    if (lfd >= 0)
        close(lfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return fd == -ENOENT || fd >= 0 ? 0 : fd;
    }
    struct dirent *de;
    int r = 0;
    while (r == 0 && (de = readdir(d))) {
        if (de->d_type != DT_DIR || ck__copy_source_check(de->d_name, NULL) < 0)
            continue;
        char **p = realloc(*out, (*n + 1) * sizeof *p);
        if (!p || !(p[*n] = strdup(de->d_name))) {
            *out = p ? p : *out;
            r = -ENOMEM;
            break;
        }
        *out = p;
        (*n)++;
    }
    closedir(d);
    for (size_t i = 1; i < *n; i++)       /* a few sources: insertion sort */
        for (size_t j = i; j > 0 && strcmp((*out)[j - 1], (*out)[j]) > 0; j--) {
            char *t = (*out)[j];
            (*out)[j] = (*out)[j - 1];
            (*out)[j - 1] = t;
        }
    return r;
}

static int each_copy(const char *local, const char *self, copy_fn fn, void *arg, ck_err *err)
{
    int r = each_in_root(local, self, false, fn, arg, err);
    char **src = NULL;
    size_t n = 0;
    if (r == 0 && (r = replica_sources(local, &src, &n)) < 0)
        return ck_err_set(err, r, "%s/%s: %s", local, KD_REPLICAS, strerror(-r));
    for (size_t i = 0; i < n; i++) {
        char root[PATH_MAX];
        snprintf(root, sizeof root, "%s/%s/%s", local, KD_REPLICAS, src[i]);
        /* A replica root that went bad is no reason to hide the others. */
        if (r == 0 && each_in_root(root, src[i], true, fn, arg, NULL) > 0)
            r = 1;
        free(src[i]);
    }
    free(src);
    return r;
}

typedef struct scan {
    kd_peer_copy *v;
    size_t n;
} scan;

static int add_copy(const char *root, const char *source, bool replica, ck_ckpt *ck, void *arg)
{
    scan *s = arg;
    const ck_info *in = ck_get_info(ck);
    const ck_copy *cp = ck_get_copy(ck);
    kd_peer_copy *v = realloc(s->v, (s->n + 1) * sizeof *v);
    if (!v)
        return -ENOMEM;
    s->v = v;
    kd_peer_copy *c = &v[s->n];
    *c = (kd_peer_copy){ .step = in->step, .replica = replica, .complete = !cp->partial,
                         .n_files = in->n_files, .n_held = cp->files_held };
    snprintf(c->name, sizeof c->name, "%s", in->name);
    snprintf(c->source, sizeof c->source, "%s", source);
    (void)root;
    if (cp->partial && cp->files_held) {
        if (!(c->held = calloc(cp->files_held, sizeof *c->held)))
            return -ENOMEM;
        for (uint32_t f = 0, k = 0; f < in->n_files; f++)
            if (ck_file_held(ck, f))
                snprintf(c->held[k++], sizeof c->held[0], "%s", ck_file_get(ck, f)->name);
    }
    s->n++;
    return 0;
}

int kd_inv_scan(const char *local, const char *self, kd_peer_copy **out, size_t *n,
                ck_err *err)
{
    scan s = { 0 };
    int r = each_copy(local, self, add_copy, &s, err);
    if (r < 0) {
        kd_peer_copies_free(s.v, s.n);
        return r == -ENOMEM ? ck_err_set(err, r, "out of memory") : r;
    }
    *out = s.v;
    *n = s.n;
    return 0;
}

typedef struct find {
    const kd_preq *ask;
    char root[PATH_MAX];
    char source[CK_COPY_ID_MAX];
    uint32_t best;                 /* files held by the copy found (ask->all) */
    bool found;
    char missing[CK_FILE_NAME_MAX];/* a file the copies of the name lack */
} find;

static int match(const char *root, const char *source, bool replica, ck_ckpt *ck, void *arg)
{
    find *f = arg;
    const kd_preq *a = f->ask;
    (void)replica;
    if (strcmp(ck_get_info(ck)->name, a->name) || (a->source[0] && strcmp(source, a->source)))
        return 0;
    if (a->all) {
        uint32_t held = ck_get_copy(ck)->files_held;
        if (!f->found || held > f->best) {
            snprintf(f->root, sizeof f->root, "%s", root);
            snprintf(f->source, sizeof f->source, "%s", source);
            f->best = held;
            f->found = true;
        }
        return 0;
    }
    for (uint32_t i = 0; i < a->n; i++) {
        bool has = false;
        for (uint32_t id = 0; !has && id < ck_get_info(ck)->n_files; id++)
            has = ck_file_held(ck, id) && !strcmp(ck_file_get(ck, id)->name, a->files[i].name);
        if (!has) {
            snprintf(f->missing, sizeof f->missing, "%s", a->files[i].name);
            return 0;
        }
    }
    snprintf(f->root, sizeof f->root, "%s", root);
    snprintf(f->source, sizeof f->source, "%s", source);
    f->found = true;
    return 1;
}

int kd_inv_find(const char *local, const char *self, const kd_preq *ask, char *root,
                size_t len, char source[CK_COPY_ID_MAX], ck_err *err)
{
    find f = { .ask = ask };
    int r = each_copy(local, self, match, &f, err);
    if (r < 0)
        return r;
    if (!f.found)
        return ck_err_set(err, -ENOENT, "no copy of %s%s%s here holds %s", ask->name,
                          ask->source[0] ? " from ckptd " : "", ask->source,
                          f.missing[0] ? f.missing : "what was asked");
    snprintf(root, len, "%s", f.root);
    snprintf(source, CK_COPY_ID_MAX, "%s", f.source);
    return 0;
}

int kd_inv_replica_root(const char *local, const char *src, char *root, ck_err *err)
{
    char rel[CK_COPY_ID_MAX + sizeof KD_REPLICAS + 1];
    int r = ck__copy_source_check(src, err);
    int lfd = r < 0 ? r : ck__root_open(local, err);
    if (lfd < 0)
        return lfd;
    snprintf(rel, sizeof rel, "%s/%s", KD_REPLICAS, src);
    r = ck__mkdirat(lfd, KD_REPLICAS, 0700);
    if (r == 0 || r == -EEXIST)
        r = ck__mkdirat(lfd, rel, 0700);
    int fd = r == 0 || r == -EEXIST ? ck__openat(lfd, rel, O_RDONLY | O_DIRECTORY, 0) : r;
    close(lfd);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_uid != getuid())
        fd = (close(fd), -EPERM);
    if (fd < 0)
        return ck_err_set(err, fd, "%s/%s: %s", local, rel,
                          fd == -EPERM ? "owned by another user" : ck__why(fd));
    close(fd);
    snprintf(root, PATH_MAX, "%s/%s", local, rel);
    return 0;
}

int kd_inv_recover(const char *local, void (*log)(void *arg, const char *msg), void *arg,
                   ck_err *err)
{
    size_t removed = 0, n = 0;
    char **src = NULL;
    int r = ck_root_recover(local, &removed, log, arg, err);
    if (r == 0 && (r = replica_sources(local, &src, &n)) < 0)
        return ck_err_set(err, r, "%s/%s: %s", local, KD_REPLICAS, strerror(-r));
    for (size_t i = 0; i < n; i++) {
        char root[PATH_MAX];
        size_t k = 0;
        snprintf(root, sizeof root, "%s/%s/%s", local, KD_REPLICAS, src[i]);
        if (r == 0)
            r = ck_root_recover(root, &k, log, arg, err);
        removed += k;
        free(src[i]);
    }
    free(src);
    if (r == 0 && log) {
        char msg[PATH_MAX + 128];
        snprintf(msg, sizeof msg, "recovered the local tier %s: removed %zu incomplete copies "
                 "of dead writers", local, removed);
        log(arg, msg);
    }
    return r;
}
