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

/* Records a committed checkpoint. */
int ck_catalog_put(const char *root, const ck_info *info, ck_err *err);
/* Removes a name (no error when absent). */
int ck_catalog_del(const char *root, const char *name, ck_err *err);
/* All entries in name order (malloc'd). A root without a catalog lists nothing. */
int ck_catalog_list(const char *root, ck_cat_entry **out, size_t *n, ck_err *err);

/* What the directories of ROOT hold: committed checkpoint names and the leftovers of
 * incomplete saves under .pending/ (malloc'd arrays of malloc'd strings). */
typedef struct ck_scan {
    char **committed;
    size_t n_committed;
    char **pending;
    size_t n_pending;
} ck_scan;
int ck_root_scan(const char *root, ck_scan *out, ck_err *err);
void ck_scan_free(ck_scan *s);
/* Whether `entry` (one of ck_scan's pending, NAME.TOKEN) is a save in progress: 1
 * when the writer that owns it is alive, i.e. holds .pending/NAME.lock (who: "pid P
 * on HOST"); 0 when it is the debris of a dead writer, which the next recovery
 * removes; or -errno. Read-only, and safe beside live writers (docs/FORMAT.md,
 * "Owners and locks"). */
int ck_pending_live(const char *root, const char *entry, char *who, size_t len, ck_err *err);

typedef struct ck_rebuild_report {
    size_t added, removed, kept, unreadable;
} ck_rebuild_report;

/* Makes the catalog list exactly the readable committed directories. Unreadable ones
 * are reported through log and left alone. */
int ck_catalog_rebuild(const char *root, ck_rebuild_report *rep,
                       void (*log)(void *arg, const char *msg), void *arg, ck_err *err);

/* Recovery (ckptd runs it at start): removes the leftovers of incomplete saves under
 * ROOT/.pending whose writers are dead (each logged; a save whose writer still holds
 * its lock is kept and logged, docs/FORMAT.md "Owners and locks"), then reconciles the
 * catalog with the directories. Never touches a committed checkpoint; safe beside live
 * writers on a file system whose flock() is coherent between them. */
int ck_root_recover(const char *root, size_t *removed, void (*log)(void *arg, const char *msg),
                    void *arg, ck_err *err);

/* Removes the committed checkpoint NAME of ROOT, crash-safe at every step: after a
 * crash or a power cut at any point, NAME is either visible and intact or out of sight
 * (its leftovers are debris under the root that the next recovery removes); every
 * other checkpoint is untouched, and the catalog at worst misses a NAME still visible,
 * which reconciling lists again (docs/FORMAT.md, "Removing a checkpoint"). Its I/O goes
 * through e (NULL: the real engine). -ENOENT when ROOT holds no committed checkpoint
 * NAME, -EINVAL for a name that is no checkpoint name (a path, "..", a dot file),
 * -ENOTDIR when ROOT/NAME is a link or a file, -EBUSY when a live process saves or
 * removes NAME (the error names it); nothing is touched in these cases. */
int ck_root_remove(const char *root, const char *name, ck_engine *e, ck_err *err);

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
int ck_name_probe(const char *root, const char *name, char *who, size_t len, ck_err *err);

/* What a path is: a committed checkpoint (it holds a manifest), a checkpoint root
 * (it holds a catalog or saves' leftovers), or neither. Never fails. */
typedef enum ck_path_kind { CK_PATH_OTHER = 0, CK_PATH_ROOT = 1, CK_PATH_CHECKPOINT = 2 } ck_path_kind;
ck_path_kind ck_path_kind_of(const char *path);

#endif
