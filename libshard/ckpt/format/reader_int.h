/* format/reader_int.h - the reader's internals, shared with ops/verify.c (private to the core). */
#ifndef CK_FORMAT_READER_INT_H
#define CK_FORMAT_READER_INT_H

#include <limits.h>

#include "format/manifest.h"

struct ck_ckpt {
    char dir[PATH_MAX];
    char mpath[PATH_MAX];        /* the manifest, for messages */
    int dirfd;                   /* the directory: data files are opened beneath it */
    int mem;                     /* the manifest's private copy, which LMDB maps */
    MDB_env *env;
    MDB_txn *txn;                /* one read transaction for the handle's lifetime */
    MDB_dbi db_tensors, db_shards, db_files, db_hashes, db_blobs;
    ck_info info;
    ck_file *files;
    ck_copy copy;                /* complete, or a partial copy (format/copy.h) */
    uint8_t *held;               /* a partial copy's flag per data file; NULL: complete */
    ck_engine *engine;
    int *fds;                    /* data files, buffered, opened on first read */
    int *dfds;                   /* the same with O_DIRECT */
    /* The loads' (load/rlist.c): whether they check block hashes, and their cache of
     * checked blocks and hash pool, made on first need; vs_free is NULL when vs is
     * lent by a ck_readers. */
    bool no_verify;
    struct ck__vstate *vs;
    void (*vs_free)(struct ck__vstate *vs);
    /* Opened through several copies (ck_open_copies, format/copies.c; the helpers in
     * format/copy.c): copies[0] is
     * dirfd's, and data file i is read beneath copies[from[i]], the first that holds
     * it (CK__NOWHERE: none; held[] is then the union). NULL for one directory. */
    struct ck__copy_dir *copies;
    uint32_t n_copies;
    uint32_t *from;
};

#define CK__NOWHERE UINT32_MAX

typedef struct ck__copy_dir {
    int fd;                      /* copies[0].fd is the handle's dirfd, closed as such */
    char dir[PATH_MAX];
} ck__copy_dir;

/* The directory data file id is read beneath (its copy's, or the handle's), and its
 * name for messages. */
int ck__file_dirfd(const ck_ckpt *ck, uint32_t id);
const char *ck__file_dir(const ck_ckpt *ck, uint32_t id);
/* The held flags and the copy record of a handle opened through copies: the union. */
void ck__copies_unite(ck_ckpt *ck);
/* ck__open_dup's part for a handle opened through copies: dst, a new handle on src's
 * first copy, gets descriptors of its own of the other copies. */
int ck__copies_dup(const ck_ckpt *src, ck_ckpt *dst, ck_err *err);
void ck__copies_free(ck_ckpt *ck);
/* -ENODATA: no copy of the handle holds data file id; the message names the file and
 * the copies. */
int ck__copies_lack(const ck_ckpt *ck, uint32_t id, ck_err *err);

/* Decodes the tensor record (k, v), checking it against the checkpoint's mesh. */
int ck__decode_tensor(ck_ckpt *ck, const MDB_val *k, const MDB_val *v, ck_tensor *t,
                      ck_err *err);
/* Decodes shard idx of tensor t from v into s; s->ext must have room for every extent
 * the value can hold (v->mv_size / 20). Checks it against the tensor, the mesh and the
 * recorded data file sizes. */
int ck__decode_shard(ck_ckpt *ck, const ck_tensor *t, uint32_t idx, const MDB_val *v,
                     ck_shard *s, ck_err *err);

/* ck_name_check for a name that exists already: up to CK_NAME_MAX - 1 bytes, the
 * limit of earlier releases, so that a checkpoint saved under a longer name than a
 * save now allows still opens. */
int ck__name_check_read(const char *what, const char *name, ck_err *err);

/* Another handle on ck's checkpoint: the same directory and manifest copy, never looked
 * up by name again (ck_readers_open_ckpt). */
int ck__open_dup(const ck_ckpt *ck, ck_ckpt **out, ck_err *err);

/* A descriptor of data file id: O_DIRECT (direct) or buffered, opened once and kept.
 * Returns NO_DIRECT when direct I/O was asked for and the file system refuses it. */
#define NO_DIRECT INT_MIN
int ck__data_fd(ck_ckpt *ck, uint32_t id, bool direct, ck_err *err);

#endif
