/* names.c - what a root says about a name or a path (ck_name_probe, ck_path_kind_of;
 * see ck/catalog.h).
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

#include "format/owner.h"

static bool is_file(const char *a, const char *b)
{
    char path[PATH_MAX];
    struct stat st;
    return snprintf(path, sizeof path, "%s/%s", a, b) < (int)sizeof path &&
           stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool is_dir(const char *a, const char *b)
{
    char path[PATH_MAX];
    struct stat st;
    return snprintf(path, sizeof path, "%s/%s", a, b) < (int)sizeof path &&
           stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool committed(const char *root, const char *name)
{
    char path[PATH_MAX];
    return snprintf(path, sizeof path, "%s/%s", root, name) < (int)sizeof path &&
           is_file(path, CK_MANIFEST);
}

/* Whether .pending holds an entry of a save of name (NAME.TOKEN, the token without a
 * dot; the lock file NAME.lock is no save). */
static bool has_debris(const char *root, const char *name)
{
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s/%s", root, CK_PENDING) >= (int)sizeof dir)
        return false;
    DIR *d = opendir(dir);
    if (!d)
        return false;
    size_t n = strlen(name);
    bool found = false;
    struct dirent *de;
    while (!found && (de = readdir(d)))
        found = !strncmp(de->d_name, name, n) && de->d_name[n] == '.' &&
                !strchr(de->d_name + n + 1, '.') && strcmp(de->d_name + n, CK_LOCK_SUFFIX);
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
    if (committed(root, name))
        return CK_NAME_COMMITTED;
    char lock[PATH_MAX];
    if ((r = ck__save_lock_path(root, name, lock, err)) < 0)
        return r;
    if ((r = ck__lock_held(lock, who, len)) < 0)
        return ck_err_set(err, r, "%s: %s", lock, strerror(-r));
    /* Its owner drops the lock after the commit rename: committed meanwhile? */
    if (r == 0 && committed(root, name))
        return CK_NAME_COMMITTED;
    if (r == 1)
        return CK_NAME_BUSY;
    return has_debris(root, name) ? CK_NAME_DEBRIS : CK_NAME_FREE;
}

ck_path_kind ck_path_kind_of(const char *path)
{
    if (is_file(path, CK_MANIFEST))
        return CK_PATH_CHECKPOINT;
    if (is_dir(path, CK_PENDING) || is_file(path, CK_CATALOG))
        return CK_PATH_ROOT;
    return CK_PATH_OTHER;
}
