/* save/meet.h - the meeting of the daemons that share one save (private; the files
 * are docs/FORMAT.md, "Saves served by several daemons", meeting version 2).
 *
 * Daemons of several nodes write one save into one pending directory and meet only
 * through the shared file system, never through a network service of their own:
 *
 *   ROOT/.ckptd.ID.beat                  each daemon's heartbeat: instance and counter
 *   ROOT/.pending/NAME.TOKEN-meet/       the meeting of the save .pending/NAME.TOKEN
 *     plan                               by the coordinator (the daemon of rank 0),
 *                                        naming the job whose save it is
 *     join.ID                            a daemon taking part, with its instance
 *     part.ID.SEQ                        part records of durable ranks, and their blobs
 *     failed.ID                          why daemon ID gave the save up
 *     share.ID                           the least rank of a member, all its ranks in
 *     tier, copy.ID, repl.ID, drain.ID,  a tiered save's (docs/FORMAT.md, "Local copies
 *     settled.ID                         of a save")
 *
 * Every file is written under a temporary name and renamed into place, so a reader
 * sees a whole file or none; part records and failures are also fsynced with their
 * directory before they count. Readers poll (no inotify: NFS has none across hosts).
 * This file knows the files and their encodings; who writes what when is the saver's
 * (async/saver.c).
 */
#ifndef CK_SAVE_MEET_H
#define CK_SAVE_MEET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ck/save.h"
#include "format/layout.h"
#include "format/owner.h"
#include "save/commit.h"

#define CK_MEET_VERSION 2

/* Whether id is a daemon id: 1 to 63 bytes of [A-Za-z0-9._-], not starting with '.'. */
int ck__node_id_check(const char *id, ck_err *err);

typedef struct ck__meet_plan {
    uint64_t step, world;
    uint32_t nodes;
    char coord[CK_NODE_ID_MAX];    /* the coordinating daemon */
    uint64_t instance;             /* its instance (its heartbeat's) */
    char job[CK_JOB_HEX_MAX];      /* the job whose save it is, in hex: a member of
                                    * another job never joins it */
} ck__meet_plan;

/* ROOT/.pending/NAME.TOKEN-meet into out (PATH_MAX bytes). */
void ck__meet_dir(const char *root, const char *name, const char *token, char *out);
/* The coordinator, holding the save's lock: makes the meeting and its plan. */
int ck__meet_create(const char *root, const char *name, const char *token,
                    const ck__meet_plan *plan, ck_err *err);
/* A member: calls fn for each open meeting of NAME (a plan of this version, no failed.*
 * or settled.* record), whatever its job, with its token and plan, until fn returns nonzero, which
 * it returns; 0 when fn never did (or there is no meeting yet). */
int ck__meet_each_open(const char *root, const char *name,
                       int (*fn)(void *arg, const char *token, const ck__meet_plan *plan),
                       void *arg, ck_err *err);

/* A meeting's directory is dir, a path under ROOT (root); it is reached beneath ROOT
 * and its files by name in it, no link followed (io/rootfs.h), and only regular files
 * are read: a link, FIFO or device planted in a meeting is an error naming it, never
 * a write, a delete or a hang outside the root. */

/* Writes name in the meeting dir under a temporary name, renames it into place; with
 * durable, fsyncs the file before and the directory after the rename. */
int ck__meet_put(const char *root, const char *dir, const char *name, const void *buf,
                 size_t len, bool durable, ck_err *err);
/* Calls fn for each file of the meeting of that kind (format/layout.h) with its name
 * and bytes (malloc'd for the call); stops at fn's first nonzero return and returns it. */
int ck__meet_each(const char *root, const char *dir, ck__meet_file kind,
                  int (*fn)(void *arg, const char *file, const uint8_t *buf, size_t len),
                  void *arg, ck_err *err);
/* Removes one file of the meeting (best effort). */
void ck__meet_drop(const char *root, const char *dir, const char *file);
/* Removes the meeting's files and the meeting itself (best effort). */
void ck__meet_remove(const char *root, const char *dir);

/* join.ID, share.ID and failed.ID: small text records. A join (kind CK_MEET_JOIN)
 * names the rank that brought the engine to the save (the first it serves), so that a
 * part that never arrives can be told by the engine that was to write it; UINT64_MAX
 * when the record has none. A share (CK_MEET_SHARE), in the same form, names the least
 * rank of a member whose world / nodes ranks have all begun: the nodes' order, known
 * before the commit (a tiered save's early clique, decision 0204). */
int ck__meet_join(const char *root, const char *dir, ck__meet_file kind, const char *id,
                  uint64_t instance, uint64_t rank, ck_err *err);
int ck__meet_join_decode(const uint8_t *buf, size_t len, uint64_t *instance, uint64_t *rank);
int ck__meet_fail(const char *root, const char *dir, const char *id, int code, const char *msg,
                  ck_err *err);
/* A failed.ID record: its code and message. */
int ck__meet_fail_decode(const uint8_t *buf, size_t len, int *code, char *msg, size_t cap);

/* part.ID.SEQ: n part records (save/part.h), then blobs (name, bytes), then the SHA-256
 * of all that. ck__meet_parts_decode calls fn per record and blob (one of rec and blob
 * is NULL); a damaged or truncated file is -EBADMSG before any callback. */
typedef struct ck__meet_blob {
    const char *name;
    const void *data;
    uint64_t len;
} ck__meet_blob;
int ck__meet_parts_encode(void *const *recs, const size_t *lens, uint32_t n,
                          const ck__meet_blob *blobs, uint32_t nblobs, uint8_t **out,
                          size_t *len);
int ck__meet_parts_decode(const uint8_t *buf, size_t len,
                          int (*fn)(void *arg, const void *rec, size_t rec_len,
                                    const ck__meet_blob *blob),
                          void *arg, ck_err *err);

/* ROOT/.ckptd.ID.beat: "ckptd beat 1 instance I counter C". Writing replaces it whole
 * (a rename); reading returns -ENOENT while there is none. */
int ck__beat_write(const char *root, const char *id, uint64_t instance, uint64_t counter,
                   ck_err *err);
int ck__beat_read(const char *root, const char *id, uint64_t *instance, uint64_t *counter);
void ck__beat_remove(const char *root, const char *id);

#endif
