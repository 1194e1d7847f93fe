/* format/owner.h - who owns a root or a save in progress: lock files (private;
 * docs/FORMAT.md, "Owners and locks").
 *
 * A lock file is held with flock(LOCK_EX) and records its holder ("pid P on HOST", and
 * " job J" for a save of a job: docs/FORMAT.md, "Job identity").
 * The kernel drops the lock when its holder dies, however it dies, so "nobody holds
 * it" means "its owner is dead": that is what lets recovery run beside live writers.
 *
 * The save of NAME belongs to whoever holds ROOT/.pending/NAME.lock, taken before the
 * save's directory ROOT/.pending/NAME.TOKEN is made and dropped (unlinked, then
 * closed) once the directory is committed or removed. A ckptd holds ROOT/.ckptd.ID.lock
 * for its whole life.
 *
 * A lock dies with the process that took it, a child forked without exec included: a
 * flock belongs to the open file, which fork() shares, so every lock file of the core
 * is opened and closed through ck__lock_open and ck__lock_close, which list this
 * process's lock descriptors, and a child closes its copies as it is forked
 * (pthread_atfork; decision 0144). vfork, posix_spawn and clone without them run no
 * such handler: their children exec, and O_CLOEXEC closes the copies there.
 */
#ifndef CK_FORMAT_OWNER_H
#define CK_FORMAT_OWNER_H

#include <stdbool.h>
#include <stddef.h>

#include "ck/error.h"

#define CK_LOCK_WHO_MAX 256        /* a holder's record, with its NUL */
#define CK_JOB_HEX_MAX 33          /* a job id (ck/client.h's 16 bytes) in hex, and NUL */

/* Lock files are reached beneath the root descriptor dir, as io/rootfs.h reaches
 * paths: rel names the file below ROOT (".pending/NAME.lock", ".ckptd.ID.lock"), root
 * names ROOT in messages. A lock path that is a link, a FIFO or anything but a regular
 * file is refused, never followed or opened. */

/* Opens a lock file beneath dir (ck__openat_reg) and lists its descriptor, so that a
 * child forked from here closes its copy; the same -errno otherwise, or -ENOMEM. */
int ck__lock_open(int dir, const char *rel, int flags, unsigned mode);
/* Unlists and closes a descriptor of ck__lock_open. No-op when fd < 0. */
void ck__lock_close(int fd);
/* A fork whose child takes the lock fd over, its parent exiting at once (ckptd's
 * detach): unlisted here, so that the child keeps it; the child then calls
 * ck__lock_adopt. Not for a process that goes on forking meanwhile. */
void ck__lock_hand_on(int fd);
/* In that child: lists fd again and records this process as its holder. 0 or
 * -ENOMEM (then the lock is held, but a child of this one would keep it too). */
int ck__lock_adopt(int fd);

/* Takes the lock file (created if absent) and records this process in it, with job
 * (a job id in hex) when not NULL. -EBUSY when a live process holds it: the error says
 * "WHAT (held by pid P on HOST, lock PATH)", and who (CK_LOCK_WHO_MAX bytes), when not
 * NULL, gets the holder's record. */
int ck__lock_take(int dir, const char *root, const char *rel, const char *what,
                  const char *job, char *who, int *fd, ck_err *err);
/* The job a holder's record names, into job (CK_JOB_HEX_MAX bytes): true, or false
 * when it names none. */
bool ck__lock_job(const char *who, char *job);
/* Unlinks the lock file while the lock is still held, so that nobody takes the old file
 * in between, then closes fd. No-op when *fd < 0. */
void ck__lock_drop(int dir, const char *rel, int *fd);
/* For recovery: 1 when nobody holds it, with *fd holding it now (-1 when there is no
 * such file); 0 when a live process holds it, described in who; or -errno (-ELOOP: a
 * link, -EMEDIUMTYPE: not a regular file). */
int ck__lock_probe(int dir, const char *rel, int *fd, char *who, size_t len);

/* For readers: 1 when a live process holds it (described in who), 0 when nobody does
 * or there is no such file, or -errno. Opens read-only and tries a shared lock,
 * dropped at once: a live holder is never disturbed, and only a writer taking a free
 * lock in that instant would find it held. */
int ck__lock_held(int dir, const char *rel, char *who, size_t len);

/* ROOT/.ckptd.ID.lock, held for its whole life by the save engine of that id: a ckptd,
 * or the embedded engine of a process that shares saves with other processes. A second
 * engine of the id is refused (-EBUSY, what says why) once the lock stayed held for
 * CK_ENGINE_LOCK_WAIT_MS (another engine's recovery holds a free one for an instant),
 * and recovery knows the heartbeat ROOT/.ckptd.ID.beat of an engine whose lock nobody
 * holds as debris. Beneath ROOT, never through a link: a lock planted as a link is
 * refused, naming it. */
#define CK_NODE_ID_LOCK_MAX (64 + 16)   /* ".ckptd." + an engine id + ".lock" + NUL */
#define CK_ENGINE_LOCK_WAIT_MS 2000
int ck__engine_lock(const char *root, const char *id, const char *what, int *fd, ck_err *err);
/* Unlinks the engine's lock and closes it (ck__lock_drop). */
void ck__engine_unlock(const char *root, const char *id, int *fd);

/* ".pending/NAME.lock", the save lock of NAME below ROOT, into out (PATH_MAX bytes). */
int ck__save_lock_rel(const char *name, char *out, ck_err *err);

#endif
