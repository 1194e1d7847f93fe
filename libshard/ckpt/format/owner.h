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
 */
#ifndef CK_FORMAT_OWNER_H
#define CK_FORMAT_OWNER_H

#include <stdbool.h>
#include <stddef.h>

#include "ck/error.h"

#define CK_LOCK_SUFFIX ".lock"
#define CK_LOCK_WHO_MAX 256        /* a holder's record, with its NUL */
#define CK_JOB_HEX_MAX 33          /* a job id (ck/client.h's 16 bytes) in hex, and NUL */

/* Lock files are reached beneath the root descriptor dir, as io/rootfs.h reaches
 * paths: rel names the file below ROOT (".pending/NAME.lock", ".ckptd.ID.lock"), root
 * names ROOT in messages. A lock path that is a link, a FIFO or anything but a regular
 * file is refused, never followed or opened. */

/* Takes the lock file (created if absent) and records this process in it, with job
 * (a job id in hex) when not NULL. -EBUSY when a live process holds it: the error says
 * "WHAT (held by pid P on HOST, lock PATH)", and who (CK_LOCK_WHO_MAX bytes), when not
 * NULL, gets the holder's record. */
int ck__lock_take(int dir, const char *root, const char *rel, const char *what,
                  const char *job, char *who, int *fd, ck_err *err);
/* Records the calling process (and job, or NULL) as the holder again (after a fork that
 * kept the lock). */
void ck__lock_note_pid(int fd, const char *job);
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
 * engine of the id is refused (-EBUSY, what says why), and recovery knows the heartbeat
 * ROOT/.ckptd.ID.beat of an engine whose lock nobody holds as debris. Beneath ROOT,
 * never through a link: a lock planted as a link is refused, naming it. */
#define CK_NODE_ID_LOCK_MAX (64 + 16)   /* ".ckptd." + an engine id + ".lock" + NUL */
int ck__engine_lock(const char *root, const char *id, const char *what, int *fd, ck_err *err);
/* Unlinks the engine's lock and closes it (ck__lock_drop). */
void ck__engine_unlock(const char *root, const char *id, int *fd);

/* ".pending/NAME.lock", the save lock of NAME below ROOT, into out (PATH_MAX bytes). */
int ck__save_lock_rel(const char *name, char *out, ck_err *err);

#endif
