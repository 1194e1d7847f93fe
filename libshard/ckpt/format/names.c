/* names.c - what a root says about a name or a path (ck_name_probe, ck_path_kind_of,
 * ck_root_make; see ck/catalog.h).
 *
 * So that the layout stays the core's (docs/FORMAT.md, "Directory layout"): the
 * Python layer, the tools and the trainer ask these questions instead of looking
 * for a manifest, a lock file or the pending directory themselves.
 */
#include "ck/catalog.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/layout.h"
#include "format/owner.h"
#include "io/rootfs.h"

/* Whether name beneath dir is of type (S_IFREG, S_IFDIR), not a link to one. */
static bool is_a(int dir, const char *name, mode_t type)
{
    struct stat st;
    return ck__statat(dir, name, &st) == 0 && (st.st_mode & S_IFMT) == type;
}

/* Whether ROOT/NAME is a checkpoint: a directory holding a regular manifest, both
 * reached beneath the root, never through a link. */
static bool committed(int rootfd, const char *name)
{
    char rel[PATH_MAX];
    struct stat st;
    return ck__name_manifest(name, rel, sizeof rel) == 0 && ck__statat(rootfd, rel, &st) == 0 && S_ISREG(st.st_mode);
}

/* Whether .pending holds an entry of a save of name (the lock file NAME.lock is no
 * save). */
static bool has_debris(int rootfd, const char *name)
{
    int fd = ck__openat(rootfd, CK_PENDING, O_RDONLY | O_DIRECTORY, 0);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return false;
    }
    char of[CK_NAME_MAX];
    bool found = false;
    struct dirent *de;
    while (!found && (de = readdir(d))) {
        ck__pending_kind kind = ck__pending_entry(de->d_name, of, NULL);
        found = kind != CK_PEND_OTHER && kind != CK_PEND_LOCK && !strcmp(of, name);
    }
    closedir(d);
    return found;
}

int ck_name_probe(const char *root, const char *name, char *who, size_t len, ck_err *err)
{
    int r = ck_name_check("checkpoint", name, err);
    if (r < 0)
        return r;
    if (len)
        who[0] = '\0';
    int rootfd = ck__root_open(root, err);
    if (rootfd < 0)
        return rootfd;
    char lock[PATH_MAX];
    if (committed(rootfd, name))
        r = CK_NAME_COMMITTED;
    else if ((r = ck__save_lock_rel(name, lock, err)) == 0 &&
             (r = ck__lock_held(rootfd, lock, who, len)) < 0)
        ck_err_set(err, r, "%s/%s: %s", root, lock, ck__why(r));
    /* Its owner drops the lock after the commit rename: committed meanwhile? */
    else if (r == 0 && committed(rootfd, name))
        r = CK_NAME_COMMITTED;
    else if (r == 1)
        r = CK_NAME_BUSY;
    else if (r == 0)
        r = has_debris(rootfd, name) ? CK_NAME_DEBRIS : CK_NAME_FREE;
    close(rootfd);
    return r;
}

ck_path_kind ck_path_kind_of(const char *path)
{
    /* path is the caller's, opened as named (as a root is); what is looked at in it is
     * reached beneath it, never through a link. */
    int fd = ck__root_open(path, NULL);
    if (fd < 0)
        return CK_PATH_OTHER;
    ck_path_kind k = CK_PATH_OTHER;
    if (is_a(fd, CK_MANIFEST, S_IFREG))
        k = CK_PATH_CHECKPOINT;
    else if (is_a(fd, CK_PENDING, S_IFDIR) || is_a(fd, CK_CATALOG, S_IFREG))
        k = CK_PATH_ROOT;
    close(fd);
    return k;
}

int ck_root_make(const char *root, ck_err *err)
{
    if (mkdir(root, 0755) < 0 && errno != EEXIST)
        return ck_err_set(err, -errno, "%s: making the checkpoint root: %s", root,
                          strerror(errno));
    /* There already, or made: it must be a directory (EEXIST says nothing of what). */
    int fd = ck__root_open(root, err);
    if (fd < 0)
        return fd;
    close(fd);
    return 0;
}
