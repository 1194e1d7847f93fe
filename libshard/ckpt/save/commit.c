/* commit.c - the steps of the commit protocol (see commit.h and docs/FORMAT.md). */
#include "save/commit.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ck/catalog.h"
#include "ck/save.h"
#include "format/layout.h"
#include "format/owner.h"
#include "io/rootfs.h"
#include "model/say.h"
#include "io/engine.h"
#include "format/catalog.h"

static int owner_start(int rootfd, const char *root, const char *name, bool own,
                       const char *job, int *lock, ck_err *err)
{
    char rel[PATH_MAX], what[CK_NAME_MAX + 64], who[CK_LOCK_WHO_MAX], theirs[CK_JOB_HEX_MAX];
    int r = 0;
    if (own) {
        /* A holder that has not written its record yet cannot be told from another
         * job, and usually is one: both are named. */
        snprintf(what, sizeof what, "checkpoint %s is being saved by another job or writer",
                 name);
        if ((r = ck__save_lock_rel(name, rel, err)) < 0)
            return r;
        r = ck__lock_take(rootfd, root, rel, what, job, who, lock, err);
        /* The holder saves for a job, and not for this one: say so, as the member of this
         * job that finds its meeting does. */
        if (r == -EBUSY && job && ck__lock_job(who, theirs) && strcmp(theirs, job))
            return ck_err_set(err, r, "checkpoint %s is being saved by another job (held by "
                              "%s, lock %s/%s); this job's save of it fails", name, who, root,
                              rel);
        if (r < 0)
            return r;
    }
    /* Checked under the lock: a writer of the same name drops it only after its
     * commit, so a name committed meanwhile is seen here, not at the rename. */
    struct stat st;
    if (ck__statat(rootfd, name, &st) == 0) {
        ck__pending_unlock(rootfd, name, lock);
        return ck_err_set(err, -EEXIST, "%s: a checkpoint named %s already exists", root, name);
    }
    return 0;
}

void ck__pending_unlock(int rootfd, const char *name, int *lock)
{
    char rel[PATH_MAX];
    if (*lock >= 0 && ck__save_lock_rel(name, rel, NULL) == 0)
        ck__lock_drop(rootfd, rel, lock);
}

/* ROOT/.pending, made if absent: a link or anything but a directory there is refused
 * by name (every later step would refuse it too, less clearly). */
static int pending_dir(ck_engine *e, int rootfd, const char *root, ck_err *err)
{
    int r = e->ops->mkdir(e, rootfd, CK_PENDING, 0755);
    if (r < 0 && r != -EEXIST)
        return ck_err_set(err, r, "%s/%s: mkdir: %s", root, CK_PENDING, ck__why(r));
    struct stat st;
    if (r == -EEXIST && ck__statat(rootfd, CK_PENDING, &st) == 0 && !S_ISDIR(st.st_mode))
        return ck_err_set(err, S_ISLNK(st.st_mode) ? -ELOOP : -ENOTDIR,
                          "%s/%s is %s, not a directory: saves never follow it (remove it)",
                          root, CK_PENDING, ck__ftype(st.st_mode));
    return 0;
}

int ck__pending_create(ck_engine *e, int rootfd, const char *root, const char *name,
                       const char *token, bool own, const char *job, char *out, int *lock,
                       ck_err *err)
{
    char rel[PATH_MAX];
    *lock = -1;
    out[0] = '\0';
    int r = pending_dir(e, rootfd, root, err);
    if (r < 0 || (r = owner_start(rootfd, root, name, own || !token, job, lock, err)) < 0)
        return r;
    if (token) {
        if (ck_name_check("save token", token, err) < 0)
            return -EINVAL;
        if (strlen(token) >= CK_TOKEN_MAX)
            return ck_err_set(err, -EINVAL, "save token '%s' is longer than %d bytes", token,
                              CK_TOKEN_MAX - 1);
        if (ck__name_save(name, token, rel, sizeof rel) < 0 ||
            snprintf(out, PATH_MAX, "%s/%s", root, rel) >= PATH_MAX)
            return ck_err_set(err, -ENAMETOOLONG, "%s: path too long", root);
        r = e->ops->mkdir(e, rootfd, rel, 0755);
        if (r < 0 && r != -EEXIST) {
            ck_err_set(err, r, "%s: mkdir: %s", out, ck__why(r));
            out[0] = '\0';
            return r;
        }
        return 0;
    }
    if ((r = ck__pending_fresh(e, rootfd, root, name, out, err)) < 0)
        ck__pending_unlock(rootfd, name, lock);
    return r;
}

int ck__pending_fresh(ck_engine *e, int rootfd, const char *root, const char *name, char *out,
                      ck_err *err)
{
    char rel[PATH_MAX];
    int r = 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t tag = (uint64_t)getpid() << 32 ^ (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 20;
    char fresh[CK_TOKEN_MAX];
    for (int tries = 0; tries < 16; tries++, tag += 0x9E3779B97F4A7C15ull) {
        ck__name_token(tag, fresh);
        if (ck__name_save(name, fresh, rel, sizeof rel) < 0 ||
            snprintf(out, PATH_MAX, "%s/%s", root, rel) >= PATH_MAX) {
            r = ck_err_set(err, -ENAMETOOLONG, "%s: path too long", root);
            break;
        }
        r = e->ops->mkdir(e, rootfd, rel, 0755);
        if (r != -EEXIST)
            break;
    }
    if (r < 0) {
        if (r != -ENAMETOOLONG)
            ck_err_set(err, r, "%s: mkdir: %s", out, ck__why(r));
        out[0] = '\0';
    }
    return r;
}

void ck__pending_remove(ck_engine *e, int rootfd, const char *root, const char *pending,
                        const ck_file *files, uint32_t n)
{
    const char *rel = pending[0] ? ck__rel(root, pending) : NULL;
    if (!rel || !rel[0])
        return;
    char path[PATH_MAX + CK_FILE_NAME_MAX];
    for (uint32_t f = 0; f < n; f++) {
        snprintf(path, sizeof path, "%s/%s", rel, files[f].name);
        e->ops->unlink(e, rootfd, path);
    }
    if (ck__name_manifest(rel, path, sizeof path) == 0)
        e->ops->unlink(e, rootfd, path);
    e->ops->rmdir(e, rootfd, rel);
}

/* A commit that happened, with something after it that did not: told, not failed. */
static void warn(void (*log)(void *arg, const char *msg), void *arg, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void warn(void (*log)(void *arg, const char *msg), void *arg, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ck__vsay(log, arg, fmt, ap);
    va_end(ap);
}

int ck__publish(ck_engine *e, int rootfd, const char *root, const char *pending,
                const ck__manifest *m, bool catalog, bool *committed,
                void (*log)(void *arg, const char *msg), void *log_arg, ck_err *err)
{
    char path[PATH_MAX + CK_NAME_MAX], mrel[PATH_MAX];
    const char *rel = ck__rel(root, pending);
    int r;
    *committed = false;
    if (!rel || !rel[0])
        return ck_err_set(err, -EINVAL, "%s is not under the root %s", pending, root);
    if (ck__name_manifest(pending, path, sizeof path) < 0 ||
        ck__name_manifest(rel, mrel, sizeof mrel) < 0)
        return ck_err_set(err, -ENAMETOOLONG, "%s: path too long", pending);
    if ((r = ck__manifest_write(e, rootfd, mrel, path, m, err)) < 0)
        return r;
    return ck__commit_dir(e, rootfd, root, pending, &m->info, catalog, committed, log, log_arg,
                          err);
}

int ck__commit_dir(ck_engine *e, int rootfd, const char *root, const char *pending,
                   const ck_info *info, bool catalog, bool *committed,
                   void (*log)(void *arg, const char *msg), void *log_arg, ck_err *err)
{
    char final[PATH_MAX + CK_NAME_MAX];
    const char *rel = ck__rel(root, pending);
    int r;
    *committed = false;
    if (!rel || !rel[0])
        return ck_err_set(err, -EINVAL, "%s is not under the root %s", pending, root);
    snprintf(final, sizeof final, "%s/%s", root, info->name);
    if ((r = ck__engine_fsync_path(e, rootfd, rel)) < 0)
        return ck_err_set(err, r, "%s: fsync: %s", pending, ck__why(r));
    if ((r = e->ops->rename(e, rootfd, rel, info->name)) < 0)
        return ck_err_set(err, r, "%s: commit rename to %s: %s", pending, final,
                          r == -EEXIST ? "a checkpoint of that name appeared meanwhile"
                                       : ck__why(r));
    /* Committed: every byte is durable and the checkpoint is visible, so from here on
     * nothing is a failure (a caller told "failed" would retry or count the step
     * lost, while the checkpoint is there and deep-verifies). */
    *committed = true;
    if ((r = e->ops->fsync(e, rootfd)) < 0)
        warn(log, log_arg, "checkpoint %s committed, but the fsync of %s failed (%s): the "
             "commit may not survive a power loss", info->name, root, strerror(-r));
    /* The catalog is derived: a checkpoint missing from it is listed again by
     * reconciling (ckptd at start, ckpt-inspect --rebuild-catalog). */
    ck_err cat = { 0 };
    if (catalog && ((r = e->ops->step(e, "catalog")) < 0 ||
                    (r = ck__catalog_put(root, info, &cat)) < 0))
        warn(log, log_arg, "checkpoint %s committed, but not yet in the catalog (%s): the "
             "next ckptd start or ckpt-inspect --rebuild-catalog lists it", info->name,
             cat.code ? ck_err_msg(&cat) : strerror(-r));
    return 0;
}
