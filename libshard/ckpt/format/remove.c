/* remove.c - removing a committed checkpoint (ck_root_remove; see ck/catalog.h and
 * docs/FORMAT.md, "Removing a checkpoint").
 *
 * The order, each step chosen so that a crash or a power cut after it leaves NAME
 * either visible and whole or out of sight:
 *   1. take .pending/NAME.lock, the save lock of NAME: no save or removal of NAME runs
 *      beside this one, and a recovery running meanwhile keeps what this removal moves
 *      under .pending (its owner is alive);
 *   2. drop NAME from the catalog (an LMDB commit, durable when it returns). First, so
 *      that the catalog never lists a checkpoint that is gone: a crash right after
 *      leaves NAME visible, whole and unlisted, which reconciling lists again, as
 *      after a crash between a commit's rename and its catalog entry;
 *   3. rename ROOT/NAME to .pending/NAME.TOKEN-removed: one atomic step takes all of
 *      it out of sight, into the place readers never look and recovery cleans;
 *   4. fsync .pending and ROOT: the rename is durable before any file goes. Without
 *      it a power cut could keep the unlinks below (NAME's own directory operations)
 *      and lose the rename, bringing NAME back with files missing;
 *   5. unlink its files and rmdir it: debris from step 3 on, which the next recovery
 *      removes if this stops half-way;
 *   6. drop the lock.
 * Every change to the disk goes through the engine, so that the crash tests can stop
 * or record a removal at each of its operations, and every path is reached beneath a
 * descriptor of ROOT, never through a link (io/rootfs.h).
 */
#include "ck/catalog.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "format/layout.h"
#include "format/owner.h"
#include "io/rootfs.h"
#include "io/engine.h"
#include "format/catalog.h"

/* A checkpoint holds plain files; deeper directories were planted, and go too, down
 * to this depth. */
#define REMOVE_DEPTH_MAX 16

/* Removes rel (beneath rootfd) and everything under it without following a link:
 * entries are listed through a descriptor reached beneath the root, checked with
 * AT_SYMLINK_NOFOLLOW, and unlink and rmdir never follow their last component. */
static int remove_tree(ck_engine *e, int rootfd, const char *root, const char *rel, int depth,
                       ck_err *err)
{
    int fd = ck__openat(rootfd, rel, O_RDONLY | O_DIRECTORY, 0);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
        int r = fd < 0 ? fd : -errno;
        if (fd >= 0)
            close(fd);
        return ck_err_set(err, r, "%s/%s: %s", root, rel, ck__why(r));
    }
    char path[PATH_MAX];
    struct dirent *de;
    int r = 0;
    while (r == 0 && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (snprintf(path, sizeof path, "%s/%s", rel, de->d_name) >= (int)sizeof path) {
            r = ck_err_set(err, -ENAMETOOLONG, "%s/%s/%s: path too long", root, rel,
                           de->d_name);
            break;
        }
        struct stat st;
        bool sub = fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
        if (sub && depth >= REMOVE_DEPTH_MAX)
            r = ck_err_set(err, -ELOOP, "%s/%s: nested deeper than %d directories", root, path,
                           REMOVE_DEPTH_MAX);
        else if (sub)
            r = remove_tree(e, rootfd, root, path, depth + 1, err);
        else if ((r = e->ops->unlink(e, rootfd, path)) < 0)
            ck_err_set(err, r, "%s/%s: unlink: %s", root, path, strerror(-r));
    }
    closedir(d);
    if (r == 0 && (r = e->ops->rmdir(e, rootfd, rel)) < 0)
        ck_err_set(err, r, "%s/%s: rmdir: %s", root, rel, strerror(-r));
    return r;
}

/* ROOT/NAME must be a real directory holding a manifest: a link, a file or a directory
 * that is no checkpoint is left alone. */
static int check_committed(int rootfd, const char *root, const char *name, ck_err *err)
{
    char rel[PATH_MAX];
    struct stat st;
    int r = ck__statat(rootfd, name, &st);
    if (r < 0)
        return ck_err_set(err, r, "%s: no checkpoint named %s (%s)", root, name, strerror(-r));
    if (!S_ISDIR(st.st_mode))
        return ck_err_set(err, -ENOTDIR, "%s: %s is not a checkpoint directory but %s", root,
                          name, S_ISLNK(st.st_mode) ? "a symbolic link" : "another file");
    if (ck__name_manifest(name, rel, sizeof rel) < 0 || ck__statat(rootfd, rel, &st) < 0 ||
        !S_ISREG(st.st_mode))
        return ck_err_set(err, -ENOENT, "%s: %s is not a committed checkpoint (it has no %s)",
                          root, name, CK_MANIFEST);
    return 0;
}

/* After check_committed found no NAME: -EBUSY, naming the saver, when a live process
 * holds NAME's save lock (a save of NAME in progress: "removing" it is refused as
 * such, not as a name that does not exist); 0 otherwise, err as check_committed left
 * it. */
static int being_saved(int rootfd, const char *root, const char *name, ck_err *err)
{
    char lock[PATH_MAX], who[256];
    if (ck__save_lock_rel(name, lock, NULL) < 0 || ck__lock_held(rootfd, lock, who,
                                                                 sizeof who) != 1)
        return 0;
    ck_err_clear(err);
    return ck_err_set(err, -EBUSY, "%s: checkpoint %s is being saved (held by %s, lock "
                      "%s/%s): nothing removed", root, name, who, root, lock);
}

/* ROOT/.pending, made if missing; refused when it is anything but a directory, so that
 * the rename never carries NAME out of the root. */
static int pending_dir(ck_engine *e, int rootfd, const char *root, ck_err *err)
{
    int r = e->ops->mkdir(e, rootfd, CK_PENDING, 0755);
    if (r < 0 && r != -EEXIST)
        return ck_err_set(err, r, "%s/%s: mkdir: %s", root, CK_PENDING, ck__why(r));
    struct stat st;
    if ((r = ck__statat(rootfd, CK_PENDING, &st)) < 0)
        return ck_err_set(err, r, "%s/%s: %s", root, CK_PENDING, strerror(-r));
    if (!S_ISDIR(st.st_mode))
        return ck_err_set(err, -ENOTDIR, "%s/%s is not a directory but %s: nothing removed",
                          root, CK_PENDING, ck__ftype(st.st_mode));
    return 0;
}

/* Steps 3 and 4: NAME out of sight, durably. *moved says whether the rename happened;
 * trash is where it went (below ROOT). */
static int move_out(ck_engine *e, int rootfd, const char *root, const char *name, char *trash,
                    bool *moved, ck_err *err)
{
    uint64_t tag = 0;
    if (getrandom(&tag, sizeof tag, GRND_NONBLOCK) != (ssize_t)sizeof tag)
        tag = (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL);
    int r = -EEXIST;
    char token[CK_TOKEN_MAX];
    for (int tries = 0; r == -EEXIST && tries < 16; tries++, tag += 0x9E3779B97F4A7C15ull) {
        ck__name_token(tag, token);
        if (ck__name_removed(name, token, trash, PATH_MAX) < 0)
            return ck_err_set(err, -ENAMETOOLONG, "%s: path too long", root);
        r = e->ops->rename(e, rootfd, name, trash);
    }
    if (r < 0)
        return ck_err_set(err, r, "%s/%s: rename to %s: %s", root, name, trash, strerror(-r));
    *moved = true;
    if ((r = ck__engine_fsync_path(e, rootfd, CK_PENDING)) < 0 ||
        (r = e->ops->fsync(e, rootfd)) < 0)
        return ck_err_set(err, r, "%s/%s: out of sight, but not durably (fsync: %s); its files "
                          "stay in %s/%s for the next recovery", root, name, strerror(-r), root,
                          trash);
    return 0;
}

int ck_root_remove(const char *root, const char *name, ck_engine *e, ck_err *err)
{
    if (!e)
        e = ck_engine_default();
    int r = ck_name_check("checkpoint", name, err);
    if (r < 0)
        return r;
    int rootfd = ck__root_open_engine(e, root, err);
    if (rootfd < 0)
        return rootfd;
    char lock[PATH_MAX], trash[PATH_MAX], what[CK_NAME_MAX + 64];
    int fd = -1;
    snprintf(what, sizeof what, "checkpoint %s is being saved or removed by another process",
             name);
    /* Checked before anything is made, and again under the lock. */
    if ((r = check_committed(rootfd, root, name, err)) == -ENOENT &&
        (r = being_saved(rootfd, root, name, err)) == 0)
        r = -ENOENT;
    if (r < 0 ||
        (r = pending_dir(e, rootfd, root, err)) < 0 ||
        (r = ck__save_lock_rel(name, lock, err)) < 0 ||
        (r = ck__lock_take(rootfd, root, lock, what, NULL, NULL, &fd, err)) < 0) {
        e->ops->close(e, rootfd);
        return ck_err_set(err, r, "removing %s", name);
    }
    bool moved = false;
    r = check_committed(rootfd, root, name, err);
    if (r == 0 && (r = e->ops->step(e, "catalog")) < 0)
        ck_err_set(err, r, "%s/%s: %s", root, CK_CATALOG, strerror(-r));
    if (r == 0)
        r = ck__catalog_del(root, name, err);
    if (r == 0)
        r = move_out(e, rootfd, root, name, trash, &moved, err);
    if (r == 0 && (r = remove_tree(e, rootfd, root, trash, 0, err)) < 0)
        ck_err_set(err, r, "%s: out of sight, but its files stay in %s/%s for the next "
                   "recovery", name, root, trash);
    ck__lock_drop(rootfd, lock, &fd);
    e->ops->close(e, rootfd);
    if (r < 0 && !moved)
        ck_err_set(err, r, "removing %s (the checkpoint is intact)", name);
    return r;
}
