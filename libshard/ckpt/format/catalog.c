/* catalog.c - the root catalog, scan and recovery (see ck/catalog.h and docs/FORMAT.md).
 *
 * Everything under ROOT is reached beneath a descriptor of ROOT, never through a link
 * (io/rootfs.h). The catalog is an LMDB file that is never mapped where it lies: a
 * reader maps a sealed private copy, and a writer, holding the flock of
 * ROOT/catalog.mdb-lock, changes a private copy and renames it into place whole. So a
 * catalog cut short, replaced or planted by someone else can neither fault a reader
 * (SIGBUS) nor lead a writer through a link, and readers need no lock at all.
 */
#include "ck/catalog.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "format/layout.h"
#include "format/manifest.h"
#include "format/owner.h"
#include "format/reader_int.h"
#include "io/rootfs.h"
#include "model/grow.h"
#include "format/catalog.h"

#define CK_DB_CHECKPOINTS "checkpoints"
#define CAT_LOCK_WAIT_MS 10000             /* writers hold it for one small update */

/* The writers of one process are kept apart here, and from other processes by the
 * flock (taken per open file description, so one would do; this keeps the waits of
 * a process's own threads off the file lock's polling). */
static pthread_mutex_t catalog_mu = PTHREAD_MUTEX_INITIALIZER;

typedef struct cat {
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    bool write;
    int root, lock, mem;
    const char *rootpath;
    char path[PATH_MAX];       /* ROOT/catalog.mdb, for messages */
} cat;

static void say(void (*log)(void *arg, const char *msg), void *arg, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(void (*log)(void *arg, const char *msg), void *arg, const char *fmt, ...)
{
    if (!log)
        return;
    char msg[2 * PATH_MAX + CK_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log(arg, msg);
}

/* ---- the catalog file ---- */

/* The writers' lock: bounded, so that nobody holding it for ever stalls a commit. */
static int lock_catalog(cat *c, ck_err *err)
{
    c->lock = ck__lock_open(c->root, CK_CATALOG_LOCK, O_RDWR | O_CREAT, 0644);
    if (c->lock < 0)
        return ck_err_set(err, c->lock, "%s/%s: %s", c->rootpath, CK_CATALOG_LOCK,
                          ck__why(c->lock));
    for (int waited = 0; flock(c->lock, LOCK_EX | LOCK_NB) < 0; waited += 10) {
        if (errno != EWOULDBLOCK && errno != EINTR)
            return ck_err_set(err, -errno, "%s/%s: flock: %s", c->rootpath, CK_CATALOG_LOCK,
                              strerror(errno));
        if (waited >= CAT_LOCK_WAIT_MS)
            return ck_err_set(err, -EBUSY, "%s/%s: another process has held the catalog for "
                              "%d s", c->rootpath, CK_CATALOG_LOCK, CAT_LOCK_WAIT_MS / 1000);
        nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000 * 1000 }, NULL);
    }
    return 0;
}

/* The catalog's private copy in c->mem: -ENOENT when there is none (for a writer, an
 * empty copy instead). */
static int load_catalog(cat *c, ck_err *err)
{
    int fd = ck__openat_reg(c->root, CK_CATALOG, O_RDONLY, 0);
    if (fd == -ENOENT && c->write) {
        c->mem = memfd_create("ck-catalog", MFD_CLOEXEC);
        return c->mem < 0 ? ck_err_set(err, -errno, "%s: memfd_create: %s", c->path,
                                       strerror(errno)) : 0;
    }
    if (fd == -ENOENT)
        return -ENOENT;
    if (fd < 0)
        return ck_err_set(err, fd, "%s: %s", c->path, ck__why(fd));
    int r = ck__mdb_copy(fd, c->path, "a catalog", CK__CATALOG_MAX, !c->write, &c->mem, err);
    close(fd);
    struct stat st;
    /* An empty file is no catalog (LMDB says ENOENT for it): reads list nothing, a
     * writer starts one. */
    if (r == 0 && !c->write && fstat(c->mem, &st) == 0 && st.st_size == 0)
        r = -ENOENT;
    return r;
}

static int cat_env(cat *c, ck_err *err)
{
    char mp[CK_FD_PATH_MAX];
    int r = ck__fd_path(c->mem, mp, err);
    if (r < 0)
        return r;
    int rc = mdb_env_create(&c->env);
    if (rc == MDB_SUCCESS)
        rc = mdb_env_set_maxdbs(c->env, 4);
    if (rc == MDB_SUCCESS)
        rc = mdb_env_set_mapsize(c->env, (size_t)1 << 30);
    /* NOLOCK: the copy is this process's alone. NOSYNC: the copy is not the file; the
     * file is written whole and fsynced before its rename. */
    if (rc == MDB_SUCCESS)
        rc = mdb_env_open(c->env, mp, MDB_NOSUBDIR | MDB_NOLOCK |
                          (c->write ? MDB_NOSYNC : MDB_RDONLY), 0644);
    if (rc == MDB_SUCCESS)
        rc = mdb_txn_begin(c->env, NULL, c->write ? 0 : MDB_RDONLY, &c->txn);
    if (rc == MDB_SUCCESS)
        rc = mdb_dbi_open(c->txn, CK_DB_CHECKPOINTS, c->write ? MDB_CREATE : 0, &c->dbi);
    if (rc != MDB_SUCCESS)
        return ck_err_set(err, rc == MDB_NOTFOUND ? -EBADMSG : ck__mdb_err(rc), "%s: %s",
                          c->path, mdb_strerror(rc));
    return 0;
}

/* Copies the changed copy into ROOT/.catalog.mdb.tmp and renames it over the catalog:
 * readers see the old file or the new one, whole. */
static int publish(cat *c, ck_err *err)
{
    struct stat st;
    if (fstat(c->mem, &st) == 0 && (uint64_t)st.st_size > CK__CATALOG_MAX)
        return ck_err_set(err, -EFBIG, "%s: it would be %lld bytes, more than readers take "
                          "(%llu): not updated", c->path, (long long)st.st_size,
                          (unsigned long long)CK__CATALOG_MAX);
    ck__unlinkat(c->root, CK_CATALOG_TMP, 0);      /* debris of a writer that died */
    int fd = ck__openat(c->root, CK_CATALOG_TMP, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0)
        return ck_err_set(err, fd, "%s/%s: %s", c->rootpath, CK_CATALOG_TMP, ck__why(fd));
    char buf[1 << 16];
    int r = 0;
    for (off_t off = 0; r == 0;) {
        ssize_t n = pread(c->mem, buf, sizeof buf, off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            r = n < 0 ? -errno : 0;
            break;
        }
        for (ssize_t done = 0; r == 0 && done < n;) {
            ssize_t w = write(fd, buf + done, (size_t)(n - done));
            if (w < 0 && errno != EINTR)
                r = -errno;
            else if (w > 0)
                done += w;
        }
        off += n;
    }
    if (r == 0 && fsync(fd) < 0)
        r = -errno;
    if (close(fd) < 0 && r == 0)
        r = -errno;
    if (r == 0)
        r = ck__renameat(c->root, CK_CATALOG_TMP, c->root, CK_CATALOG, 0);
    if (r < 0) {
        ck__unlinkat(c->root, CK_CATALOG_TMP, 0);
        return ck_err_set(err, r, "%s: writing it: %s", c->path, strerror(-r));
    }
    return 0;
}

static void cat_close(cat *c, bool commit, int *r, ck_err *err)
{
    if (c->txn) {
        if (commit && *r == 0) {
            int rc = mdb_txn_commit(c->txn);
            if (rc != MDB_SUCCESS)
                *r = ck_err_set(err, ck__mdb_err(rc), "%s: commit: %s", c->path, mdb_strerror(rc));
            else if (c->write)
                *r = publish(c, err);
        } else {
            mdb_txn_abort(c->txn);
        }
    }
    if (c->env)
        mdb_env_close(c->env);
    if (c->mem >= 0)
        close(c->mem);
    ck__lock_close(c->lock);
    if (c->root >= 0)
        close(c->root);
    if (c->write)
        pthread_mutex_unlock(&catalog_mu);
}

/* Opens the catalog (a writer holds its lock until cat_close). For reads, a missing
 * catalog is -ENOENT. */
static int cat_open(cat *c, const char *root, bool write, ck_err *err)
{
    memset(c, 0, sizeof *c);
    c->root = c->lock = c->mem = -1;
    c->write = write;
    c->rootpath = root;
    if (write)
        pthread_mutex_lock(&catalog_mu);
    int r = snprintf(c->path, sizeof c->path, "%s/%s", root, CK_CATALOG) >= (int)sizeof c->path
                ? ck_err_set(err, -ENAMETOOLONG, "%s: path too long", root) : 0;
    if (r == 0 && (c->root = ck__root_open(root, err)) < 0)
        r = c->root;
    if (r == 0 && write)
        r = lock_catalog(c, err);
    if (r == 0)
        r = load_catalog(c, err);
    if (r == 0)
        r = cat_env(c, err);
    if (r < 0)
        cat_close(c, false, &r, NULL);
    return r;
}

static int put_entry(cat *c, const ck_info *info, ck_err *err)
{
    ck__wbuf w = { 0 };
    ck__put_version(&w);
    ck__put_u8(&w, CK_STATE_COMMITTED);
    ck__put_u64(&w, info->step);
    ck__put_u64(&w, info->time_ns);
    ck__put_u64(&w, info->data_bytes);
    ck__put_u64(&w, info->n_tensors);
    ck__put_mesh(&w, &info->mesh);
    int r = 0;
    if (w.oom) {
        r = -ENOMEM;
    } else {
        MDB_val k = { .mv_size = strlen(info->name), .mv_data = (void *)info->name };
        MDB_val v = { .mv_size = w.len, .mv_data = w.p };
        int rc = mdb_put(c->txn, c->dbi, &k, &v, 0);
        if (rc != MDB_SUCCESS)
            r = ck_err_set(err, ck__mdb_err(rc), "%s: %s", c->path, mdb_strerror(rc));
    }
    ck__wbuf_free(&w);
    return r;
}

static int del_entry(cat *c, const char *name, ck_err *err)
{
    MDB_val k = { .mv_size = strlen(name), .mv_data = (void *)name };
    int rc = mdb_del(c->txn, c->dbi, &k, NULL);
    if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
        return ck_err_set(err, ck__mdb_err(rc), "%s: %s", c->path, mdb_strerror(rc));
    return 0;
}

int ck__catalog_put(const char *root, const ck_info *info, ck_err *err)
{
    cat c;
    int r = cat_open(&c, root, true, err);
    if (r < 0)
        return r;
    r = put_entry(&c, info, err);
    cat_close(&c, true, &r, err);
    return r;
}

int ck__catalog_del(const char *root, const char *name, ck_err *err)
{
    cat c;
    int r = cat_open(&c, root, true, err);
    if (r < 0)
        return r;
    r = del_entry(&c, name, err);
    cat_close(&c, true, &r, err);
    return r;
}

static int decode_entry(const char *path, const MDB_val *k, const MDB_val *v, ck_cat_entry *e,
                        ck_err *err)
{
    memset(e, 0, sizeof *e);
    if (k->mv_size == 0 || k->mv_size >= CK_NAME_MAX)
        return ck_err_set(err, -EBADMSG, "%s: an entry has a bad name", path);
    memcpy(e->name, k->mv_data, k->mv_size);
    ck__rbuf r = ck__rbuf_make(v->mv_data, v->mv_size);
    char what[CK_NAME_MAX + 16];
    snprintf(what, sizeof what, "checkpoints/%s", e->name);
    int rc = ck__get_version(&r, path, what, err);
    if (rc < 0)
        return rc;
    e->state = ck__get_u8(&r);
    e->step = ck__get_u64(&r);
    e->time_ns = ck__get_u64(&r);
    e->bytes = ck__get_u64(&r);
    e->n_tensors = ck__get_u64(&r);
    bool ok = ck__get_mesh(&r, &e->mesh);
    if (!ok || !ck__rbuf_done(&r))
        return ck_err_set(err, -EBADMSG, "%s: record %s is malformed", path, what);
    return 0;
}

/* Whether ROOT/name is a committed checkpoint: a directory (not a link) holding a
 * manifest. A manifest that is a link or a FIFO still marks it committed, so that
 * opening it reports the checkpoint as bad rather than hiding it. */
static bool committed_at(int rootfd, const char *name)
{
    char rel[PATH_MAX];
    struct stat st;
    return ck__name_manifest(name, rel, sizeof rel) == 0 && ck__statat(rootfd, rel, &st) == 0;
}

/* The catalog's entries (c open for reading) in name order into *out (malloc'd). With
 * view, a listing: keys that are no checkpoint name are counted in view->bad_names and
 * neither decoded nor kept, and entries whose checkpoint is not committed beneath the
 * root go to view->gone. The arrays grow as records come: a count in the file is not
 * trusted. */
static int read_entries(cat *c, ck_cat_entry **out, size_t *n, ck_cat_view *view,
                        ck_err *err)
{
    ck_cat_entry *arr = NULL;
    size_t cap = 0, cap_gone = 0, i = 0;
    MDB_cursor *cur = NULL;
    int r = 0, rc = mdb_cursor_open(c->txn, c->dbi, &cur);
    MDB_val k, v;
    for (rc = rc ? rc : mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == MDB_SUCCESS;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        char name[CK_NAME_MAX] = "";
        if (view) {
            /* A planted key ("../../etc/passwd", a newline, a NUL inside) is no
             * checkpoint: never shown, whatever its record holds. */
            bool ok = k.mv_size > 0 && k.mv_size < CK_NAME_MAX &&
                      !memchr(k.mv_data, '\0', k.mv_size);
            if (ok) {
                memcpy(name, k.mv_data, k.mv_size);
                name[k.mv_size] = '\0';
                ok = ck__name_check_read("checkpoint", name, NULL) == 0;
            }
            if (!ok) {
                view->bad_names++;
                continue;
            }
        }
        bool gone = view && !committed_at(c->root, name);
        ck_cat_entry **to = gone ? &view->gone : &arr;
        size_t *at = gone ? &view->n_gone : &i;
        if (ck__grow(to, gone ? &cap_gone : &cap, *at + 1, sizeof **to) < 0) {
            r = ck_err_set(err, -ENOMEM, "%s: out of memory listing it", c->path);
            break;
        }
        if ((r = decode_entry(c->path, &k, &v, &(*to)[*at], err)) < 0)
            break;
        (*at)++;
    }
    if (r == 0 && rc != MDB_NOTFOUND && rc != MDB_SUCCESS)
        r = ck_err_set(err, ck__mdb_err(rc), "%s: %s", c->path, mdb_strerror(rc));
    if (cur)
        mdb_cursor_close(cur);
    if (r < 0) {
        free(arr);
        return r;
    }
    *out = arr;
    *n = i;
    return 0;
}

int ck_catalog_list(const char *root, ck_cat_entry **out, size_t *n, ck_err *err)
{
    *out = NULL;
    *n = 0;
    cat c;
    int r = cat_open(&c, root, false, err);
    if (r == -ENOENT)
        return 0;
    if (r < 0)
        return r;
    r = read_entries(&c, out, n, NULL, err);
    cat_close(&c, false, &r, err);
    return r;
}

int ck_catalog_view(const char *root, ck_cat_view *out, ck_err *err)
{
    memset(out, 0, sizeof *out);
    cat c;
    int r = cat_open(&c, root, false, err);
    if (r == -ENOENT)
        return 0;
    if (r < 0)
        return r;
    r = read_entries(&c, &out->entries, &out->n, out, err);
    cat_close(&c, false, &r, err);
    if (r < 0)
        ck_cat_view_free(out);
    return r;
}

void ck_cat_view_free(ck_cat_view *v)
{
    free(v->entries);
    free(v->gone);
    memset(v, 0, sizeof *v);
}

/* ---- what the directories hold ---- */

static int push(char ***arr, size_t *n, const char *s)
{
    char **p = realloc(*arr, (*n + 1) * sizeof *p);
    if (!p)
        return -ENOMEM;
    *arr = p;
    if (!(p[*n] = strdup(s)))
        return -ENOMEM;
    (*n)++;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads the names in the directory fd (taken over): push(name) for each that keep()
 * takes. */
static int read_names(int fd, bool (*keep)(const char *name, void *arg), void *arg,
                      char ***arr, size_t *n)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        int r = -errno;
        close(fd);
        return r;
    }
    struct dirent *de;
    int r = 0;
    while (r == 0 && (de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && keep(de->d_name, arg))
            r = push(arr, n, de->d_name);
    closedir(d);
    if (r == 0 && *n)
        qsort(*arr, *n, sizeof(char *), cmp_str);
    return r;
}

static bool keep_committed(const char *name, void *arg)
{
    /* Dot files, the catalog and its lock, anything not ours: no manifest. */
    return ck__name_check_read("checkpoint", name, NULL) == 0 && committed_at(*(int *)arg, name);
}

/* A save's lock file (format/owner.h) is no save by itself: recovery removes it with
 * the save it guards, or alone once nobody holds it. */
static bool keep_pending(const char *name, void *arg)
{
    (void)arg;
    return ck__pending_entry(name, NULL, NULL) != CK_PEND_LOCK;
}

/* ROOT/.pending held open in *fd, or -1 when there is none. A link, or anything but a
 * directory, is refused by name: neither a scan nor a recovery goes through it. */
static int open_pending(int rootfd, const char *root, int *fd, ck_err *err)
{
    *fd = ck__openat(rootfd, CK_PENDING, O_RDONLY | O_DIRECTORY, 0);
    if (*fd >= 0 || *fd == -ENOENT) {
        *fd = *fd >= 0 ? *fd : -1;
        return 0;
    }
    int r = *fd;
    *fd = -1;
    struct stat st;
    if ((r == -ELOOP || r == -ENOTDIR) && ck__statat(rootfd, CK_PENDING, &st) == 0)
        return ck_err_set(err, S_ISLNK(st.st_mode) ? -ELOOP : -ENOTDIR,
                          "%s/%s is %s, not a directory: refusing the root (nothing under it "
                          "is followed or removed; remove it by hand)", root, CK_PENDING,
                          ck__ftype(st.st_mode));
    return ck_err_set(err, r, "%s/%s: %s", root, CK_PENDING, ck__why(r));
}

int ck_root_scan(const char *root, ck_scan *out, ck_err *err)
{
    memset(out, 0, sizeof *out);
    int rootfd = ck__root_open(root, err), pend = -1;
    if (rootfd < 0)
        return rootfd;
    int r = open_pending(rootfd, root, &pend, err);
    int dup = r == 0 ? fcntl(rootfd, F_DUPFD_CLOEXEC, 0) : -1;
    if (r == 0 && dup < 0)
        r = ck_err_set(err, -errno, "%s: %s", root, strerror(errno));
    if (r == 0 && (r = read_names(dup, keep_committed, &rootfd, &out->committed,
                                  &out->n_committed)) < 0)
        ck_err_set(err, r, "%s: scanning: %s", root, strerror(-r));
    if (r == 0 && pend >= 0 &&
        (r = read_names(pend, keep_pending, NULL, &out->pending, &out->n_pending)) < 0)
        ck_err_set(err, r, "%s/%s: scanning: %s", root, CK_PENDING, strerror(-r));
    else if (r < 0 && pend >= 0)
        close(pend);
    close(rootfd);
    if (r < 0)
        ck_scan_free(out);
    return r;
}

int ck_pending_dir(const char *root, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s/%s", root, CK_PENDING);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

void ck_scan_free(ck_scan *s)
{
    for (size_t i = 0; i < s->n_committed; i++)
        free(s->committed[i]);
    for (size_t i = 0; i < s->n_pending; i++)
        free(s->pending[i]);
    free(s->committed);
    free(s->pending);
    memset(s, 0, sizeof *s);
}

int ck_pending_live(const char *root, const char *entry, char *who, size_t len, ck_err *err)
{
    char name[CK_NAME_MAX], lock[PATH_MAX];
    if (ck__pending_entry(entry, name, NULL) == CK_PEND_OTHER)
        return ck_err_set(err, -EINVAL, "%s/%s/%s: a name no save makes", root, CK_PENDING,
                          entry);
    int r = ck__save_lock_rel(name, lock, err);
    if (r < 0)
        return r;
    int rootfd = ck__root_open(root, err);
    if (rootfd < 0)
        return rootfd;
    if (len)
        who[0] = '\0';
    r = ck__lock_held(rootfd, lock, who, len);
    close(rootfd);
    if (r < 0)
        return ck_err_set(err, r, "%s/%s: %s", root, lock, ck__why(r));
    return r;
}

/* ---- rebuilding the catalog ---- */

/* Renames ROOT/file to ROOT/file.bad-SECONDS (a suffix added while taken): the old file
 * is kept aside, never removed. */
static int set_aside(int rootfd, const char *root, const char *file, char *kept, size_t len,
                     ck_err *err)
{
    long long t = (long long)time(NULL);
    int r = -EEXIST;
    for (int i = 0; i < 100 && r == -EEXIST; i++) {
        if (i == 0)
            snprintf(kept, len, "%s.bad-%lld", file, t);
        else
            snprintf(kept, len, "%s.bad-%lld.%d", file, t, i);
        r = ck__renameat(rootfd, file, rootfd, kept, RENAME_NOREPLACE);
    }
    if (r < 0)
        return ck_err_set(err, r, "%s/%s: keeping it aside as %s: %s", root, file, kept,
                          strerror(-r));
    return 0;
}

/* The catalog's lock must be a regular file for any writer to take it: anything else
 * (a link, a FIFO) is kept aside. */
static int lock_file_usable(int rootfd, const char *root, void (*log)(void *arg, const char *msg),
                            void *arg, ck_err *err)
{
    struct stat st;
    char kept[64];
    if (ck__statat(rootfd, CK_CATALOG_LOCK, &st) < 0 || S_ISREG(st.st_mode))
        return 0;
    int r = set_aside(rootfd, root, CK_CATALOG_LOCK, kept, sizeof kept, err);
    if (r == 0)
        say(log, arg, "%s/%s was %s, not a lock file: kept aside as %s/%s", root, CK_CATALOG_LOCK,
            ck__ftype(st.st_mode), root, kept);
    return r;
}

/* The readable committed checkpoints' records, each read without the catalog's lock
 * (a manifest may be large); unreadable ones are counted and logged. */
static int read_infos(const char *root, const ck_scan *sc, ck_info **infos, size_t *n,
                      ck_rebuild_report *rep, void (*log)(void *arg, const char *msg),
                      void *arg)
{
    *infos = calloc(sc->n_committed ? sc->n_committed : 1, sizeof **infos);
    *n = 0;
    if (!*infos)
        return -ENOMEM;
    for (size_t i = 0; i < sc->n_committed; i++) {
        ck_ckpt *ck;
        ck_err e2 = { 0 };
        if (ck_open(root, sc->committed[i], &ck, &e2) < 0) {
            rep->unreadable++;
            say(log, arg, "skipping unreadable checkpoint: %s", ck_err_msg(&e2));
            continue;
        }
        (*infos)[(*n)++] = *ck_get_info(ck);
        ck_close(ck);
    }
    return 0;
}

int ck_catalog_rebuild(const char *root, ck_rebuild_report *rep,
                       void (*log)(void *arg, const char *msg), void *arg, ck_err *err)
{
    memset(rep, 0, sizeof *rep);
    ck_scan sc;
    int r = ck_root_scan(root, &sc, err);
    if (r < 0)
        return r;
    int rootfd = ck__root_open(root, err);
    if (rootfd < 0) {
        ck_scan_free(&sc);
        return rootfd;
    }
    ck_cat_entry *ents = NULL;
    size_t nents = 0, ninfo = 0;
    ck_info *infos = NULL;
    ck_err why = { 0 };
    r = lock_file_usable(rootfd, root, log, arg, err);
    int lr = r == 0 ? ck_catalog_list(root, &ents, &nents, &why) : 0;
    if (lr < 0 && lr != -ENOMEM) {
        /* Whatever it holds (an unknown version, damage, a FIFO, a link): the
         * directories are the truth, and the old file is kept aside, not removed. */
        char kept[64];
        if ((r = set_aside(rootfd, root, CK_CATALOG, kept, sizeof kept, err)) == 0)
            say(log, arg, "catalog is unreadable (%s); kept aside as %s/%s, recreating it from "
                "the directories", ck_err_msg(&why), root, kept);
    } else if (lr < 0) {
        r = ck_err_set(err, lr, "%s", ck_err_msg(&why));
    }
    if (r == 0)
        r = read_infos(root, &sc, &infos, &ninfo, rep, log, arg);
    cat c;
    bool opened = r == 0 && (r = cat_open(&c, root, true, err)) == 0;
    for (size_t i = 0; r == 0 && i < nents; i++) {
        /* A writer may have committed it since the scan (recovery runs beside live
         * writers): the directory decides. */
        if ((sc.n_committed && bsearch(&(const char *){ ents[i].name }, sc.committed,
                                       sc.n_committed, sizeof(char *), cmp_str)) ||
            committed_at(rootfd, ents[i].name))
            continue;
        r = del_entry(&c, ents[i].name, err);
        rep->removed++;
    }
    for (size_t i = 0; r == 0 && i < ninfo; i++) {
        bool had = false;
        for (size_t j = 0; j < nents && !had; j++)
            had = strcmp(ents[j].name, infos[i].name) == 0;
        r = put_entry(&c, &infos[i], err);
        if (had)
            rep->kept++;
        else
            rep->added++;
    }
    if (opened)
        cat_close(&c, true, &r, err);
    free(ents);
    free(infos);
    close(rootfd);
    ck_scan_free(&sc);
    return r;
}

/* ---- recovery ---- */

/* Removes the pending directory rel (".pending/ENTRY", beneath rootfd): the files in it
 * a save makes, then itself. Nothing else is touched and nothing is followed: a link
 * in it is removed as a link; a name no save makes keeps the directory, and is logged.
 * 0, 1 when it was kept, or -errno. */
static int remove_pending_dir(int rootfd, const char *root, const char *entry,
                              ck__pending_kind kind, void (*log)(void *arg, const char *msg),
                              void *arg, ck_err *err)
{
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "%s/%s", CK_PENDING, entry);
    int fd = ck__openat(rootfd, rel, O_RDONLY | O_DIRECTORY, 0);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int r = fd >= 0 ? -errno : fd;
        if (fd >= 0)
            close(fd);
        return ck_err_set(err, r, "%s/%s: %s", root, rel, ck__why(r));
    }
    struct dirent *de;
    int r = 0;
    bool kept = false;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (!ck__made_by_save(kind, de->d_name)) {
            say(log, arg, "kept %s/%s/%s: it holds %s, which no save makes (remove it by hand)",
                root, CK_PENDING, entry, de->d_name);
            kept = true;
            continue;
        }
        int u = unlinkat(dirfd(d), de->d_name, 0) < 0 ? -errno : 0;
        if (u == -EISDIR || u == -EPERM) {
            say(log, arg, "kept %s/%s/%s: its %s is a directory, which no save makes", root,
                CK_PENDING, entry, de->d_name);
            kept = true;
        } else if (u < 0 && u != -ENOENT && r == 0) {
            r = ck_err_set(err, u, "%s/%s/%s: %s", root, rel, de->d_name, strerror(-u));
        }
    }
    closedir(d);
    if (r == 0 && !kept && (r = ck__unlinkat(rootfd, rel, AT_REMOVEDIR)) < 0)
        ck_err_set(err, r, "%s/%s: %s", root, rel, strerror(-r));
    return r < 0 ? r : kept;
}

/* Removes one pending entry if its owner is dead: 1 removed, 0 kept, -errno. */
static int recover_entry(int rootfd, const char *root, int pend, const char *entry,
                         void (*log)(void *arg, const char *msg), void *arg, ck_err *err)
{
    char lock[PATH_MAX], name[CK_NAME_MAX], who[256];
    struct stat st;
    if (fstatat(pend, entry, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return 0;               /* gone since the scan: its writer committed or removed it */
    if (!S_ISDIR(st.st_mode)) {
        say(log, arg, "left %s/%s/%s alone: it is %s, and saves make only directories there",
            root, CK_PENDING, entry, ck__ftype(st.st_mode));
        return 0;
    }
    ck__pending_kind kind = ck__pending_entry(entry, name, NULL);
    if (kind == CK_PEND_OTHER) {
        say(log, arg, "left %s/%s/%s alone: no save makes such a name", root, CK_PENDING, entry);
        return 0;
    }
    int fd = -1, r = ck__save_lock_rel(name, lock, err);
    if (r == 0 && (r = ck__lock_probe(rootfd, lock, &fd, who, sizeof who)) < 0) {
        if (r == -ELOOP || r == CK_ENOTREG) {
            say(log, arg, "kept save %s/%s/%s: its lock %s/%s is %s (remove it by hand)", root,
                CK_PENDING, entry, root, lock, ck__why(r));
            return 0;
        }
        ck_err_set(err, r, "%s/%s: %s", root, lock, strerror(-r));
    }
    if (r == 0)
        say(log, arg, "kept save in progress %s/%s/%s: its writer is alive (%s)", root,
            CK_PENDING, entry, who);
    if (r <= 0)
        return r;
    /* Held by us now (or never taken): nobody can start a save of NAME until the
     * lock is dropped below. */
    r = remove_pending_dir(rootfd, root, entry, kind, log, arg, err);
    ck__lock_drop(rootfd, lock, &fd);
    if (r == 0)
        say(log, arg, "removed incomplete save %s/%s/%s", root, CK_PENDING, entry);
    return r < 0 ? r : r == 0;
}

/* Lock files whose saves are gone and whose holders died (a crash between the commit
 * rename and the drop of the lock). A lock path that is not a regular file is left. */
static void drop_stale_locks(int rootfd, int pend)
{
    char rel[PATH_MAX], who[256];
    int fd = fcntl(pend, F_DUPFD_CLOEXEC, 0);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d && fd >= 0)
        close(fd);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        int held;
        snprintf(rel, sizeof rel, "%s/%s", CK_PENDING, de->d_name);
        if (ck__pending_entry(de->d_name, NULL, NULL) == CK_PEND_LOCK && ck__lock_probe(rootfd, rel, &held, who, sizeof who) == 1)
            ck__lock_drop(rootfd, rel, &held);
    }
    if (d)
        closedir(d);
}

/* The heartbeats (ROOT/.ckptd.ID.beat, save/meet.h) and peer addresses
 * (ROOT/.ckptd.ID.peer, ckptd's peer service) of engines that died: nobody holds
 * their lock ROOT/.ckptd.ID.lock (format/owner.h). An embedded engine of a killed
 * process leaves both; its id is never used again (it holds a pid). Beneath rootfd,
 * as every path of recovery: a file or lock that is a link is left alone. */
static void drop_dead_beats(int rootfd, ck__engine_file kind)
{
    char id[CK_NODE_ID_MAX], lock[CK_NODE_ID_MAX + 16], who[256];
    int fd = fcntl(rootfd, F_DUPFD_CLOEXEC, 0);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d && fd >= 0)
        close(fd);
    /* The duplicate shares rootfd's position, which an earlier walk left at the end. */
    if (d)
        rewinddir(d);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (!ck__engine_file_of(de->d_name, kind, id) || de->d_type == DT_LNK ||
            ck__name_engine(id, CK_ENGINE_LOCK, lock, sizeof lock) < 0)
            continue;
        int held;
        if (ck__lock_probe(rootfd, lock, &held, who, sizeof who) != 1)
            continue;
        unlinkat(rootfd, de->d_name, 0);
        ck__lock_drop(rootfd, lock, &held);
    }
    if (d)
        closedir(d);
}

static int sync_pending(int rootfd, int pend, const char *root, ck_err *err)
{
    ck_engine *e = ck_engine_default();
    int r = e->ops->fsync(e, pend);
    bool first = r < 0;
    if (r == 0)
        r = e->ops->fsync(e, rootfd);
    return r < 0 ? ck_err_set(err, r, "%s%s: fsync before recovery: %s", root,
                              first ? "/" CK_PENDING : "", strerror(-r)) : 0;
}

int ck_root_recover(const char *root, size_t *removed, void (*log)(void *arg, const char *msg),
                    void *arg, ck_err *err)
{
    ck_scan sc;
    int r = ck_root_scan(root, &sc, err);
    if (r < 0)
        return r;
    int rootfd = ck__root_open(root, err), pend = -1;
    r = rootfd < 0 ? rootfd : open_pending(rootfd, root, &pend, err);
    size_t n = 0;
    /* A removal's rename into .pending may not be durable yet (its process died before
     * its fsyncs): made durable before any of its files goes, or a power cut could
     * bring the checkpoint back with files missing (docs/FORMAT.md, "Removing a
     * checkpoint"). */
    if (r >= 0 && pend >= 0 && sc.n_pending)
        r = sync_pending(rootfd, pend, root, err);
    for (size_t i = 0; r >= 0 && pend >= 0 && i < sc.n_pending; i++)
        if ((r = recover_entry(rootfd, root, pend, sc.pending[i], log, arg, err)) == 1)
            n++;
    ck_scan_free(&sc);
    if (removed)
        *removed = n;
    if (r >= 0 && pend >= 0)
        drop_stale_locks(rootfd, pend);
    if (r >= 0 && rootfd >= 0) {
        drop_dead_beats(rootfd, CK_ENGINE_BEAT);
        drop_dead_beats(rootfd, CK_ENGINE_PEER);
    }
    if (pend >= 0)
        close(pend);
    if (rootfd >= 0)
        close(rootfd);
    if (r < 0)
        return r;
    ck_rebuild_report rep;
    return ck_catalog_rebuild(root, &rep, log, arg, err);
}
