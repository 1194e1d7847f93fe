/* io/rootfs.h - paths under a checkpoint root, reached without following links (private).
 *
 * A root is often shared: whoever may write in it may plant a symbolic link, a FIFO or
 * a device where the core expects one of its own files, so that a save, a recovery or a
 * tool writes, deletes or hangs outside the root. So ROOT itself is opened once, as its
 * user named it (links in that path are the user's choice), and everything below it is
 * reached from that descriptor: one component at a time, never through a link
 * (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, or openat with O_NOFOLLOW on kernels
 * without openat2); a link met anywhere below is -ELOOP. Data is read only from
 * regular files: a FIFO, a device or a socket is CK_ENOTREG, found without blocking.
 * docs/FORMAT.md, "Links and special files", is the contract.
 *
 * Relative paths here ("rel") are beneath the directory descriptor given: no leading
 * '/', no empty, "." or ".." component (-EINVAL). With dir == AT_FDCWD the path is
 * opened as given, links followed: that is how a root itself is opened, never a path
 * inside one.
 */
#ifndef CK_IO_ROOTFS_H
#define CK_IO_ROOTFS_H

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "ck/error.h"

/* Something that is not a regular file where data, a manifest, a catalog or a lock
 * was expected. (The errno is otherwise unused by the core, so it cannot be mistaken
 * for another failure; messages come from ck__why, never from its strerror.) */
#define CK_ENOTREG (-EMEDIUMTYPE)

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

/* The length of "/proc/self/fd/N" (ck__fd_path). */
#define CK_FD_PATH_MAX 32

/* Opens the directory root (links in its path followed: the user named it) for the
 * *at calls below; the caller closes it. fd, or -errno with a message naming root:
 * -ENOTDIR, "the checkpoint root is not a directory (it is a FIFO)", for anything
 * that is not one, a link to nothing included. */
int ck__root_open(const char *root, ck_err *err);
/* The error for a root whose open failed with r (-errno), as ck__root_open words it. */
int ck__root_refuse(const char *root, int r, ck_err *err);

/* The same through engine e (so that a test engine sees the root the later *at calls
 * name): for the code that changes a root, saves and removals. */
struct ck_engine;
int ck__root_open_engine(struct ck_engine *e, const char *root, ck_err *err);

/* Opens rel beneath dir without following a link in any component: a descriptor, or
 * -errno (-ELOOP: a link was met). O_CLOEXEC is added. */
int ck__openat(int dir, const char *rel, int flags, unsigned mode);
/* The same, by walking one component at a time with O_NOFOLLOW: the fallback of
 * ck__openat where the kernel has no openat2; public for its tests. */
int ck__openat_walk(int dir, const char *rel, int flags, unsigned mode);
/* ck__openat for a regular file only: a FIFO, device, socket or directory is
 * CK_ENOTREG, found without blocking (the open is O_NONBLOCK, dropped after the check
 * unless flags asked for it). */
int ck__openat_reg(int dir, const char *rel, int flags, unsigned mode);
/* Reads fd from its offset into buf until its end, at most max bytes: *len gets how many.
 * -EFBIG when it holds more (*len is then max; one byte past max is read to tell, never
 * more). */
int ck__read_upto(int fd, void *buf, size_t max, size_t *len);
/* A small file rel beneath dir, whole: opened as ck__openat_reg opens it (no links, a
 * regular file, never waited on), then ck__read_upto. What every reader of a daemon's
 * or a meeting's little files under a shared root uses. */
int ck__read_small(int dir, const char *rel, void *buf, size_t max, size_t *len);
/* The same into a buffer of the file's size (malloc'd, into *out, with a NUL after its
 * *len bytes): -EFBIG for a file of more than max bytes, found before anything is
 * allocated; -EIO for one cut short while read (the files read so are replaced whole,
 * never changed in place: one that shrinks is not what was written). */
int ck__read_whole(int dir, const char *rel, size_t max, uint8_t **out, size_t *len);

/* The directory holding rel (opened beneath dir as above) and rel's last component in
 * *leaf (pointing into rel): for the *at calls on names. The caller closes it. */
int ck__parent_at(int dir, const char *rel, const char **leaf);

/* mkdir, unlink (flags 0 or AT_REMOVEDIR), rename (renameat2 flags) and hard link of
 * rel beneath dir: the parents are reached as ck__openat reaches them, and the last
 * component is named, never followed (removing or renaming a link touches the link).
 * 0 or -errno. */
int ck__mkdirat(int dir, const char *rel, unsigned mode);
int ck__unlinkat(int dir, const char *rel, int flags);
int ck__renameat(int fromdir, const char *from, int todir, const char *to, unsigned flags);
int ck__linkat(int fromdir, const char *from, int todir, const char *to);
/* lstat of rel beneath dir: a link is reported as a link. 0 or -errno. */
int ck__statat(int dir, const char *rel, struct stat *st);

/* The part of path below root ("" for root itself), when path is root + "/" + more;
 * NULL otherwise. */
const char *ck__rel(const char *root, const char *path);

/* "/proc/self/fd/N" for fd, for libraries that open by path only (LMDB): opening it
 * reaches that very file, whatever its name points to now. -ENOENT with a message
 * when /proc is not mounted. */
int ck__fd_path(int fd, char out[CK_FD_PATH_MAX], ck_err *err);

/* Words for an open failure: "a symbolic link (links are never followed inside a
 * checkpoint root)", "not a regular file", or strerror. */
const char *ck__why(int r);
/* "a FIFO", "a character device", "a symbolic link", ... for a non-regular mode. */
const char *ck__ftype(mode_t m);

#endif
