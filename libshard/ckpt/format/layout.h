/* format/layout.h - every name the core gives a file or directory under a root
 * (private to the core; docs/FORMAT.md, "Directory layout").
 *
 * As LMDB's mdb.c is the only code that knows its pages, format/layout.c is the only
 * code that spells a name of the layout: the others make the names they write, and read
 * the names they find, through it. A change of layout is a change of this file.
 *
 *   ROOT/catalog.mdb, catalog.mdb-lock         the catalog (format/catalog.c)
 *   ROOT/NAME/manifest.mdb, rank-NNNNN.dat,    a checkpoint: its manifest and data files
 *             ref-NNNNN.dat, copy              (a reshard's files made by reference; what a
 *                                              partial copy holds, format/copy.h)
 *   ROOT/.pending/NAME.TOKEN                   a save in progress
 *   ROOT/.pending/NAME.lock                    its owner's lock (format/owner.h)
 *   ROOT/.pending/NAME.TOKEN-meet              the meeting of the engines sharing it
 *                                              (save/meet.h): plan, join.ID, part.ID.SEQ,
 *                                              failed.ID
 *   ROOT/.pending/NAME.TOKEN-removed           a checkpoint being removed
 *   ROOT/.ckptd.ID.lock, .beat, .peer          an engine's lock, heartbeat and peer
 *                                              address (ckptd's peer service)
 *   ROOT/.ckptd.ID.drains                      the drains daemon ID owes, for its peers
 *   ROOT/.ckptd.key                            the job's peer key (ckptd/kd_peer_key.c)
 *   LOCAL/.replicas/SRC, LOCAL/.fetched/N      a local tier's roots (format/tier.c)
 *   .NAME.tmp                                  a file being written, renamed into place
 *
 * Every maker writes into out (len bytes) and returns 0, or -ENAMETOOLONG when the name
 * does not fit; nothing here touches a file.
 */
#ifndef CK_FORMAT_LAYOUT_H
#define CK_FORMAT_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ck/ckpt.h"

#define CK_PENDING     ".pending"
#define CK_MANIFEST    "manifest.mdb"
#define CK_CATALOG     "catalog.mdb"
#define CK_COPY_FILE   "copy"      /* marks a partial copy (docs/FORMAT.md, "Copies") */
#define CK_REPLICAS    ".replicas" /* LOCAL/.replicas/SRC: a local tier's replicas (ck/catalog.h) */
#define CK_FETCHED     ".fetched"  /* LOCAL/.fetched/N: its fetched copies */
#define CK_PEER_KEY    ".ckptd.key" /* ROOT/.ckptd.key: the job's peer key */
#define CK_TOKEN_MAX   16          /* a save's token (NAME.TOKEN) with its NUL */
#define CK_NODE_ID_MAX 64          /* an engine id with its NUL: [A-Za-z0-9._-] */

/* ---- making names (relative to ROOT unless said) ---- */

/* .pending/NAME.TOKEN, the directory of a save in progress. */
int ck__name_save(const char *name, const char *token, char *out, size_t len);
/* .pending/NAME.TOKEN-meet, the meeting of the engines that share that save. */
int ck__name_meet(const char *name, const char *token, char *out, size_t len);
/* .pending/NAME.TOKEN-removed, a removal's directory. */
int ck__name_removed(const char *name, const char *token, char *out, size_t len);
/* A fresh token from random bits (12 hex digits): a save's, a removal's. */
void ck__name_token(uint64_t bits, char *token);
/* Whether token is one ck__name_token makes (never a meeting's or a removal's name). */
bool ck__token_ok(const char *token);
/* .pending/NAME.lock, the save lock of NAME. */
int ck__name_save_lock(const char *name, char *out, size_t len);
/* DIR/manifest.mdb, DIR a checkpoint's or a save's directory (relative or not). */
int ck__name_manifest(const char *dir, char *out, size_t len);
/* A data file's name in its checkpoint: rank-NNNNN.dat, or ref-NNNNN.dat for the files
 * a reshard makes by reference; out holds CK_FILE_NAME_MAX bytes. */
void ck__name_data_file(bool ref, uint64_t index, char *out);

typedef enum ck__engine_file {
    CK_ENGINE_LOCK, CK_ENGINE_BEAT, CK_ENGINE_PEER, CK_ENGINE_DRAIN, CK_ENGINE_DRAINS
} ck__engine_file;
/* .ckptd.ID.lock, .ckptd.ID.beat or .ckptd.ID.peer, of the engine (a ckptd, or a
 * process's embedded engine) of that id; .ckptd.ID.drain, in a local tier, the drains
 * daemon ID owes the durable tier, and .ckptd.ID.drains, in the durable root, the
 * names of those it makes itself, for the daemons that stand by (ckptd/kd_drain.c). */
int ck__name_engine(const char *id, ck__engine_file kind, char *out, size_t len);
/* FILE.TOKEN.tmp: a file made whole under a name no other process takes, then linked
 * to FILE (a key two daemons may make at once: the first link wins). */
int ck__name_tmp_unique(const char *file, uint64_t bits, char *out, size_t len);

/* The catalog's lock and its temporary (a dot name: no scan takes it for a save). */
#define CK_CATALOG_LOCK CK_CATALOG "-lock"
#define CK_CATALOG_TMP "." CK_CATALOG ".tmp"

typedef enum ck__meet_file {
    CK_MEET_PLAN,              /* plan: the coordinator's */
    CK_MEET_JOIN,              /* join.ID: an engine taking part */
    CK_MEET_PART,              /* part.ID.SEQ: part records of durable ranks */
    CK_MEET_FAILED,            /* failed.ID: why that engine gave the save up */
    /* A tiered save's (docs/FORMAT.md, "Local copies of a save"): */
    CK_MEET_TIER,              /* tier: the coordinator's manifest and node order */
    CK_MEET_COPY,              /* copy.ID: that engine's local copy is committed */
    CK_MEET_REPL,              /* repl.ID: how that engine's replication ended */
    CK_MEET_DRAIN,             /* drain.ID: how the drain of a save asked durable ended */
    CK_MEET_SETTLED,           /* settled.ID: that member read the save's last records */
    CK_MEET_SHARE,             /* share.ID: the least rank of that member, all its ranks in */
    CK_MEET_OTHER,             /* no file a meeting holds */
} ck__meet_file;
/* A meeting's file of that kind, for engine id (and seq, for CK_MEET_PART). */
int ck__name_meet_file(ck__meet_file kind, const char *id, uint32_t seq, char *out, size_t len);
/* .NAME.tmp, where NAME is written before it is renamed into place: a dot name, which
 * no reader of the directory takes for NAME. */
int ck__name_tmp(const char *name, char *out, size_t len);

/* ---- reading names ---- */

/* The prefix of the meeting files of a kind ("join."), for listing them. */
const char *ck__meet_prefix(ck__meet_file kind);
/* A meeting file's kind; its engine id (without the SEQ of a part) into id
 * (CK_NODE_ID_MAX bytes) when not NULL. */
ck__meet_file ck__meet_file_of(const char *file, char *id);

typedef enum ck__pending_kind {
    CK_PEND_OTHER = 0,         /* a name no save makes */
    CK_PEND_SAVE,              /* NAME.TOKEN */
    CK_PEND_MEET,              /* NAME.TOKEN-meet */
    CK_PEND_REMOVED,           /* NAME.TOKEN-removed */
    CK_PEND_LOCK,              /* NAME.lock */
} ck__pending_kind;
/* What the entry of .pending is, the name of the checkpoint it belongs to (into name,
 * CK_NAME_MAX bytes, when not NULL) and its token (CK_TOKEN_MAX bytes, when not NULL;
 * "" for a lock). */
ck__pending_kind ck__pending_entry(const char *entry, char *name, char *token);
/* Whether file is one a save makes in a pending entry of that kind: the manifest and
 * data files in a save's directory, the meeting's files (and their temporaries) in a
 * meeting. Recovery removes only those. */
bool ck__made_by_save(ck__pending_kind kind, const char *file);
/* Whether name, an entry of ROOT, is an engine's file of that kind (.ckptd.ID.beat,
 * .ckptd.ID.peer); its id into id (CK_NODE_ID_MAX bytes). */
bool ck__engine_file_of(const char *name, ck__engine_file kind, char *id);

#endif
