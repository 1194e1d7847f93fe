/* sh/checkpoint.h - asynchronous, collective checkpoints of sharded state dicts.
 *
 * What PyTorch's dcp.async_save and dcp.load give an FSDP job:
 *
 *   sh_checkpoint *c;
 *   sh_checkpoint_new(world, &(sh_checkpoint_opts){ .root = "/ckpt", .optim = opt },
 *                     &c, &err);
 *   const sh_state_dict *sd[] = { &model_sd, &optim_sd };
 *   sh_checkpoint_reserve(c, sd, 2, blobs, nblobs, &err);  // staging made now, once
 *   after an optimizer step:
 *       sh_checkpoint_save_lazy(c, "step-00001200", 1200, sd, 2, blobs, nblobs,
 *                               &stall, &err);
 *   each step:  forward, backward; sh_adamw_step fences the save (its first act);
 *               sh_checkpoint_progress(c, &err);            // every rank
 *               while (sh_checkpoint_poll(c, &done, &err) == 1) ...   // rank 0 learns
 *   sh_checkpoint_wait(c, &err);                            // before exiting
 *
 * What stalls training, and when:
 *   save_async  the copy of this rank's shards out of the training buffers (into
 *               staging faulted in ahead, see sh_checkpoint_reserve); nothing else;
 *   save_lazy   nothing but the save's setup: a thread copies while the next forward
 *               and backward run (they only read parameters and moments). The
 *               optimizer's next step waits at the fence for what is not copied yet;
 *               sh_checkpoint_fence_ms says how long.
 * Neither holds a collective: the ranks agree that every part was handed over at a
 * later sh_checkpoint_progress (one all-reduce at a step boundary), and only then is
 * the commit asked for (ckptd) or the hashes gathered (embedded). The checkpoint is
 * then written, hashed, fsynced and committed while training goes on. One save is in
 * flight at a time: the next one waits for it.
 *
 * One path, two places for its engine. With ckptd (opts.daemon, or $CKPTD_SOCKET) every
 * rank stages its part into the daemon's shared memory, and a save whose parts were all
 * staged and agreed on commits even if every rank dies right after. Embedded (the
 * default) each rank's process runs the same engine on threads of its own, and the
 * world's engines meet through the root's file system as the daemons of several nodes
 * do: rank 0's engine coordinates and commits once every rank's file is durable
 * (docs/FORMAT.md, "Saves served by several daemons"). Either way a save whose parts
 * do not all arrive within opts.part_timeout_s (embedded; ckptd's --part-timeout
 * through it), or one of whose engines dies, fails with a message naming the missing
 * ranks and the engines that joined (their ids name their hosts), which rank 0 reports
 * through poll; training goes on, and the next save is a new one. A run that dies loses
 * the save in flight; committed ones stay intact.
 *
 * Every call here is collective over the world except reserve, fence, fence_ms, poll,
 * free and load_state_dict.
 */
#ifndef SH_CHECKPOINT_H
#define SH_CHECKPOINT_H

#include <stdbool.h>
#include <stdint.h>

#include "ck/ckpt.h"
#include "ck/client.h"
#include "sh/optim.h"
#include "sh/state_dict.h"
#include "sh/world.h"

typedef struct sh_checkpoint sh_checkpoint;

typedef struct sh_checkpoint_opts {
    const char *root;          /* created by rank 0 if missing */
    const char *daemon;        /* ckptd's socket; NULL: $CKPTD_SOCKET, else embedded */
    /* The optimizer whose step writes what the saves hold: its step fences a lazy save
     * (sh_adamw_set_fence), so that it cannot run before the copy is done. Lazy saves
     * need it. */
    sh_adamw *optim;
    /* Embedded: seconds from a save's start by which every rank's part must have
     * reached rank 0's engine (timed by that engine). 0: 1800. */
    double part_timeout_s;
    /* The commit level each save waits for (ck/client.h, ck_level; ckptd with
     * --local-root): 0 the daemon's default. */
    ck_level level;
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
    char msg[CK_ERR_MSG_MAX];  /* committed: why level is lower than asked, or "" */
    ck_level level;            /* committed: the level it reached */
    uint64_t bytes;            /* tensor bytes handed over by all ranks */
    double seconds;            /* from save_async to the commit */
} sh_checkpoint_done;

int sh_checkpoint_new(sh_world *w, const sh_checkpoint_opts *o, sh_checkpoint **out,
                      ck_err *err);
/* Lets the save in flight go without a collective (call sh_checkpoint_wait first to
 * keep it; what a let-go save wrote stays .pending debris), unsets the optimizer's
 * fence, then frees c. */
void sh_checkpoint_free(sh_checkpoint *c);

/* Makes this rank's staging for saves of these state dicts and blobs now, every page
 * faulted in (huge pages where the system gives them), so that no save pays for a
 * first touch. Not collective; call it at start-up, before the first save. */
int sh_checkpoint_reserve(sh_checkpoint *c, const sh_state_dict *const *sd, int nsd,
                          const sh_blob *blobs, int nblobs, ck_err *err);

/* Saves checkpoint name: every entry of the nsd state dicts (all on one mesh) and the
 * blobs (rank 0's are saved). *stall_ms: how long this call blocked training. Returns
 * an error only for a call that is wrong on every rank; a rank that cannot hand its
 * part over fails the save, which every rank learns at a later progress and rank 0
 * reports through poll. */
int sh_checkpoint_save_async(sh_checkpoint *c, const char *name, uint64_t step,
                             const sh_state_dict *const *sd, int nsd, const sh_blob *blobs,
                             int nblobs, double *stall_ms, ck_err *err);
/* The same, but the shards are copied on a thread while training goes on; they must
 * not change until the fence, which opts.optim's step runs first (-EINVAL without
 * opts.optim). */
int sh_checkpoint_save_lazy(sh_checkpoint *c, const char *name, uint64_t step,
                            const sh_state_dict *const *sd, int nsd, const sh_blob *blobs,
                            int nblobs, double *stall_ms, ck_err *err);
/* Waits until the save in flight no longer reads this rank's shards. 0, or this rank's
 * error of the save in flight (then the save fails on every rank, as above). The
 * optimizer's step calls it and steps either way. Not collective. */
int sh_checkpoint_fence(sh_checkpoint *c, ck_err *err);
/* How long the last fence of a lazy save waited, in ms (0 when it did not wait). */
double sh_checkpoint_fence_ms(const sh_checkpoint *c);
/* Moves the save in flight on; call it once per step on every rank. */
int sh_checkpoint_progress(sh_checkpoint *c, ck_err *err);
/* Rank 0: 1 and *done for a save that finished since the last call, 0 when none did
 * (never blocks). Other ranks: always 0. */
int sh_checkpoint_poll(sh_checkpoint *c, sh_checkpoint_done *done, ck_err *err);
/* Blocks until the save in flight has finished (poll then reports it). */
int sh_checkpoint_wait(sh_checkpoint *c, ck_err *err);

/* The run's newest committed checkpoint under root: of the names PREFIX<digits>, the
 * highest number (ck_root_newest; other names, a "best-model" or a reshard's
 * "step-100-2x8", are never picked). Rank 0 looks, so that a save committing
 * meanwhile cannot split the ranks, and every rank gets its name (or its error).
 * -ENOENT when there is none. */
int sh_checkpoint_latest(sh_world *w, const char *root, const char *prefix,
                         char name[CK_NAME_MAX], ck_err *err);
/* The run's newest checkpoint that can be restored, opened for loading this rank's
 * entries of sd[0, nsd): through ckptd (daemon, else $CKPTD_SOCKET), rank 0 asks it
 * which (ck_client_resolve: a checkpoint whose every data file has a live copy in the
 * tiers; why the newest saved is not, printed as "restore: ..."), and each rank opens
 * the copies nearest its node, the data files its entries' boxes touch fetched there
 * first (ck_client_restore_open, ck_client_restore_fetch). Without a daemon,
 * sh_checkpoint_latest and ROOT/NAME. Every rank gets the name (or rank 0's error);
 * -ENOENT when there is none. Collective. */
int sh_checkpoint_restore(sh_world *w, const char *root, const char *daemon, const char *prefix,
                          const sh_state_dict *const *sd, int nsd, char name[CK_NAME_MAX],
                          ck_ckpt **out, ck_err *err);
/* Reads every entry's box (this rank's shard on the current mesh) of the tensor of
 * the same name from ck, whatever mesh ck was saved on, converted into the entry's
 * dtype when the checkpoint holds another, every block's hash checked (ck/load.h).
 * Not collective. */
int sh_checkpoint_load_state_dict(ck_ckpt *ck, const sh_state_dict *sd, ck_err *err);

#endif
