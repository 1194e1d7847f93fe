/* ck/ckpt.h - the checkpoint model and the read side of the core.
 *
 * A checkpoint (docs/FORMAT.md) is a directory ROOT/NAME holding one immutable LMDB
 * manifest and the data files its shards point into. ck_open() reads the manifest
 * read-only, validating every record it decodes: a record that is short, carries an
 * unknown major version, or points outside its file is reported as -EBADMSG (or
 * -EPROTONOSUPPORT for a version) with a message naming the record, never trusted.
 *
 * A ck_ckpt is used by one thread at a time.
 */
#ifndef CK_CKPT_H
#define CK_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ck/error.h"
#include "ck/layout.h"
#include "ck/types.h"

#define CK_FORMAT_MAJOR 1
#define CK_FORMAT_MINOR 1
#define CK_MAGIC "LIBSHARD"          /* 8 bytes, first field of the checkpoint record */

#define CK_NAME_MAX    256            /* checkpoint, tensor and blob names, with the NUL */
/* The longest checkpoint name a save takes, in bytes: the longest file name the core
 * makes of it, .pending/NAME.TOKEN-meet (a token of up to 15 bytes), must fit the
 * 255 bytes of a file name (docs/FORMAT.md, "Names"). */
#define CK_CKPT_NAME_LEN 234
#define CK_FILE_NAME_MAX 64
#define CK_HASH_LEN    32             /* SHA-256 */
#define CK_BLOB_MAX    (64u << 20)    /* a blob is metadata, not a tensor */
#define CK_COPY_ID_MAX 64             /* a daemon id, with its NUL */

typedef struct ck_info {
    char name[CK_NAME_MAX];
    uint16_t major, minor;           /* format version of the manifest */
    uint64_t step;
    uint64_t time_ns;                /* commit time, CLOCK_REALTIME */
    ck_mesh mesh;
    uint32_t block_size;             /* hash block of the data files */
    bool hashed;                     /* false: saved with --no-hash */
    uint64_t n_tensors, n_shards;
    uint32_t n_files, n_blobs;
    uint64_t data_bytes;             /* sum of data file sizes */
    uint64_t tensor_bytes;           /* sum of the tensors' full sizes */
} ck_info;

/* A tensor is stored either by placements over the checkpoint's mesh (its shards are
 * what the placements give, one per distinct box) or, since format 1.1, as an
 * explicit list of boxes that tile it, shard i being box i, written by the rank its
 * coordinate names; pl[] then holds CK_BOXES on every mesh dim (ck_tensor_is_boxes). */
typedef struct ck_tensor {
    char name[CK_NAME_MAX];
    uint32_t id;                     /* key of its shards */
    ck_dtype dtype;
    int ndim;
    uint64_t shape[CK_MAX_NDIM];
    ck_placement pl[CK_MAX_MESH_DIMS];
    uint32_t n_shards;
} ck_tensor;

static inline bool ck_tensor_is_boxes(const ck_tensor *t)
{
    return t->pl[0].kind == CK_BOXES;
}

typedef struct ck_extent {
    uint32_t file;
    uint64_t off;                    /* byte offset in the file, CK_ALIGN-aligned */
    uint64_t len;                    /* bytes */
} ck_extent;

typedef struct ck_shard {
    uint32_t tensor;                 /* ck_tensor.id */
    uint32_t idx;
    uint32_t coord[CK_MAX_MESH_DIMS];/* the mesh coordinate of the rank that wrote it */
    ck_box box;                      /* the part of the tensor, row-major in extents */
    uint32_t n_extents;
    ck_extent *ext;                  /* the shard's bytes, in order */
} ck_shard;

typedef struct ck_file {
    char name[CK_FILE_NAME_MAX];     /* relative to the checkpoint directory */
    uint64_t size;
    uint32_t rank;                   /* the rank that wrote it */
} ck_file;

typedef struct ck_ckpt ck_ckpt;

/* What a checkpoint directory holds of its checkpoint (docs/FORMAT.md, "Copies"). A
 * complete copy holds every data file: every checkpoint a save commits. A partial copy
 * (a node's own part in its local tier, a peer's replica of it) holds the whole
 * manifest and only some data files, and says which in NAME/copy; reading a shard from
 * a file it does not hold fails with -ENODATA, naming the file. */
typedef struct ck_copy {
    bool partial;
    char source[CK_COPY_ID_MAX];     /* partial: the daemon whose data it holds */
    uint32_t files_held;             /* data files present (n_files when complete) */
} ck_copy;

/* Checks that name can be the name of a checkpoint to save: 1 to CK_CKPT_NAME_LEN
 * bytes of [A-Za-z0-9._-], not starting with '.'. Never a path. (Tensor and blob names
 * go through ck_key_check.) */
CK_API int ck_name_check(const char *what, const char *name, ck_err *err);

/* Tensor and blob names (format 1.1) may also hold percent escapes, '%' and two
 * uppercase hex digits, so that any key of a state dict can be stored reversibly:
 * ck_key_encode escapes every byte outside [A-Za-z0-9._-] (and a leading '.'),
 * ck_key_decode undoes it. Checkpoint names stay plain. ck_key_check is ck_name_check
 * for tensor and blob names: it also refuses a malformed escape ("%4", "%zz", "%2f"). */
CK_API int ck_key_check(const char *what, const char *name, ck_err *err);
/* Writes the escaped key into out (len bytes): 0, or -ENAMETOOLONG when it does not
 * fit in len or in CK_NAME_MAX - 1 bytes, or -EINVAL for an empty key. */
CK_API int ck_key_encode(const char *raw, size_t raw_len, char *out, size_t len);
/* Writes the key with its escapes undone into out (at most strlen(name) + 1 bytes,
 * NUL-terminated; a decoded key may itself hold a NUL byte, so *out_len is its
 * length). -EINVAL for a malformed escape. */
CK_API int ck_key_decode(const char *name, char *out, size_t len, size_t *out_len);

/* Opens ROOT/NAME. -ENOENT when there is no such checkpoint. */
CK_API int ck_open(const char *root, const char *name, ck_ckpt **out, ck_err *err);
/* Opens the checkpoint in directory dir (committed or under .pending). */
CK_API int ck_open_dir(const char *dir, ck_ckpt **out, ck_err *err);
/* Opens one checkpoint through several copies of it (docs/FORMAT.md, "Copies"): dirs
 * are checkpoint directories, nearest first (a node's own copy, the replicas and
 * fetched copies in its local tier, the durable tier's complete copy). The manifest
 * is dirs[0]'s; every other must be a copy of the same checkpoint (the same name,
 * step and commit time, the same data files and sizes, every block hash the same),
 * else -EBADMSG naming both directories and what differs. Each data file is read
 * beneath the first copy that holds it (ck_file_path says which); a read that needs
 * a file no copy holds fails with -ENODATA naming the file and the copies. Loads and
 * their hash checks (ck/load.h) work on it as on any checkpoint; ck_file_held and
 * ck_get_copy describe the union. At most CK_COPIES_MAX copies; one is ck_open_dir. */
#define CK_COPIES_MAX 64
CK_API int ck_open_copies(const char *const *dirs, size_t n, ck_ckpt **out, ck_err *err);
CK_API void ck_close(ck_ckpt *ck);

CK_API const ck_info *ck_get_info(const ck_ckpt *ck);
CK_API const char *ck_dir(const ck_ckpt *ck);
CK_API const ck_copy *ck_get_copy(const ck_ckpt *ck);
/* Whether this copy holds data file id (always, in a complete copy). */
CK_API bool ck_file_held(const ck_ckpt *ck, uint32_t id);

/* Calls fn for each tensor in name order; a non-zero return from fn stops the walk
 * and is returned. */
CK_API int ck_tensors_each(ck_ckpt *ck, int (*fn)(const ck_tensor *t, void *arg), void *arg,
                           ck_err *err);
CK_API int ck_tensor_get(ck_ckpt *ck, const char *name, ck_tensor *out, ck_err *err);

/* The shards of a tensor, in index order, in one allocation: free with free(). */
CK_API int ck_shards_get(ck_ckpt *ck, const ck_tensor *t, ck_shard **out, uint32_t *n,
                         ck_err *err);

CK_API const ck_file *ck_file_get(const ck_ckpt *ck, uint32_t id);
/* Path of a data file: the directory of the copy that holds it, then its name. */
CK_API int ck_file_path(const ck_ckpt *ck, uint32_t id, char *buf, size_t len);
/* The recorded SHA-256 of a block of a data file. -ENOENT when unhashed. */
CK_API int ck_hash_get(ck_ckpt *ck, uint32_t file, uint64_t block, uint8_t out[CK_HASH_LEN],
                       ck_err *err);

/* Calls fn for each blob in name order. data is valid during the call. */
CK_API int ck_blobs_each(ck_ckpt *ck, int (*fn)(const char *name, const void *data, size_t len,
                                         void *arg), void *arg, ck_err *err);
/* A copy of a blob's bytes (malloc'd). */
CK_API int ck_blob_get(ck_ckpt *ck, const char *name, void **data, size_t *len, ck_err *err);

#endif
