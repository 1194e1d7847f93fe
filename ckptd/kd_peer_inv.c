/* kd_peer_inv.c - the copies a node's local tier holds (docs/FORMAT.md, "Copies"):
 *
 *   LOCAL/NAME                 its own copies: complete, or partial (NAME/copy)
 *   LOCAL/.replicas/SRC/NAME   replicas of daemon SRC's copies, kept for it
 *   LOCAL/.fetched/N/NAME      copies fetched from peers to restore from, one root per
 *                              fetch (N a number), so that no two fetches ever meet
 *
 * Each of these roots is an ordinary root (catalog, .pending, locks, recovery). A
 * replica or fetched root is made by this daemon, mode 0700, and is reached only as a
 * directory of this user, never through a link: a peer names SRC, and nothing it names
 * may lead a write outside LOCAL. What fails to open as a checkpoint is left out.
 */
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
#include "format/layout.h"

/* Calls fn for every copy under LOCAL that opens, own copies first, then each replica
 * root's in name order, then each fetched root's in the order fetched; a non-zero
 * return stops the walk. */
typedef int (*copy_fn)(const char *root, const char *source, uint8_t kind, ck_ckpt *ck,
                       void *arg);

static int each_in_root(const char *root, const char *source, uint8_t kind, copy_fn fn,
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
        r = fn(root, cp->partial ? cp->source : source, kind, ck, arg);
        ck_close(ck);
    }
    ck_scan_free(&sc);
    return r;
}

static int each_copy(const char *local, const char *self, copy_fn fn, void *arg, ck_err *err)
{
    ck_tier_root *v = NULL;
    size_t n = 0;
    int r = each_in_root(local, self, KD_COPY_OWN, fn, arg, err);
    if (r == 0)
        r = ck_tier_roots(local, &v, &n, err);
    for (size_t i = 0; r == 0 && i < n; i++) {
        bool rep = v[i].kind == CK_TIER_REPLICAS;
        /* A root that went bad is no reason to hide the others. */
        if (each_in_root(v[i].path, rep ? v[i].id : self, rep ? KD_COPY_REPLICA : KD_COPY_FETCHED,
                         fn, arg, NULL) > 0)
            r = 1;
    }
    free(v);
    return r;
}

typedef struct scan {
    kd_peer_copy *v;
    char (*roots)[PATH_MAX];       /* NULL: not wanted */
    size_t n;
} scan;

static int add_copy(const char *root, const char *source, uint8_t kind, ck_ckpt *ck, void *arg)
{
    scan *s = arg;
    const ck_info *in = ck_get_info(ck);
    const ck_copy *cp = ck_get_copy(ck);
    kd_peer_copy *v = realloc(s->v, (s->n + 1) * sizeof *v);
    if (!v)
        return -ENOMEM;
    s->v = v;
    if (s->roots) {
        char (*roots)[PATH_MAX] = realloc(s->roots, (s->n + 1) * sizeof *roots);
        if (!roots)
            return -ENOMEM;
        s->roots = roots;
        snprintf(roots[s->n], PATH_MAX, "%s", root);
    }
    kd_peer_copy *c = &v[s->n];
    *c = (kd_peer_copy){ .step = in->step, .time_ns = in->time_ns, .kind = kind,
                         .complete = !cp->partial,
                         .n_files = in->n_files, .n_held = cp->files_held };
    snprintf(c->name, sizeof c->name, "%s", in->name);
    snprintf(c->source, sizeof c->source, "%s", source);
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

int kd_inv_scan(const char *local, const char *self, kd_peer_copy **out,
                char (**roots)[PATH_MAX], size_t *n, ck_err *err)
{
    scan s = { 0 };
    if (roots && !(s.roots = malloc(sizeof *s.roots)))
        return ck_err_set(err, -ENOMEM, "out of memory");
    int r = each_copy(local, self, add_copy, &s, err);
    if (r < 0) {
        kd_peer_copies_free(s.v, s.n);
        free(s.roots);
        return r == -ENOMEM ? ck_err_set(err, r, "out of memory") : r;
    }
    *out = s.v;
    *n = s.n;
    if (roots)
        *roots = s.roots;
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

static int match(const char *root, const char *source, uint8_t kind, ck_ckpt *ck, void *arg)
{
    find *f = arg;
    const kd_preq *a = f->ask;
    (void)kind;
    if (strcmp(ck_get_info(ck)->name, a->name) || (a->source[0] && strcmp(source, a->source)) ||
        (a->time_ns && ck_get_info(ck)->time_ns != a->time_ns))
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

/* LOCAL/DIR/SUB, made (0700) if absent, or only when new (fresh: -EEXIST when there):
 * directories of this user, never links. */
static int sub_root(const char *local, const char *dir, const char *sub, bool fresh,
                    char *root, ck_err *err)
{
    char rel[CK_COPY_ID_MAX + 16];
    int r = ck__copy_source_check(sub, err);
    int lfd = r < 0 ? r : ck__root_open(local, err);
    if (lfd < 0)
        return lfd;
    snprintf(rel, sizeof rel, "%s/%s", dir, sub);
    r = ck__mkdirat(lfd, dir, 0700);
    if (r == 0 || r == -EEXIST)
        r = ck__mkdirat(lfd, rel, 0700);
    if (r == -EEXIST && fresh) {
        close(lfd);
        return r;
    }
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

int kd_inv_replica_root(const char *local, const char *src, char *root, ck_err *err)
{
    return sub_root(local, CK_REPLICAS, src, false, root, err);
}

int kd_inv_fetch_root(const char *local, char *root, ck_err *err)
{
    ck_tier_root *v;
    size_t n;
    char num[24];
    int r = ck_tier_roots(local, &v, &n, err);
    if (r < 0)
        return r;
    /* After the highest number there is (fetched roots come last, by number); a root
     * made meanwhile by hand only moves it on. */
    unsigned long long next = n && v[n - 1].kind == CK_TIER_FETCHED
                            ? strtoull(v[n - 1].id, NULL, 10) + 1 : 1;
    free(v);
    for (unsigned tries = 0; tries < 1000; tries++, next++) {
        snprintf(num, sizeof num, "%llu", next);
        if ((r = sub_root(local, CK_FETCHED, num, true, root, err)) != -EEXIST)
            return r;
    }
    return ck_err_set(err, -EEXIST, "%s/%s: no free number for a new fetch", local, CK_FETCHED);
}

void kd_inv_fetch_drop(const char *root, const char *name)
{
    /* What a failed copy leaves of its root: the name's lock and .pending. Anything
     * else there (a copy committed meanwhile) keeps the root: rmdir fails. */
    char lock[CK_NAME_MAX + 32];
    int fd = ck__root_open(root, NULL);
    if (fd < 0)
        return;
    if (ck__name_save_lock(name, lock, sizeof lock) == 0)
        ck__unlinkat(fd, lock, 0);
    ck__unlinkat(fd, CK_PENDING, AT_REMOVEDIR);
    close(fd);
    rmdir(root);
}

int kd_inv_recover(const char *local, void (*log)(void *arg, const char *msg), void *arg,
                   ck_err *err)
{
    size_t removed = 0, n = 0;
    ck_tier_root *v = NULL;
    int r = ck_root_recover(local, &removed, log, arg, err);
    if (r == 0)
        r = ck_tier_roots(local, &v, &n, err);
    for (size_t i = 0; r == 0 && i < n; i++) {
        size_t k = 0;
        r = ck_root_recover(v[i].path, &k, log, arg, err);
        removed += k;
    }
    free(v);
    if (r == 0 && log) {
        char msg[PATH_MAX + 128];
        snprintf(msg, sizeof msg, "recovered the local tier %s: removed %zu incomplete copies "
                 "of dead writers", local, removed);
        log(arg, msg);
    }
    return r;
}
