/* catalog.c - the root catalog (see ck/catalog.h and docs/FORMAT.md). */
#include "ck/catalog.h"

#include <dirent.h>
#include <pthread.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/manifest.h"
#include "format/owner.h"

#define CK_DB_CHECKPOINTS "checkpoints"

/* LMDB forbids opening one environment twice in a process: its lock file is guarded by
 * fcntl locks, which are per process, so a second open may reinitialise the lock
 * table under the first (a crash seen when two embedded saves committed at once).
 * Every catalog access of the process therefore goes through this one lock; other
 * processes (tools, ckptd) are kept apart by LMDB's own locking. */
static pthread_mutex_t catalog_mu = PTHREAD_MUTEX_INITIALIZER;

typedef struct cat {
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    char path[PATH_MAX];
} cat;

static void cat_close(cat *c, bool commit, int *r, ck_err *err)
{
    if (c->txn) {
        if (commit && *r == 0) {
            int rc = mdb_txn_commit(c->txn);
            if (rc != MDB_SUCCESS)
                *r = ck_err_set(err, ck__mdb_err(rc), "%s: commit: %s", c->path, mdb_strerror(rc));
        } else {
            mdb_txn_abort(c->txn);
        }
    }
    if (c->env)
        mdb_env_close(c->env);
    pthread_mutex_unlock(&catalog_mu);
}

static int cat_open_locked(cat *c, const char *root, bool write, ck_err *err)
{
    if (snprintf(c->path, sizeof c->path, "%s/%s", root, CK_CATALOG) >= (int)sizeof c->path)
        return ck_err_set(err, -ENAMETOOLONG, "%s: path too long", root);
    struct stat st;
    bool exists = stat(c->path, &st) == 0;
    if (!write && !exists)
        return -ENOENT;
    /* A catalog cut short would fault inside LMDB; reject it (rebuilding recreates it). */
    int r = exists && st.st_size > 0 ? ck__mdb_precheck(c->path, err) : 0;
    if (r < 0)
        return r;
    int rc = mdb_env_create(&c->env);
    if (rc == MDB_SUCCESS)
        rc = mdb_env_set_maxdbs(c->env, 4);
    if (rc == MDB_SUCCESS)
        rc = mdb_env_set_mapsize(c->env, (size_t)1 << 30);
    if (rc == MDB_SUCCESS)
        rc = mdb_env_open(c->env, c->path, MDB_NOSUBDIR | (write ? 0 : MDB_RDONLY), 0644);
    if (rc == EACCES && !write) {
        /* A read-only root where no writer made the lock file: read without one. */
        mdb_env_close(c->env);
        c->env = NULL;
        rc = mdb_env_create(&c->env);
        if (rc == MDB_SUCCESS)
            rc = mdb_env_set_maxdbs(c->env, 4);
        if (rc == MDB_SUCCESS)
            rc = mdb_env_open(c->env, c->path, MDB_NOSUBDIR | MDB_RDONLY | MDB_NOLOCK, 0644);
    }
    if (rc == MDB_SUCCESS)
        rc = mdb_txn_begin(c->env, NULL, write ? 0 : MDB_RDONLY, &c->txn);
    if (rc == MDB_SUCCESS)
        rc = mdb_dbi_open(c->txn, CK_DB_CHECKPOINTS, write ? MDB_CREATE : 0, &c->dbi);
    if (rc != MDB_SUCCESS)
        return ck_err_set(err, rc == MDB_NOTFOUND ? -EBADMSG : ck__mdb_err(rc), "%s: %s",
                          c->path, mdb_strerror(rc));
    return 0;
}

/* Opens the catalog, holding the process's catalog lock until cat_close. For reads,
 * a missing catalog is -ENOENT. */
static int cat_open(cat *c, const char *root, bool write, ck_err *err)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_lock(&catalog_mu);
    int r = cat_open_locked(c, root, write, err);
    if (r < 0)
        cat_close(c, false, &r, NULL);
    return r;
}

int ck_catalog_put(const char *root, const ck_info *info, ck_err *err)
{
    cat c;
    int r = cat_open(&c, root, true, err);
    if (r < 0)
        return r;
    ck__wbuf w = { 0 };
    ck__put_version(&w);
    ck__put_u8(&w, CK_STATE_COMMITTED);
    ck__put_u64(&w, info->step);
    ck__put_u64(&w, info->time_ns);
    ck__put_u64(&w, info->data_bytes);
    ck__put_u64(&w, info->n_tensors);
    ck__put_mesh(&w, &info->mesh);
    if (w.oom) {
        r = -ENOMEM;
    } else {
        MDB_val k = { .mv_size = strlen(info->name), .mv_data = (void *)info->name };
        MDB_val v = { .mv_size = w.len, .mv_data = w.p };
        int rc = mdb_put(c.txn, c.dbi, &k, &v, 0);
        if (rc != MDB_SUCCESS)
            r = ck_err_set(err, ck__mdb_err(rc), "%s: %s", c.path, mdb_strerror(rc));
    }
    ck__wbuf_free(&w);
    cat_close(&c, true, &r, err);
    return r;
}

int ck_catalog_del(const char *root, const char *name, ck_err *err)
{
    cat c;
    int r = cat_open(&c, root, true, err);
    if (r < 0)
        return r;
    MDB_val k = { .mv_size = strlen(name), .mv_data = (void *)name };
    int rc = mdb_del(c.txn, c.dbi, &k, NULL);
    if (rc != MDB_SUCCESS && rc != MDB_NOTFOUND)
        r = ck_err_set(err, ck__mdb_err(rc), "%s: %s", c.path, mdb_strerror(rc));
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
    MDB_stat ms;
    mdb_stat(c.txn, c.dbi, &ms);
    ck_cat_entry *arr = calloc(ms.ms_entries ? ms.ms_entries : 1, sizeof *arr);
    if (!arr) {
        r = -ENOMEM;
        cat_close(&c, false, &r, err);
        return r;
    }
    MDB_cursor *cur;
    int rc = mdb_cursor_open(c.txn, c.dbi, &cur);
    size_t i = 0;
    MDB_val k, v;
    for (rc = rc ? rc : mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == MDB_SUCCESS && i < ms.ms_entries;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if ((r = decode_entry(c.path, &k, &v, &arr[i], err)) < 0)
            break;
        i++;
    }
    if (r == 0 && rc != MDB_NOTFOUND && rc != MDB_SUCCESS)
        r = ck_err_set(err, ck__mdb_err(rc), "%s: %s", c.path, mdb_strerror(rc));
    mdb_cursor_close(cur);
    cat_close(&c, false, &r, err);
    if (r < 0) {
        free(arr);
        return r;
    }
    *out = arr;
    *n = i;
    return 0;
}

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

/* A save's lock file (format/owner.h): no save by itself, and recovery removes it
 * with the save it guards, or alone once nobody holds it. */
static bool is_lock(const char *name)
{
    size_t n = strlen(name), k = strlen(CK_LOCK_SUFFIX);
    return n > k && !strcmp(name + n - k, CK_LOCK_SUFFIX);
}

int ck_root_scan(const char *root, ck_scan *out, ck_err *err)
{
    memset(out, 0, sizeof *out);
    DIR *d = opendir(root);
    if (!d)
        return ck_err_set(err, -errno, "%s: %s", root, strerror(errno));
    struct dirent *de;
    int r = 0;
    char path[PATH_MAX];
    while (r == 0 && (de = readdir(d))) {
        if (ck_name_check("checkpoint", de->d_name, NULL) < 0)
            continue;   /* dot files, the catalog's lock, anything not ours */
        struct stat st;
        snprintf(path, sizeof path, "%s/%s/%s", root, de->d_name, CK_MANIFEST);
        if (stat(path, &st) == 0)
            r = push(&out->committed, &out->n_committed, de->d_name);
    }
    closedir(d);
    snprintf(path, sizeof path, "%s/%s", root, CK_PENDING);
    if (r == 0 && (d = opendir(path))) {
        while (r == 0 && (de = readdir(d)))
            if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && !is_lock(de->d_name))
                r = push(&out->pending, &out->n_pending, de->d_name);
        closedir(d);
    }
    if (r < 0) {
        ck_scan_free(out);
        return ck_err_set(err, r, "%s: scanning: out of memory", root);
    }
    if (out->n_committed)
        qsort(out->committed, out->n_committed, sizeof(char *), cmp_str);
    if (out->n_pending)
        qsort(out->pending, out->n_pending, sizeof(char *), cmp_str);
    return 0;
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
    const char *dot = strrchr(entry, '.');
    size_t n = dot ? (size_t)(dot - entry) : strlen(entry);
    if (n >= sizeof name)
        return ck_err_set(err, -ENAMETOOLONG, "%s/%s/%s: name too long", root, CK_PENDING,
                          entry);
    snprintf(name, sizeof name, "%.*s", (int)n, entry);
    int r = ck__save_lock_path(root, name, lock, err);
    if (r < 0)
        return r;
    if (len)
        who[0] = '\0';
    r = ck__lock_held(lock, who, len);
    if (r < 0)
        return ck_err_set(err, r, "%s: %s", lock, strerror(-r));
    return r;
}

int ck_catalog_rebuild(const char *root, ck_rebuild_report *rep,
                       void (*log)(void *arg, const char *msg), void *arg, ck_err *err)
{
    memset(rep, 0, sizeof *rep);
    ck_scan sc;
    int r = ck_root_scan(root, &sc, err);
    if (r < 0)
        return r;
    ck_cat_entry *ents = NULL;
    size_t nents = 0;
    r = ck_catalog_list(root, &ents, &nents, err);
    if (r == -EBADMSG) {
        /* A damaged catalog is rebuilt from nothing: it holds no primary data. */
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", root, CK_CATALOG);
        if (log)
            log(arg, "catalog is unreadable; recreating it from the directories");
        unlink(path);
        snprintf(path, sizeof path, "%s/%s-lock", root, CK_CATALOG);
        unlink(path);
        ck_err_clear(err);
        r = 0;
    }
    for (size_t i = 0; r == 0 && i < nents; i++) {
        bool found = bsearch(&(const char *){ ents[i].name }, sc.committed, sc.n_committed,
                             sizeof(char *), cmp_str) != NULL;
        /* A writer may have committed it since the scan (recovery runs beside live
         * writers): the directory decides. */
        char path[PATH_MAX + CK_NAME_MAX];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s/%s", root, ents[i].name, CK_MANIFEST);
        found = found || stat(path, &st) == 0;
        if (!found) {
            r = ck_catalog_del(root, ents[i].name, err);
            rep->removed++;
        }
    }
    for (size_t i = 0; r == 0 && i < sc.n_committed; i++) {
        ck_ckpt *ck;
        ck_err e2 = { 0 };
        if (ck_open(root, sc.committed[i], &ck, &e2) < 0) {
            rep->unreadable++;
            if (log) {
                char msg[CK_ERR_MSG_MAX + 64];
                snprintf(msg, sizeof msg, "skipping unreadable checkpoint: %s", ck_err_msg(&e2));
                log(arg, msg);
            }
            continue;
        }
        bool had = false;
        for (size_t j = 0; j < nents && !had; j++)
            had = strcmp(ents[j].name, sc.committed[i]) == 0;
        r = ck_catalog_put(root, ck_get_info(ck), err);
        ck_close(ck);
        if (had)
            rep->kept++;
        else
            rep->added++;
    }
    free(ents);
    ck_scan_free(&sc);
    return r;
}

/* Removes dir and the plain files in it: a pending save holds nothing deeper. */
static int remove_pending_dir(const char *dir, ck_err *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return ck_err_set(err, -errno, "%s: %s", dir, strerror(errno));
    struct dirent *de;
    char path[PATH_MAX];
    int r = 0;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (unlink(path) < 0 && r == 0)
            r = ck_err_set(err, -errno, "%s: %s", path, strerror(errno));
    }
    closedir(d);
    if (r == 0 && rmdir(dir) < 0)
        r = ck_err_set(err, -errno, "%s: %s", dir, strerror(errno));
    return r;
}

/* The save a pending entry belongs to: NAME of NAME.TOKEN (the token has no dot). */
static void owner_name(const char *entry, char *name, size_t len)
{
    snprintf(name, len, "%s", entry);
    char *dot = strrchr(name, '.');
    if (dot && dot != name)
        *dot = '\0';
}

static void say(void (*log)(void *arg, const char *msg), void *arg, const char *fmt,
                const char *a, const char *b)
{
    if (!log)
        return;
    char msg[2 * PATH_MAX + 128];
    snprintf(msg, sizeof msg, fmt, a, b);
    log(arg, msg);
}

/* Removes one pending entry if its owner is dead: 1 removed, 0 kept (alive), -errno. */
static int recover_entry(const char *root, const char *entry,
                         void (*log)(void *arg, const char *msg), void *arg, ck_err *err)
{
    char path[PATH_MAX], lock[PATH_MAX], name[CK_NAME_MAX + 16], who[256];
    snprintf(path, sizeof path, "%s/%s/%s", root, CK_PENDING, entry);
    owner_name(entry, name, sizeof name);
    int fd = -1, r = ck__save_lock_path(root, name, lock, err);
    if (r == 0 && (r = ck__lock_probe(lock, &fd, who, sizeof who)) < 0)
        ck_err_set(err, r, "%s: %s", lock, strerror(-r));
    if (r == 0)
        say(log, arg, "kept save in progress %s: its writer is alive (%s)", path, who);
    if (r <= 0)
        return r;
    /* Held by us now (or never taken): nobody can start a save of NAME until the
     * lock is dropped below. */
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
        r = remove_pending_dir(path, err);
    else
        r = unlink(path) < 0 ? ck_err_set(err, -errno, "%s: %s", path, strerror(errno)) : 0;
    ck__lock_drop(lock, &fd);
    if (r == 0)
        say(log, arg, "removed incomplete save %s%s", path, "");
    return r < 0 ? r : 1;
}

/* Lock files whose saves are gone and whose holders died (a crash between the commit
 * rename and the drop of the lock). */
static void drop_stale_locks(const char *root)
{
    char dir[PATH_MAX], path[PATH_MAX + 256], who[256];
    snprintf(dir, sizeof dir, "%s/%s", root, CK_PENDING);
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        int fd;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (is_lock(de->d_name) && ck__lock_probe(path, &fd, who, sizeof who) == 1)
            ck__lock_drop(path, &fd);
    }
    if (d)
        closedir(d);
}

/* The heartbeats (ROOT/.ckptd.ID.beat, save/meet.h) of engines that died: nobody holds
 * their lock ROOT/.ckptd.ID.lock (format/owner.h). An embedded engine of a killed
 * process leaves both; its id is never used again (it holds a pid). */
static void drop_dead_beats(const char *root)
{
    static const char prefix[] = ".ckptd.", suffix[] = ".beat";
    char lock[PATH_MAX + 256], beat[PATH_MAX + 256], who[256];
    DIR *d = opendir(root);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n <= sizeof prefix + sizeof suffix - 2 || strncmp(de->d_name, prefix,
            sizeof prefix - 1) || strcmp(de->d_name + n - (sizeof suffix - 1), suffix))
            continue;
        int id_len = (int)(n - (sizeof prefix - 1) - (sizeof suffix - 1));
        snprintf(lock, sizeof lock, "%s/%s%.*s%s", root, prefix, id_len,
                 de->d_name + sizeof prefix - 1, CK_LOCK_SUFFIX);
        snprintf(beat, sizeof beat, "%s/%s", root, de->d_name);
        int fd;
        if (ck__lock_probe(lock, &fd, who, sizeof who) != 1)
            continue;
        unlink(beat);
        ck__lock_drop(lock, &fd);
    }
    if (d)
        closedir(d);
}

static int sync_pending(const char *root, ck_err *err)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/%s", root, CK_PENDING);
    ck_engine *e = ck_engine_default();
    const char *at = dir;
    int r = ck_engine_fsync_path(e, dir);
    if (r == 0)
        r = ck_engine_fsync_path(e, at = root);
    return r < 0 ? ck_err_set(err, r, "%s: fsync before recovery: %s", at, strerror(-r)) : 0;
}

int ck_root_recover(const char *root, size_t *removed, void (*log)(void *arg, const char *msg),
                    void *arg, ck_err *err)
{
    ck_scan sc;
    int r = ck_root_scan(root, &sc, err);
    if (r < 0)
        return r;
    size_t n = 0;
    /* A removal's rename into .pending may not be durable yet (its process died before
     * its fsyncs): made durable before any of its files goes, or a power cut could
     * bring the checkpoint back with files missing (docs/FORMAT.md, "Removing a
     * checkpoint"). */
    if (sc.n_pending && (r = sync_pending(root, err)) < 0) {
        ck_scan_free(&sc);
        return r;
    }
    for (size_t i = 0; i < sc.n_pending && r >= 0; i++)
        if ((r = recover_entry(root, sc.pending[i], log, arg, err)) == 1)
            n++;
    ck_scan_free(&sc);
    if (removed)
        *removed = n;
    if (r < 0)
        return r;
    drop_stale_locks(root);
    drop_dead_beats(root);
    ck_rebuild_report rep;
    return ck_catalog_rebuild(root, &rep, log, arg, err);
}
