/* save/commit.h - the commit protocol's steps, shared by save and reshard (private).
 * The protocol itself is described in docs/FORMAT.md and save/save.c.
 *
 * Every path is reached beneath the root's descriptor (rootfd, opened through the
 * engine; root names it in messages), never through a link (io/rootfs.h): a .pending,
 * a lock, a pending directory or a manifest planted as a link is refused, not
 * followed. */
#ifndef CK_SAVE_COMMIT_H
#define CK_SAVE_COMMIT_H

#include <limits.h>
#include <stdbool.h>

#include "format/layout.h"
#include "format/manifest.h"

/* Creates ROOT/.pending/NAME.TOKEN into out (PATH_MAX bytes). token NULL: this
 * process owns the save: it takes the save's lock first (*lock, held until
 * ck__pending_unlock; -EBUSY while another live writer saves NAME, said as "another
 * job" where the holder's record names a job other than job), then a fresh
 * random token (12 hex digits, retried on collision). Else the given token (the ranks
 * of one multi-process save share its directory): the process that will commit (own)
 * takes the lock as above, the others leave *lock at -1. -EEXIST when a checkpoint
 * NAME is committed already; -ELOOP or -ENOTDIR when ROOT/.pending or the lock is a
 * link or not what it should be, naming it. job: the save's job id in hex, recorded in
 * the lock (format/owner.h), or NULL (a tool's save, of no job). */
int ck__pending_create(ck_engine *e, int rootfd, const char *root, const char *name,
                       const char *token, bool own, const char *job, char *out, int *lock,
                       ck_err *err);
/* The fresh-token step of ck__pending_create alone, for a writer that holds NAME's
 * lock already: a new attempt at a copy (ops/copy_in.c, opts.again). */
int ck__pending_fresh(ck_engine *e, int rootfd, const char *root, const char *name, char *out,
                      ck_err *err);
/* Lets go of the save's lock (see format/owner.h): once the directory is committed or
 * removed, or left as debris that recovery may now remove. No-op when *lock < 0. */
void ck__pending_unlock(int rootfd, const char *name, int *lock);
/* Removes the named files, the manifest and the directory; best effort, through the
 * engine, so that a "crashed" engine leaves the debris a real crash would. */
void ck__pending_remove(ck_engine *e, int rootfd, const char *root, const char *pending,
                        const ck_file *files, uint32_t n);
/* Steps 3-7: writes and fsyncs the manifest, fsyncs the pending directory, renames it
 * to ROOT/NAME (never replacing), fsyncs ROOT, records it in the catalog. 0 once the
 * rename happened (*committed): a failed fsync of ROOT or catalog update after it is
 * a warning to log (NULL: none), never an error, as the checkpoint is complete and
 * visible; an error means nothing was published. */
int ck__publish(ck_engine *e, int rootfd, const char *root, const char *pending,
                const ck__manifest *m, bool catalog, bool *committed,
                void (*log)(void *arg, const char *msg), void *log_arg, ck_err *err);
/* Steps 4-7 alone, for a directory whose files and manifest are written and fsynced
 * already (a copy received whole, ops/copy.h): fsyncs it, renames it to
 * ROOT/info->name, fsyncs ROOT, records info in the catalog; the same outcomes. */
int ck__commit_dir(ck_engine *e, int rootfd, const char *root, const char *pending,
                   const ck_info *info, bool catalog, bool *committed,
                   void (*log)(void *arg, const char *msg), void *log_arg, ck_err *err);

#endif
