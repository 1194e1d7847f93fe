/* format/catalog.h - writing the root's catalog (private to the core): only a commit
 * (save/commit.c) adds a name, only a removal (format/remove.c) takes one out, so that
 * nothing else writes the catalog outside them. Reading it is ck/catalog.h's. */
#ifndef CK_FORMAT_CATALOG_H
#define CK_FORMAT_CATALOG_H

#include "ck/catalog.h"

/* Records a committed checkpoint. */
int ck__catalog_put(const char *root, const ck_info *info, ck_err *err);
/* Removes a name (no error when absent). */
int ck__catalog_del(const char *root, const char *name, ck_err *err);

#endif
