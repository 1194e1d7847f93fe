/* async/saver.h - the async save engine, shared by ckptd and the embedded client
 * (private to the core and ckptd).
 *
 * It collects the parts of checkpoints rank by rank and drives ck_save's rank-by-rank
 * path: the first part of a name begins the save (ck_save_begin with the part's
 * declaration, which the later parts must equal, and prepare);
 * each part whose staging area is filled is written by a worker thread straight from
 * that memory (ck__save_write_rank) and reported durable; when every rank of the world
 * is durable and rank 0 has asked for the commit, a worker commits. One state machine
 * per checkpoint:
 *
 *   COLLECTING --(all durable + commit asked)--> COMMITTING --> gone (COMMITTED)
 *        \------(write error, abandon)--> FAILED (kept so late ranks get the error)
 *
 * Events are delivered through opts.event, from worker threads or from the calling
 * thread, with the saver's lock held: the callback must not call back into the saver.
 * FAILED is delivered only after every write of the save has stopped, so staging
 * areas can be released when it arrives; a part's area can be released at its DURABLE.
 *
 * A save is its name and its job (ck__begin.job): the parts of two jobs that save one
 * name are two saves, whatever order they come in, and never meet; the one that does
 * not get the name's lock (or finds the other's meeting) fails, naming the other job.
 *
 * A save whose ranks are served by several daemons (ck__begin.nodes > 1) is one such
 * machine per daemon, meeting through files (save/meet.h): the daemon that serves
 * rank 0 coordinates (it makes the pending directory, adopts the others' part records
 * and commits); the others find its meeting, write their ranks into its directory
 * and a durable part record per batch of durable ranks, and learn the outcome by
 * polling: COMMITTED when ROOT/NAME is the directory they wrote into, FAILED on a
 * failed.ID record, a coordinator whose heartbeat stopped, or the part timeout.
 */
#ifndef CK_ASYNC_SAVER_H
#define CK_ASYNC_SAVER_H

#include <stdbool.h>

#include "ck/engine.h"
#include "async/proto.h"
#include "format/layout.h"
#include "save/image.h"

typedef enum ck__saver_ev_kind {
    CK_SAVER_DURABLE = 1,
    CK_SAVER_COMMITTED,
    CK_SAVER_FAILED,
    /* With opts.report_stuck: the save failed (code, msg), but some of its writes have
     * not returned dead_after seconds later (storage that hangs). Their staging areas
     * must stay mapped and unused for good; FAILED follows only if they ever return. */
    CK_SAVER_STUCK,
    /* A tiered save's levels are final (after COMMITTED): level is the highest reached
     * (DURABLE, REPLICATED, LOCAL, 0 for none), msg why it is lower than asked. What a drain to
     * the durable tier starts from (docs/decisions/0175-commit-levels.md). */
    CK_SAVER_SETTLED,
    /* A tiered save asked for level durable: every local copy is committed and the
     * replication ended, so the daemon drains it to the durable root now and tells the
     * engine how that ended (ck__saver_drained); COMMITTED waits for it, within the
     * part timeout. Every engine of the save hears it; one drains (decision 0176). */
    CK_SAVER_DRAIN,
} ck__saver_ev_kind;

typedef struct ck__saver_event {
    ck__saver_ev_kind kind;
    const char *name;
    const ck_job_id *job;
    uint64_t rank;          /* DURABLE */
    int code;               /* FAILED: -errno */
    const char *msg;        /* FAILED; COMMITTED: why level is lower than asked, or "" */
    uint8_t level;          /* COMMITTED: the level reached (ck_level) */
    /* SETTLED, DRAIN: the save's engines in the order of the first rank each serves,
     * the first being the one that drains it (decision 0192); none for a save of one. */
    const char (*nodes)[CK_NODE_ID_MAX];
    uint32_t n_nodes;
} ck__saver_event;

typedef struct ck__saver_opts {
    const char *root;
    ck_engine *engine;      /* NULL: the default engine */
    unsigned writers;       /* worker threads; 0: 4 */
    unsigned hash_threads;  /* per save; 0: one per CPU */
    uint32_t io_size;
    uint64_t mem_limit;     /* writer buffers, which bound the I/Os in flight; 0: 64 MiB */
    void (*log)(void *arg, const char *msg);
    void (*event)(void *arg, const ck__saver_event *ev);
    void *arg;
    /* Saves served by several daemons (a join with nodes > 1; docs/FORMAT.md, "Saves
     * served by several daemons"): this daemon's id, NULL to refuse them (the embedded
     * engine). A thread of the saver then beats ROOT/.ckptd.ID.beat (counter advanced
     * with instance, a nonce per start) and polls the meetings every poll_ms. */
    const char *node_id;
    uint64_t instance;
    unsigned part_timeout;  /* seconds a save may wait for parts from other daemons */
    unsigned dead_after;    /* seconds another daemon's heartbeat may stand still */
    unsigned poll_ms;       /* 0: 20 */
    /* Seconds ck__saver_free waits for the saves that can finish; past it (a write that
     * never returns: storage that hangs) it gives up, and leaves the engine, its threads
     * and memory behind rather than wait for good. 0: no limit (ckptd, whose shutdown
     * has its own --drain-timeout). */
    double close_timeout;
    /* Report CK_SAVER_STUCK (the embedded engine; ckptd keeps its own mappings and bounds
     * its clients' waits itself). */
    bool report_stuck;
    /* Tiered saves (docs/FORMAT.md, "Local copies of a save"; ckptd --local-root): the
     * ranks' files are written into local_root (this node's local tier) instead of
     * root, which keeps the meeting; each engine commits its own copy there, then
     * replicate sends it to the other members of its clique (ck__clique, replicas F and
     * jump J; 0: 1), on a worker thread, without the engine's lock: 0 once every peer
     * committed it, or the error naming the peer. NULL local_root: today's saves. */
    const char *local_root;
    uint32_t replicas, jump;
    int (*replicate)(void *arg, const char *name, const char *const *peers, uint32_t n,
                     ck_err *err);
    /* Replication beside the local write (decision 0204). Of a tiered save of several
     * engines whose ranks ask for level replicated or durable, landed tells, by data file name, the bytes of each of this engine's files
     * whose writes have landed, as they grow (on the writers' threads, without the
     * engine's lock). Once the clique is known from the meeting's joins (the engines
     * in the order of the rank each joined with) and this engine serves its share of
     * the ranks (world / nodes of them), replicate_begin (under the lock: it must not
     * block) names the peers and this engine's data files (in rank order, written in
     * dir, its pending directory) so that they can be sent as they land; replicate,
     * at the commit, is called as ever and finishes or replaces what began. Whoever
     * begins keeps what landed before. NULL: replication at the commit only. */
    void (*replicate_begin)(void *arg, const char *name, const char *dir,
                            const char *const *peers, uint32_t n, const ck_file *files,
                            uint32_t nfiles, uint32_t block_size);
    void (*landed)(void *arg, const char *name, const char *file, uint64_t bytes);
} ck__saver_opts;

/* The clique rule (docs/decisions/0174-clique-rule.md): of n nodes ordered by the
 * first rank each serves, node i's clique is the f nodes of its block of f * j
 * consecutive ones whose index has its offset modulo j. The others (f - 1, ascending)
 * go to out; -EINVAL with a message when n is not a multiple of f * j. */
int ck__clique(uint32_t i, uint32_t n, uint32_t f, uint32_t j, uint32_t *out, ck_err *err);

typedef struct ck__saver ck__saver;

int ck__saver_new(const ck__saver_opts *o, ck__saver **out, ck_err *err);
/* Waits for the saves that can finish (every part staged), abandons the others, then
 * frees the engine and returns true; past opts.close_timeout it leaves the engine
 * instead (see there) and returns false: whatever its events reach must stay too. */
bool ck__saver_free(ck__saver *sv);

/* Registers rank b->rank's part: begins the save on the first part of a name and job
 * (with b->decl, sealed here if it is not), checks that later parts declare the same
 * step and the same declaration. *image_bytes: the size of the rank's file image (its
 * staging area holds it, then the blobs). The calls below name a save by its name and
 * job. */
int ck__saver_join(ck__saver *sv, const ck__begin *b, uint64_t *image_bytes, ck_err *err);
/* The rank's staging area is filled: image (image_bytes, 4 KiB aligned) then the blob
 * bytes. It must stay valid until the part's DURABLE or the save's FAILED event. */
int ck__saver_stage(ck__saver *sv, const char *name, const ck_job_id *job, uint64_t rank,
                    const void *staging, ck_err *err);
/* The rank's part given by its sources instead of a staging area (an embedded
 * client's synchronous save): src holds one source per plan shard (nsrc; those the
 * rank writes are read, by the writer's threads, while earlier blocks are written, so
 * the copy overlaps the writes), blobs the part's blob bytes back to back (copied
 * before it returns). The sources must stay readable until the part's DURABLE or the
 * save's FAILED event; fills among them may run on several threads at once. */
int ck__saver_stage_sources(ck__saver *sv, const char *name, const ck_job_id *job,
                            uint64_t rank, const ck__shard_src *src, uint32_t nsrc,
                            const void *blobs, ck_err *err);
/* The drain of name, asked by CK_SAVER_DRAIN, ended: code 0 once the durable root
 * holds the checkpoint, else -errno and msg (naming what failed). The engines of the
 * save hear it through the meeting; a save no longer waiting is not an error. */
void ck__saver_drained(ck__saver *sv, const char *name, int code, const char *msg);
/* Rank 0's request: commit as soon as every part is durable. */
int ck__saver_commit(ck__saver *sv, const char *name, const ck_job_id *job, ck_err *err);
/* Gives up a save that cannot complete (its ranks went away); why goes to FAILED. */
void ck__saver_abandon(ck__saver *sv, const char *name, const ck_job_id *job,
                       const char *why);
/* Gives up every save that still waits for a part or for the commit request (a
 * shutdown's drain timeout); returns how many. Saves that can finish go on. */
unsigned ck__saver_abandon_waiting(ck__saver *sv, const char *why);
/* Forgets a failed save, so that a BEGIN of its name starts a new one: for when no
 * late rank of the failed attempt can come any more (ckptd: none of its clients is
 * still connected). A save of that name that is not a reported failure is left alone. */
void ck__saver_forget(ck__saver *sv, const char *name, const ck_job_id *job);
/* Whether every part of the save is staged and its commit was asked for: from then
 * on it completes without any client. */
bool ck__saver_committable(ck__saver *sv, const char *name, const ck_job_id *job);
/* Saves not finished yet (collecting or committing). */
unsigned ck__saver_active(ck__saver *sv);

/* One row per save in flight (malloc'd). */
int ck__saver_status(ck__saver *sv, ck__proto_ckpt **out, uint32_t *n);

#endif
