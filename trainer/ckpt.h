/* ckpt.h - the trainer's checkpoints: asynchronous saves of the sharded state, and
 * what a resume needs to find and read them.
 *
 * A save is collective. Each rank hands over its shards of the state dicts (model,
 * AdamW moments) and the blobs; tr_ckpt_save_async returns once they are copied out
 * of the training buffers, and the checkpoint is written, hashed, fsynced and
 * committed while training goes on. Rank 0 learns of finished saves through
 * tr_ckpt_poll. With keep_last, rank 0 removes the oldest of this trainer's committed
 * checkpoints ("step-*") beyond that count after each commit.
 *
 * Saves go through the checkpoint client (ck/client.h). With ckptd (--daemon SOCKET,
 * or CKPTD_SOCKET set) every rank stages its own part into the daemon's shared memory,
 * and a save whose parts are all staged commits even if the trainer dies. Embedded
 * (the default), every rank writes its own data file on a thread of its own (the
 * stall is the copy of its shards into the file's image), and at a later step
 * boundary the ranks send their files' block hashes to rank 0, whose thread commits.
 * One save is in flight at a time; the next one waits for it.
 */
#ifndef TR_CKPT_H
#define TR_CKPT_H

#include <stdint.h>

#include "ck/ckpt.h"
#include "sh/sh.h"

typedef struct tr_blob {
    const char *name;
    const void *data;
    size_t len;
} tr_blob;

typedef struct tr_ckpt_opts {
    const char *root;
    const char *daemon;        /* ckptd's socket; NULL: $CKPTD_SOCKET, else embedded */
    int keep_last;             /* 0: keep every checkpoint */
} tr_ckpt_opts;

/* A finished save, as rank 0 sees it. */
typedef struct tr_ckpt_done {
    char name[CK_NAME_MAX];
    int rc;                    /* 0: committed; else the error, in msg */
    char msg[CK_ERR_MSG_MAX];
    uint64_t bytes;            /* tensor bytes handed over by all ranks */
    double seconds;            /* from save_async to the commit */
} tr_ckpt_done;

typedef struct tr_ckpt tr_ckpt;

int tr_ckpt_new(sh_world *w, const tr_ckpt_opts *o, tr_ckpt **out, ck_err *err);
/* Waits for the saves in flight, then frees c. */
void tr_ckpt_free(tr_ckpt *c);

/* Collective. Saves "step-%08llu": every entry of the nsd state dicts (all of one
 * mesh, f32) and the blobs (rank 0's are saved). *stall_ms: how long this call
 * blocked training. */
int tr_ckpt_save_async(tr_ckpt *c, uint64_t step, const sh_state_dict *const *sd, int nsd,
                       const tr_blob *blobs, int nblobs, double *stall_ms, ck_err *err);
/* Collective: moves the save in flight on (embedded saves exchange their parts' hashes
 * and commit here). Call it once per step on every rank. */
int tr_ckpt_progress(tr_ckpt *c, ck_err *err);
/* Rank 0: 1 and *done for a save that finished since the last call, 0 when none did
 * (never blocks). Other ranks: always 0. */
int tr_ckpt_poll(tr_ckpt *c, tr_ckpt_done *done, ck_err *err);
/* Blocks until the saves in flight have finished (poll then reports them). */
int tr_ckpt_wait(tr_ckpt *c, ck_err *err);

/* Collective: the committed checkpoint under root with the highest step (rank 0
 * looks, every rank gets its name). -ENOENT when there is none. */
int tr_ckpt_latest(sh_world *w, const char *root, char name[CK_NAME_MAX], ck_err *err);
/* Reads every entry's box (this rank's shard on the current mesh) of the tensor of
 * the same name from ck, whatever mesh ck was saved on. */
int tr_ckpt_load_state_dict(ck_ckpt *ck, const sh_state_dict *sd, ck_err *err);

/* Reads every entry's box from the safetensors file at path (full tensors, as
 * ckpt-consolidate writes them): a dim-0 box is one byte range of the tensor. */
int tr_load_safetensors(const char *path, const sh_state_dict *sd, ck_err *err);

#endif
