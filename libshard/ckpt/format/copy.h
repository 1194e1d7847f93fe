/* format/copy.h - the file NAME/copy that marks a partial copy (private; docs/FORMAT.md,
 * "Copies").
 *
 * A partial copy is an ordinary committed checkpoint directory holding the whole
 * manifest and some of the data files; NAME/copy says which, and whose they are:
 *
 *   libshard copy 1
 *   source ID
 *   files N
 *   rank-00000.dat          (N lines, each a data file of the manifest, once)
 *
 * It is written and fsynced in the pending directory before the commit rename, so a
 * copy is never visible without it. A reader refuses one of another version, longer
 * than its N names can make it, or naming a file the manifest does not have or one
 * twice, as a bad checkpoint, naming the line.
 */
#ifndef CK_FORMAT_COPY_H
#define CK_FORMAT_COPY_H

#include <stdint.h>

#include "ck/ckpt.h"

#define CK_COPY_VERSION 1

/* Whether id can be a copy's source: a daemon id, 1 to 63 bytes of [A-Za-z0-9._-],
 * not starting with '.'. */
int ck__copy_source_check(const char *id, ck_err *err);

/* The ids of files[0, n) sorted by name (malloc'd), for ck__file_find. */
uint32_t *ck__files_by_name(const ck_file *files, uint32_t n);
/* The id of the file named name, or -1: a binary search of by_name. */
int64_t ck__file_find(const ck_file *files, const uint32_t *by_name, uint32_t n,
                      const char *name);

/* Reads dirfd's copy file, if any, against the manifest's files (files, n, their
 * names unique): *held gets a malloc'd flag per file, 1 for each it lists, and *copy
 * what it says. No copy file: a complete copy, *held NULL. dir names the directory
 * in messages. */
int ck__copy_read(int dirfd, const char *dir, const ck_file *files, uint32_t n,
                  ck_copy *copy, uint8_t **held, ck_err *err);

/* Writes dirfd's copy file (a new file, never through a link) listing files[i] for
 * each i with held[i], n in all, and fsyncs it. dir names the directory. */
int ck__copy_write(int dirfd, const char *dir, const char *source, const ck_file *files,
                   const uint8_t *held, uint32_t n, ck_err *err);

#endif
