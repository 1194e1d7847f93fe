/* ckpt_int.h - the reader's internals, shared with verify.c (private to the core). */
#ifndef CK_CKPT_INT_H
#define CK_CKPT_INT_H

#include <limits.h>

#include "manifest.h"

struct ck_ckpt {
    char dir[PATH_MAX];
    char mpath[PATH_MAX];        /* the manifest, for messages */
    MDB_env *env;
    MDB_txn *txn;                /* one read transaction for the handle's lifetime */
    MDB_dbi db_tensors, db_shards, db_files, db_hashes, db_blobs;
    ck_info info;
    ck_file *files;
    ck_engine *engine;
    int *fds;                    /* data files, buffered, opened on first read */
    int *dfds;                   /* the same with O_DIRECT */
};

/* Decodes the tensor record (k, v), checking it against the checkpoint's mesh. */
int ck__decode_tensor(ck_ckpt *ck, const MDB_val *k, const MDB_val *v, ck_tensor *t,
                      ck_err *err);
/* Decodes shard idx of tensor t from v into s; s->ext must have room for every extent
 * the value can hold (v->mv_size / 20). Checks it against the tensor, the mesh and the
 * recorded data file sizes. */
int ck__decode_shard(ck_ckpt *ck, const ck_tensor *t, uint32_t idx, const MDB_val *v,
                     ck_shard *s, ck_err *err);

/* A descriptor of data file id: O_DIRECT (direct) or buffered, opened once and kept.
 * Returns NO_DIRECT when direct I/O was asked for and the file system refuses it. */
#define NO_DIRECT INT_MIN
int ck__data_fd(ck_ckpt *ck, uint32_t id, bool direct, ck_err *err);

/* A read list: file ranges added in order, coalesced when they continue each other
 * in the file and in memory, read through one io_uring (load.c). */
typedef struct ck_rlist ck_rlist;
int ck__rlist_open(ck_ckpt *ck, ck_rlist **out, ck_err *err);
void ck__rlist_close(ck_rlist *rl);
int ck__rlist_add(ck_rlist *rl, uint32_t file, uint64_t off, uint64_t len, void *dst,
                  ck_err *err);
/* Adds bytes [off, off+len) of shard s, through its extents. */
int ck__rlist_shard(ck_rlist *rl, const ck_shard *s, uint64_t off, uint64_t len, uint8_t *dst,
                    ck_err *err);
/* Issues what is pending and waits for every read. */
int ck__rlist_flush(ck_rlist *rl, ck_err *err);

#endif
