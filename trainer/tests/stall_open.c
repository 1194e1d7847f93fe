/* stall_open.c - an LD_PRELOAD library for tests: a host whose storage hangs.
 *
 * An open() that creates a file whose path matches the glob in $STALL_OPEN (fnmatch,
 * '*' crossing '/') never returns: the thread sleeps until the process ends, as a
 * thread blocked on an unreachable NFS server would. Every other open() is the C
 * library's. Both symbols are defined (a build with 64-bit offsets calls open64), so
 * the headers must not rename one into the other. */
#undef _FILE_OFFSET_BITS
#include <dlfcn.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

int open(const char *path, int flags, ...);
int open64(const char *path, int flags, ...);

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
