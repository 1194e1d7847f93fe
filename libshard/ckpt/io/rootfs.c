/* rootfs.c - paths under a checkpoint root, reached without following links (see
 * io/rootfs.h; docs/decisions/0116-openat2-with-a-walk-fallback.md says why openat2 first and openat as the fallback). */
#include "io/rootfs.h"

#include "ck/engine.h"

#include <limits.h>
#include <stdint.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static int neg(int r)
{
    return r < 0 ? -errno : r;
}

/* rel is beneath: relative, and every component a plain name. */
static bool beneath(const char *rel)
{
    if (!rel[0] || rel[0] == '/')
        return false;
    for (const char *c = rel; *c;) {
        size_t n = strcspn(c, "/");
        if (n == 0 || n > NAME_MAX || (n == 1 && c[0] == '.') ||
            (n == 2 && c[0] == '.' && c[1] == '.'))
            return false;
        c += n;
        if (*c == '/' && !*++c)
            return false;       /* a trailing '/' is an empty last component */
    }
    return true;
}

/* A component that was refused as "not a directory" (ENOTDIR from O_DIRECTORY |
 * O_NOFOLLOW) may be a link: say so, as openat2 does. */
static int link_or(int dir, const char *name, int r)
{
    struct stat st;
    return r == -ENOTDIR && fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                   S_ISLNK(st.st_mode) ? -ELOOP : r;
}

int ck__openat_walk(int dir, const char *rel, int flags, unsigned mode)
{
    if (!beneath(rel))
        return -EINVAL;
    char comp[NAME_MAX + 1];
    int cur = dir, r = 0;
    const char *c = rel;
    for (;;) {
        size_t n = strcspn(c, "/");
        memcpy(comp, c, n);
        comp[n] = '\0';
        bool last = c[n] == '\0';
        int fd = last ? openat(cur, comp, flags | O_NOFOLLOW | O_CLOEXEC, (mode_t)mode)
                      : openat(cur, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        r = fd < 0 ? link_or(cur, comp, -errno) : fd;
        if (cur != dir)
            close(cur);
        if (r < 0 || last)
            return r;
        cur = fd;
        c += n + 1;
    }
}

int ck__openat(int dir, const char *rel, int flags, unsigned mode)
{
    if (dir == AT_FDCWD)
        return neg(openat(AT_FDCWD, rel, flags | O_CLOEXEC, (mode_t)mode));
    if (!beneath(rel))
        return -EINVAL;
    struct open_how how = {
        .flags = (uint64_t)(flags | O_CLOEXEC),
        .mode = (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? mode : 0,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    for (int tries = 0; tries < 8; tries++) {
        long fd = syscall(SYS_openat2, dir, rel, &how, sizeof how);
        if (fd >= 0)
            return (int)fd;
        /* ENOSYS: a kernel before 5.6; EPERM: a seccomp filter that does not know the
         * call. EAGAIN: a rename raced the lookup. */
        if (errno == ENOSYS || errno == EPERM)
            break;
        if (errno != EAGAIN)
            return -errno;
    }
    return ck__openat_walk(dir, rel, flags, mode);
}

int ck__openat_reg(int dir, const char *rel, int flags, unsigned mode)
{
    int fd = ck__openat(dir, rel, flags | O_NONBLOCK, mode);
    if (fd == -ENXIO)
        return CK_ENOTREG;      /* a FIFO opened for writing with no reader */
    if (fd < 0)
        return fd;
    struct stat st;
    int r = fstat(fd, &st) < 0 ? -errno : S_ISREG(st.st_mode) ? 0 : CK_ENOTREG;
    if (r == 0 && !(flags & O_NONBLOCK)) {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)
            r = -errno;
    }
    if (r < 0) {
        close(fd);
        return r;
    }
    return fd;
}

int ck__read_upto(int fd, void *buf, size_t max, size_t *len)
{
    uint8_t *p = buf, extra;
    size_t n = 0;
    for (;;) {
        /* Past max, one byte more is asked for, into extra: whether the file ends. */
        ssize_t k = n < max ? read(fd, p + n, max - n) : read(fd, &extra, 1);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -errno;
        if (k == 0)
            break;
        if (n == max) {
            *len = n;
            return -EFBIG;
        }
        n += (size_t)k;
    }
    *len = n;
    return 0;
}

int ck__read_small(int dir, const char *rel, void *buf, size_t max, size_t *len)
{
    int fd = ck__openat_reg(dir, rel, O_RDONLY, 0);
    if (fd < 0)
        return fd;
    int r = ck__read_upto(fd, buf, max, len);
    close(fd);
    return r;
}

int ck__read_whole(int dir, const char *rel, size_t max, uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    int fd = ck__openat_reg(dir, rel, O_RDONLY, 0);
    if (fd < 0)
        return fd;
    struct stat st;
    int r = fstat(fd, &st) < 0 ? -errno : (uint64_t)st.st_size > max ? -EFBIG : 0;
    uint8_t *buf = r == 0 ? malloc((size_t)st.st_size + 1) : NULL;
    if (r == 0 && !buf)
        r = -ENOMEM;
    if (r == 0)
        r = ck__read_upto(fd, buf, (size_t)st.st_size, len);
    if (r == 0 && *len < (size_t)st.st_size)
        r = -EIO;
    close(fd);
    if (r < 0) {
        free(buf);
        *len = 0;
        return r;
    }
    buf[*len] = 0;
    *out = buf;
    return 0;
}

int ck__parent_at(int dir, const char *rel, const char **leaf)
{
    const char *slash = strrchr(rel, '/');
    *leaf = slash ? slash + 1 : rel;
    if (dir == AT_FDCWD && slash == rel)
        return neg(open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!slash)
        return dir == AT_FDCWD ? neg(open(".", O_PATH | O_DIRECTORY | O_CLOEXEC))
                               : neg(fcntl(dir, F_DUPFD_CLOEXEC, 0));
    char up[PATH_MAX];
    size_t n = (size_t)(slash - rel);
    if (n >= sizeof up)
        return -ENAMETOOLONG;
    memcpy(up, rel, n);
    up[n] = '\0';
    if (dir != AT_FDCWD && (!beneath(up) || !beneath(*leaf)))
        return -EINVAL;
    return ck__openat(dir, up, O_PATH | O_DIRECTORY, 0);
}

int ck__mkdirat(int dir, const char *rel, unsigned mode)
{
    const char *leaf;
    int p = ck__parent_at(dir, rel, &leaf);
    if (p < 0)
        return p;
    int r = neg(mkdirat(p, leaf, (mode_t)mode));
    close(p);
    return r;
}

int ck__unlinkat(int dir, const char *rel, int flags)
{
    const char *leaf;
    int p = ck__parent_at(dir, rel, &leaf);
    if (p < 0)
        return p;
    int r = neg(unlinkat(p, leaf, flags));
    close(p);
    return r;
}

int ck__renameat(int fromdir, const char *from, int todir, const char *to, unsigned flags)
{
    const char *fl, *tl;
    int pf = ck__parent_at(fromdir, from, &fl);
    if (pf < 0)
        return pf;
    int pt = ck__parent_at(todir, to, &tl);
    if (pt < 0) {
        close(pf);
        return pt;
    }
    int r = neg((int)syscall(SYS_renameat2, pf, fl, pt, tl, flags));
    close(pf);
    close(pt);
    return r;
}

int ck__linkat(int fromdir, const char *from, int todir, const char *to)
{
    const char *fl, *tl;
    int pf = ck__parent_at(fromdir, from, &fl);
    if (pf < 0)
        return pf;
    struct stat st;
    /* linkat never follows `from`, so a planted link would be copied as a link into
     * the new checkpoint: refuse anything but a regular file. */
    int r = fstatat(pf, fl, &st, AT_SYMLINK_NOFOLLOW) < 0 ? -errno
            : S_ISLNK(st.st_mode)                          ? -ELOOP
            : !S_ISREG(st.st_mode)                         ? CK_ENOTREG
                                                           : 0;
    int pt = r == 0 ? ck__parent_at(todir, to, &tl) : -1;
    if (r == 0 && pt < 0)
        r = pt;
    if (r == 0)
        r = neg(linkat(pf, fl, pt, tl, 0));
    close(pf);
    if (pt >= 0)
        close(pt);
    return r;
}

int ck__statat(int dir, const char *rel, struct stat *st)
{
    const char *leaf;
    int p = ck__parent_at(dir, rel, &leaf);
    if (p < 0)
        return p;
    int r = neg(fstatat(p, leaf, st, AT_SYMLINK_NOFOLLOW));
    close(p);
    return r;
}

int ck__root_refuse(const char *root, int r, ck_err *err)
{
    struct stat st;
    bool link = lstat(root, &st) == 0 && S_ISLNK(st.st_mode);
    /* A link to nothing is no directory either: the user named a root, not a path to
     * make (a save would otherwise report that "the file exists"). */
    if (r != -ENOTDIR && !(r == -ENOENT && link))
        return ck_err_set(err, r, "%s: the checkpoint root: %s", root, strerror(-r));
    char what[64];
    int s = stat(root, &st);
    if (s == 0 && !S_ISDIR(st.st_mode))
        snprintf(what, sizeof what, "%s%s", link ? "a symbolic link to " : "",
                 ck__ftype(st.st_mode));
    else
        snprintf(what, sizeof what, "%s", link && s < 0 && errno == ENOENT
                 ? "a symbolic link to nothing" : "a path through something that is not one");
    return ck_err_set(err, -ENOTDIR, "%s: the checkpoint root is not a directory (it is %s)",
                      root, what);
}

int ck__root_open(const char *root, ck_err *err)
{
    int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return fd < 0 ? ck__root_refuse(root, -errno, err) : fd;
}

const char *ck__rel(const char *root, const char *path)
{
    size_t n = strlen(root);
    if (strncmp(path, root, n) != 0)
        return NULL;
    if (path[n] == '\0')
        return path + n;
    return path[n] == '/' ? path + n + 1 : NULL;
}

int ck__fd_path(int fd, char out[CK_FD_PATH_MAX], ck_err *err)
{
    snprintf(out, CK_FD_PATH_MAX, "/proc/self/fd/%d", fd);
    if (access(out, F_OK) < 0)
        return ck_err_set(err, -ENOENT, "/proc/self/fd is not there (is /proc mounted?): LMDB "
                          "files are opened through it so that no link is followed");
    return 0;
}

const char *ck__why(int r)
{
    if (r == -ELOOP)
        return "a symbolic link (links are never followed inside a checkpoint root)";
    if (r == CK_ENOTREG)
        return "not a regular file (a FIFO, a device, a socket or a directory)";
    return strerror(-r);
}

const char *ck__ftype(mode_t m)
{
    return S_ISLNK(m)    ? "a symbolic link"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
           : S_ISDIR(m)  ? "a directory"
           : S_ISREG(m)  ? "a regular file"
                         : "a special file";
}

int ck__root_open_engine(struct ck_engine *e, const char *root, ck_err *err)
{
    int fd = e->ops->open(e, AT_FDCWD, root, O_RDONLY | O_DIRECTORY, 0);
    return fd < 0 ? ck__root_refuse(root, fd, err) : fd;
}
