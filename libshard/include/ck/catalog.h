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

#endif
