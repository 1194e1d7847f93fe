/* save/commit.h - the commit protocol's steps, shared by save and reshard (private).
 * The protocol itself is described in docs/FORMAT.md and save/save.c. */
#ifndef CK_SAVE_COMMIT_H
#define CK_SAVE_COMMIT_H

#include <limits.h>
#include <stdbool.h>

#include "format/manifest.h"

/* Creates ROOT/.pending/NAME.TOKEN into out (PATH_MAX bytes). token NULL: a fresh
 * random one (12 hex digits, retried on collision); else the given one, and the
 * directory may exist already (the ranks of one multi-process save share it). */
int ck__pending_create(ck_engine *e, const char *root, const char *name, const char *token,
                       char *out, ck_err *err);
/* Removes the named files, the manifest and the directory; best effort, through the
 * engine, so that a "crashed" engine leaves the debris a real crash would. */
void ck__pending_remove(ck_engine *e, const char *pending, const ck_file *files, uint32_t n);
/* Steps 3-7: writes and fsyncs the manifest, fsyncs the pending directory, renames it
 * to ROOT/NAME (never replacing), fsyncs ROOT, records it in the catalog. *committed
 * tells whether the rename happened: after it, an error leaves a complete checkpoint. */
int ck__publish(ck_engine *e, const char *root, const char *pending, const ck__manifest *m,
                bool catalog, bool *committed, ck_err *err);

#endif
