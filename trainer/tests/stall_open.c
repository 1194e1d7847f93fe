/* stall_open.c - an LD_PRELOAD library for tests: a host whose storage hangs.
 *
 * An open that creates a file whose path matches the glob in $STALL_OPEN (fnmatch,
 * '*' crossing '/') never returns: the thread sleeps until the process ends, as a
 * thread blocked on an unreachable NFS server would. Every other open is the C
 * library's. The core opens files under a root relative to the root's descriptor
 * (openat2 through syscall(), or openat: libshard/ckpt/io/rootfs.c), so those are
 * caught too, the path matched being the descriptor's path joined with the relative
 * one. Both open and open64 (openat and openat64) are defined (a build with 64-bit
 * offsets calls the 64 ones), so the headers must not rename one into the other. */
#undef _FILE_OFFSET_BITS
#include <dlfcn.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

int open(const char *path, int flags, ...);
int open64(const char *path, int flags, ...);
int openat(int dir, const char *path, int flags, ...);
int openat64(int dir, const char *path, int flags, ...);

static void maybe_stall(const char *path, int flags)
{
    const char *glob = getenv("STALL_OPEN");
    if (glob && (flags & O_CREAT) && fnmatch(glob, path, 0) == 0)
        for (;;)
            pause();
}

static int forward(const char *sym, const char *path, int flags, mode_t mode)
{
    maybe_stall(path, flags);
    int (*real)(const char *, int, ...) = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, sym);
    return real(path, flags, mode);
}

int open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
    va_end(ap);
    return forward("open", path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
    va_end(ap);
    return forward("open64", path, flags, mode);
}

/* The path (dir, rel) names: dir's path, read back from /proc, joined with rel. */
static const char *at_path(int dir, const char *rel, char *buf, size_t len)
{
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", dir);
    ssize_t n = dir == AT_FDCWD || rel[0] == '/' ? -1 : readlink(link, buf, len - 2);
    if (n < 0)
        return rel;
    snprintf(buf + n, len - (size_t)n, "/%s", rel);
    return buf;
}

static int forward_at(const char *sym, int dir, const char *path, int flags, mode_t mode)
{
    char buf[PATH_MAX + 256];
    maybe_stall(at_path(dir, path, buf, sizeof buf), flags);
    int (*real)(int, const char *, int, ...) =
        (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, sym);
    return real(dir, path, flags, mode);
}

int openat(int dir, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
    va_end(ap);
    return forward_at("openat", dir, path, flags, mode);
}

int openat64(int dir, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
    va_end(ap);
    return forward_at("openat64", dir, path, flags, mode);
}

long syscall(long n, ...)
{
    va_list ap;
    va_start(ap, n);
    long a[6];
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (n == SYS_openat2) {
        char buf[PATH_MAX + 256];
        const struct open_how *how = (const struct open_how *)a[2];
        maybe_stall(at_path((int)a[0], (const char *)a[1], buf, sizeof buf), (int)how->flags);
    }
    long (*real)(long, ...) = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
    return real(n, a[0], a[1], a[2], a[3], a[4], a[5]);
}
