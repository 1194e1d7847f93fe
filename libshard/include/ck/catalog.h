/* ck/catalog.h - the root catalog: which checkpoints ROOT holds.
 *
 * ROOT/catalog.mdb is an LMDB file keyed by checkpoint name. It is derived state: the
 * directories are the truth, the catalog makes listing cheap, and it can always be
 * rebuilt from them (a crash between a commit's rename and its catalog entry leaves
 * a checkpoint the catalog does not list yet; reconciling adds it).
 */
#ifndef CK_CATALOG_H
#define CK_CATALOG_H

#include <stddef.h>
#include <stdint.h>

#include "ck/ckpt.h"
#include "ck/engine.h"

typedef enum ck_state { CK_STATE_COMMITTED = 1 } ck_state;

typedef struct ck_cat_entry {
    char name[CK_NAME_MAX];
    uint8_t state;
    uint64_t step;
    uint64_t time_ns;
    uint64_t bytes;            /* data bytes */
    uint64_t n_tensors;
    ck_mesh mesh;
} ck_cat_entry;

/* The catalog's entries as it holds them, in name order (malloc'd): derived state, which
 * may lag the directories (a checkpoint removed by hand stays listed until a rebuild)
 * and, in a catalog someone planted, hold keys that are no checkpoint name. For what to
 * show, use ck_catalog_view. A root without a catalog lists nothing. */
CK_API int ck_catalog_list(const char *root, ck_cat_entry **out, size_t *n, ck_err *err);

/* What a listing of ROOT shows (ckpt-inspect ROOT): the catalog's entries whose name is
 * a checkpoint name (ck_name_check's rules, up to 255 bytes) and whose checkpoint is
 * committed on disk (ROOT/NAME a directory holding a manifest, looked up beneath the
 * root, never through a link), in name order; and what it left out. Read-only: nothing
 * is reconciled (a rebuild, ckpt-inspect --rebuild-catalog or a ckptd's start, drops
 * both kinds of entry). */
typedef struct ck_cat_view {
    ck_cat_entry *entries;     /* shown */
    size_t n;
    ck_cat_entry *gone;        /* listed, but not on disk: removed by hand, or a crash */
    size_t n_gone;
    size_t bad_names;          /* keys that are no checkpoint name: counted, never shown */
} ck_cat_view;
CK_API int ck_catalog_view(const char *root, ck_cat_view *out, ck_err *err);
CK_API void ck_cat_view_free(ck_cat_view *v);

/* What the directories of ROOT hold: committed checkpoint names and the leftovers of
 * incomplete saves under .pending/ (malloc'd arrays of malloc'd strings). */
typedef struct ck_scan {
    char **committed;
    size_t n_committed;
    char **pending;
    size_t n_pending;
} ck_scan;
CK_API int ck_root_scan(const char *root, ck_scan *out, ck_err *err);
CK_API void ck_scan_free(ck_scan *s);
/* The directory that holds ROOT's pending entries (ROOT/.pending), into buf (len
 * bytes), for what a tool says of them: 0, or -ENAMETOOLONG. */
CK_API int ck_pending_dir(const char *root, char *buf, size_t len);
/* Whether `entry` (one of ck_scan's pending, NAME.TOKEN) is a save in progress: 1
 * when the writer that owns it is alive, i.e. holds .pending/NAME.lock (who: "pid P
 * on HOST"); 0 when it is the debris of a dead writer, which the next recovery
 * removes; or -errno. Read-only, and safe beside live writers (docs/FORMAT.md,
 * "Owners and locks"). */
CK_API int ck_pending_live(const char *root, const char *entry, char *who, size_t len,
                           ck_err *err);

typedef struct ck_rebuild_report {
    size_t added, removed, kept, unreadable;
} ck_rebuild_report;

/* Makes the catalog list exactly the readable committed directories. Unreadable ones
 * are reported through log and left alone. */
CK_API int ck_catalog_rebuild(const char *root, ck_rebuild_report *rep,
                              void (*log)(void *arg, const char *msg), void *arg, ck_err *err);

/* Recovery (ckptd runs it at start): removes the leftovers of incomplete saves under
 * ROOT/.pending whose writers are dead (each logged; a save whose writer still holds
 * its lock is kept and logged, docs/FORMAT.md "Owners and locks"), then reconciles the
 * catalog with the directories. Never touches a committed checkpoint; safe beside live
 * writers on a file system whose flock() is coherent between them. */
CK_API int ck_root_recover(const char *root, size_t *removed,
                           void (*log)(void *arg, const char *msg), void *arg, ck_err *err);

/* Removes the committed checkpoint NAME of ROOT, crash-safe at every step: after a
 * crash or a power cut at any point, NAME is either visible and intact or out of sight
 * (its leftovers are debris under the root that the next recovery removes); every
 * other checkpoint is untouched, and the catalog at worst misses a NAME still visible,
 * which reconciling lists again (docs/FORMAT.md, "Removing a checkpoint"). Its I/O goes
 * through e (NULL: the real engine). -ENOENT when ROOT holds no committed checkpoint
 * NAME, -EINVAL for a name that is no checkpoint name (a path, "..", a dot file),
 * -ENOTDIR when ROOT/NAME is a link or a file, -EBUSY when a live process saves or
 * removes NAME (the error names it); nothing is touched in these cases. */
CK_API int ck_root_remove(const char *root, const char *name, ck_engine *e, ck_err *err);

/* What ROOT says about the name NAME: committed; not committed and held by a live
 * process (a save or a removal in progress; who: "pid P on HOST"); not committed, and
 * only the debris of a dead writer's save of it is left; or nothing at all. */
typedef enum ck_name_state {
    CK_NAME_FREE = 0,
    CK_NAME_BUSY = 1,
    CK_NAME_DEBRIS = 2,
    CK_NAME_COMMITTED = 3,
} ck_name_state;
/* Read-only, and safe beside live writers. Returns a ck_name_state or -errno (-EINVAL
 * for a name that is no checkpoint name). */
CK_API int ck_name_probe(const char *root, const char *name, char *who, size_t len, ck_err *err);

/* Makes the checkpoint root ROOT if it is missing (not its parents), as a job's first
 * save does. 0 when ROOT is a directory now; -ENOTDIR, "ROOT: the checkpoint root is not
 * a directory (it is a FIFO)", when it is anything else: a regular file, a FIFO, a link
 * to nothing or to a file. Every entry point that may make a root (saves, the tools,
 * the Python writer) goes through it; those that only read a root refuse the same way
 * when they open it. */
CK_API int ck_root_make(const char *root, ck_err *err);

/* The roots a node's local tier holds below itself (docs/FORMAT.md, "Copies"), each an
 * ordinary root: LOCAL/.replicas/SRC, the replicas ckptd keeps for daemon SRC, then
 * LOCAL/.fetched/N, the copies it fetched to restore from (N a number, one root per
 * fetch). Replica roots in name order, fetched ones by number; directories whose
 * names are daemon ids, never links. A root without them has none (*n 0). */
typedef enum ck_tier_kind { CK_TIER_REPLICAS = 1, CK_TIER_FETCHED = 2 } ck_tier_kind;
typedef struct ck_tier_root {
    ck_tier_kind kind;
    char id[CK_COPY_ID_MAX];   /* SRC, or N */
    char path[4096];           /* LOCAL/.replicas/SRC, LOCAL/.fetched/N */
} ck_tier_root;
CK_API int ck_tier_roots(const char *local, ck_tier_root **out, size_t *n, ck_err *err);
/* What lies in LOCAL/.replicas and LOCAL/.fetched and is no root of the tier (a link, a
 * FIFO, a device, a file, a directory whose name is no daemon id): fn(arg, path, what)
 * for each ("a symbolic link", "a FIFO", ...), nothing opened or followed. Returns how
 * many, or -errno. ck_tier_roots leaves them out; ckpt-verify refuses each by name. */
typedef void (*ck_tier_stray_fn)(void *arg, const char *path, const char *what);
CK_API int ck_tier_strays(const char *local, ck_tier_stray_fn fn, void *arg, ck_err *err);
/* Removes root t of the local tier LOCAL once it holds no checkpoint and nothing
 * pending (retention, after it removed a root's last copy through ck_root_remove):
 * only the names an empty root has (its catalog, the catalog's lock, .pending), then
 * the directory; anything else there keeps it. 1 removed, 0 kept, or -errno. */
CK_API int ck_tier_root_drop(const char *local, const ck_tier_root *t, ck_err *err);

/* What a path is: a committed checkpoint (it holds a manifest), a checkpoint root
 * (it holds a catalog or saves' leftovers), or neither. Never fails. */
typedef enum ck_path_kind { CK_PATH_OTHER = 0, CK_PATH_ROOT = 1, CK_PATH_CHECKPOINT = 2 } ck_path_kind;
CK_API ck_path_kind ck_path_kind_of(const char *path);

#endif
