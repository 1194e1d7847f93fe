/* format/manifest.h - the manifest's LMDB schema, shared by the writer and the reader
 * (private to the core; docs/FORMAT.md is the contract it implements). */
#ifndef CK_FORMAT_MANIFEST_H
#define CK_FORMAT_MANIFEST_H

#include <lmdb.h>

#include "ck/ckpt.h"
#include "ck/engine.h"
#include "format/enc.h"

/* Named databases of a manifest. */
#define CK_DB_META    "meta"
#define CK_DB_TENSORS "tensors"
#define CK_DB_SHARDS  "shards"
#define CK_DB_FILES   "files"
#define CK_DB_HASHES  "hashes"
#define CK_DB_BLOBS   "blobs"
#define CK_META_KEY   "checkpoint"

typedef struct ck__blob_rec {
    char name[CK_NAME_MAX];
    const void *data;
    size_t len;
} ck__blob_rec;

/* Appends a copy of blob (name, data, len) to the array *blobs of *n records
 * (capacity *cap). 0 or -ENOMEM. */
int ck__blob_append(ck__blob_rec **blobs, uint32_t *n, size_t *cap, const char *name,
                   const void *data, size_t len);

/* Everything a manifest says, as the writer hands it over. Tensor i has id i, and its
 * shards are shards[tensors[i] first .. ] in index order: shards are sorted by
 * (tensor, idx). hashes[f] holds the digests of file f's blocks, or NULL. */
typedef struct ck__manifest {
    ck_info info;
    const ck_tensor *tensors;
    const ck_shard *shards;
    const ck_file *files;
    const uint8_t *const *hashes;
    const ck__blob_rec *blobs;
} ck__manifest;

/* Writes the manifest at rel beneath dir (a new file, never a link: anything already
 * there is refused; path names it in messages) in one transaction, then fsyncs it
 * through the engine. */
int ck__manifest_write(ck_engine *e, int dir, const char *rel, const char *path,
                       const ck__manifest *m, ck_err *err);

/* Record header: the format version every value starts with. */
void ck__put_version(ck__wbuf *w);
/* Checks a value's version; what names the record in the error. */
int ck__get_version(ck__rbuf *r, const char *file, const char *what, ck_err *err);

/* LMDB maps the file and trusts its meta page: a file cut short would fault (SIGBUS)
 * on the first access past its end, and one cut short by someone else while it is
 * mapped faults too. So an LMDB file is never mapped where it lies: ck__mdb_copy
 * copies the regular file open as fd into memory of this process (a memfd, *mem;
 * sealed against any change when seal), and LMDB then maps the copy (ck__fd_path).
 *
 * Its meta pages are read and checked first, from the file (magic, version, page
 * size), and only the pages they say are in use are copied, and only where the file
 * holds data: a file that uses more than max bytes (what names its kind in the
 * message: "a manifest"), or whose size is beyond what it uses by more than that much
 * again (and 1 MiB), is refused (-EBADMSG) before anything is copied; one cut short,
 * before or during the copy, is refused after. So memory goes by what the file holds,
 * never by its size (docs/FORMAT.md, "LMDB files are never mapped where they lie").
 * path names the file in messages. The copy of an empty file is empty, and not
 * checked. */
int ck__mdb_copy(int fd, const char *path, const char *what, uint64_t max, bool seal, int *mem,
                 ck_err *err);
/* The most bytes a manifest and a catalog may use: a manifest takes about 60 bytes per
 * block hash (4 GiB: some 70 million blocks, hundreds of TB at the default 4 MiB), a
 * catalog about 150 per checkpoint. Writers refuse to make bigger ones. */
#define CK__MANIFEST_MAX (UINT64_C(4) << 30)
#define CK__CATALOG_MAX (UINT64_C(64) << 20)

/* Maps an LMDB return code to an errno-style one: corruption is -EBADMSG. */
int ck__mdb_err(int rc);

/* The mesh record part, shared with the catalog. */
void ck__put_mesh(ck__wbuf *w, const ck_mesh *m);
bool ck__get_mesh(ck__rbuf *r, ck_mesh *m);

#endif
