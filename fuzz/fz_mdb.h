/* fz_mdb.h - LMDB files from fuzz input, and fuzz input from LMDB files.
 *
 * The manifest and catalog targets fuzz the records, not LMDB's page format (LMDB
 * trusts its pages; docs/decisions/0045-fuzzing.md): an input is a list of records, each
 *   u8 db, u8 key length, key, u16 value length (little-endian), value
 * where db indexes the target's table of database names (modulo its size). The target
 * writes them into a fresh LMDB file and opens it with the code under test. Seeds are
 * real files dumped the other way (fuzz/make_seeds.c).
 */
#ifndef FZ_MDB_H
#define FZ_MDB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Writes the records of data into a new LMDB file named file in fz_scratch()
 * (MDB_NOSUBDIR; any old file and lock file are removed first). Records LMDB refuses
 * (an empty key) are skipped. 0, or -1 when LMDB failed to create the file. */
int fz_mdb_build(const char *file, const char *const *dbs, int ndbs, const uint8_t *data,
                 size_t size);

/* Appends every record of the named databases of the LMDB file at path to out, in the
 * input format above. 0 or -1. */
int fz_mdb_dump(const char *path, const char *const *dbs, int ndbs, FILE *out);

/* A scratch directory of this process, created once (/dev/shm, $TMPDIR or /tmp). */
const char *fz_scratch(void);

#endif
