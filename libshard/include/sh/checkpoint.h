/* sh/checkpoint.h - asynchronous, collective checkpoints of sharded state dicts.
 *
 * What PyTorch's dcp.async_save and dcp.load give an FSDP job:
 *
 *   sh_checkpoint *c;
 *   sh_checkpoint_new(world, &(sh_checkpoint_opts){ .root = "/ckpt" }, &c, &err);
 *   const sh_state_dict *sd[] = { &model_sd, &optim_sd };
 *   sh_checkpoint_save_async(c, "step-00001200", 1200, sd, 2, blobs, nblobs, &stall, &err);
 *   each step:  sh_checkpoint_progress(c, &err);           // every rank
 *               while (sh_checkpoint_poll(c, &done, &err) == 1) ...   // rank 0 learns
 *   sh_checkpoint_wait(c, &err);                            // before exiting
 *
 * save_async returns once this rank's shards are copied out of the training buffers
 * (the stall); the checkpoint is then written, hashed, fsynced and committed while
 * training goes on. One save is in flight at a time: the next one waits for it.
 *
 * Two engines. With ckptd (opts.daemon, or $CKPTD_SOCKET) every rank stages its part
 * into the daemon's shared memory through the core's client (ck/client.h), and a save
 * whose parts were all staged commits even if every rank dies right after. Embedded
 * (the default) every rank copies its shards into its data file's image and a thread
 * of its own writes it into the save's shared pending directory; at a later
 * sh_checkpoint_progress, once every rank's file is durable, the block hashes go to
 * rank 0 (ck_save_finish_group over this world's collectives) and a thread on rank 0
 * commits. A run that dies loses the save in flight; committed ones stay intact.
 *
 * Every call here is collective over the world except poll, free and
 * load_state_dict.
 */
#ifndef SH_CHECKPOINT_H
#define SH_CHECKPOINT_H

#include <stdint.h>

#include "ck/ckpt.h"
#include "sh/state_dict.h"
#include "sh/world.h"

typedef struct sh_checkpoint sh_checkpoint;

typedef struct sh_checkpoint_opts {
    const char *root;          /* created by rank 0 if missing */
    const char *daemon;        /* ckptd's socket; NULL: $CKPTD_SOCKET, else embedded */
} sh_checkpoint_opts;

/* A named byte string saved beside the tensors (step, data position, RNG state). */
typedef struct sh_blob {
    const char *name;
    const void *data;
    size_t len;
} sh_blob;

/* A finished save, as rank 0 sees it. */
typedef struct sh_checkpoint_done {
    char name[CK_NAME_MAX];
    int rc;                    /* 0: committed; else the error, in msg */
    char msg[CK_ERR_MSG_MAX];
    uint64_t bytes;            /* tensor bytes handed over by all ranks */
    double seconds;            /* from save_async to the commit */
} sh_checkpoint_done;

int sh_checkpoint_new(sh_world *w, const sh_checkpoint_opts *o, sh_checkpoint **out,
                      ck_err *err);
/* Waits for the save in flight (connected), or lets it go (embedded: frees cannot be
 * collective, so what it wrote stays .pending debris), then frees c. */
void sh_checkpoint_free(sh_checkpoint *c);

/* Saves checkpoint name: every entry of the nsd state dicts (all on one mesh) and the
 * blobs (rank 0's are saved). *stall_ms: how long this call blocked training. Fails on
 * every rank when any rank could not hand its part over. */
int sh_checkpoint_save_async(sh_checkpoint *c, const char *name, uint64_t step,
                             const sh_state_dict *const *sd, int nsd, const sh_blob *blobs,
                             int nblobs, double *stall_ms, ck_err *err);
/* Moves the save in flight on; call it once per step on every rank. */
int sh_checkpoint_progress(sh_checkpoint *c, ck_err *err);
/* Rank 0: 1 and *done for a save that finished since the last call, 0 when none did
 * (never blocks). Other ranks: always 0. */
int sh_checkpoint_poll(sh_checkpoint *c, sh_checkpoint_done *done, ck_err *err);
/* Blocks until the save in flight has finished (poll then reports it). */
int sh_checkpoint_wait(sh_checkpoint *c, ck_err *err);

/* The committed checkpoint under root with the highest step: rank 0 looks, so that a
 * save committing meanwhile cannot split the ranks, and every rank gets its name.
 * -ENOENT when there is none. */
int sh_checkpoint_latest(sh_world *w, const char *root, char name[CK_NAME_MAX], ck_err *err);
/* Reads every entry's box (this rank's shard on the current mesh) of the tensor of
 * the same name from ck, whatever mesh ck was saved on. Not collective. */
int sh_checkpoint_load_state_dict(ck_ckpt *ck, const sh_state_dict *sd, ck_err *err);

#endif
