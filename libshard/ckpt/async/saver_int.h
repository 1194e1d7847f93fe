/* async/saver_int.h - the save engine's own state, shared by its four files (private
 * to async/):
 *
 *   saver.c        the engine: its threads and jobs, and the calls of async/saver.h
 *   saver_state.c  one save's state machine: its failure, its jobs, its events and
 *                  log lines
 *   saver_meet.c   the roles of the engines that share a save (sv_role: coordinator,
 *                  member, and the finder that looks for its meeting), and the
 *                  meeting thread's rounds (joins, part records, heartbeats, timeouts;
 *                  save/meet.h's files)
 *   saver_tier.c   tiered saves: each engine's copy in its local tier, the manifest
 *                  handed round, the replication, the commit levels (SETTLING)
 *
 * The calls point one way: saver.c uses all the others, saver_meet.c uses saver_tier.c
 * and saver_state.c, saver_tier.c uses saver_state.c, and saver_state.c none (it
 * reaches a save's role through its table). Everything
 * here is used with the engine's lock held unless a function says otherwise.
 */
#ifndef CK_ASYNC_SAVER_INT_H
#define CK_ASYNC_SAVER_INT_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "async/saver.h"
#include "ck/save.h"
#include "save/meet.h"
#include "save/save_int.h"

/* A failed save's name is remembered so that ranks arriving after the failure get
 * the error instead of starting a save that can never complete; the oldest go first,
 * and go sooner when the ranks they remember (a part record each) add up. */
#define FAILED_KEPT 64
#define FAILED_KEPT_RANKS (1u << 21)

/* P_REMOTE: written by another daemon, its part record adopted (the coordinator). */
enum { P_NONE, P_JOINED, P_STAGED, P_DURABLE, P_REMOTE };
/* PLANNING: the first rank's join computes the plan without the saver's lock, so
 * that a large plan stalls neither the writers nor STATUS; joins of that name wait. */
/* SETTLING: a tiered save whose copy here is committed, waiting for the levels (the
 * other engines' copies, the replicas) within its deadline (saver_tier.c). */
enum { C_COLLECTING, C_COMMITTING, C_FAILED, C_PLANNING, C_SETTLING };

typedef struct part {
    uint8_t state;
    uint32_t nblobs;
    ck__begin_blob *blobs;
    uint64_t image_bytes;
    /* Shared saves, not coordinating: */
    /* Staged before the meeting was found (deferred): the image, or the sources. */
    const void *staging;
    const ck__shard_src *src;
    uint32_t nsrc;
    bool deferred;
    uint8_t *blob_bytes;           /* a copy: the coordinator's manifest holds blobs */
    void *rec;                     /* the part record, once durable, until recorded */
    size_t rec_len;
} part;

/* Another daemon of a shared save, watched through its heartbeat. */
typedef struct peer {
    char id[CK_NODE_ID_MAX];
    uint64_t instance, counter;
    uint64_t rank;                 /* the first rank it serves, from its join; or none */
    uint64_t least;                /* the least rank it serves, from its share record (the
                                    * coordinator's: 0); or none */
    uint64_t first;                /* coordinator: the least rank of its part records */
    double changed;                /* CLOCK_MONOTONIC, this host's: when it last beat */
    const char *dead;              /* settling: why it is taken for dead (sticky), or NULL */
    uint8_t seen;                  /* settling: the records of it read this round (SEEN_*) */
} peer;

/* A settling save's records of one engine (saver_tier.c). */
enum { SEEN_COPY = 1, SEEN_REPL = 2, SEEN_SETTLED = 4 };

/* A failed meeting the coordinator removes once the others had time to read why. */
typedef struct grave {
    struct grave *next;
    char dir[PATH_MAX];
    double when;
} grave;

typedef struct sv_ckpt sv_ckpt;

/* What an engine does for a save where the engines that share it differ: saver.c and
 * saver_state.c call a save's role through its table and never ask which it is. Three
 * roles (saver_meet.c): the coordinator, which serves rank 0, owns the save's lock and
 * directory, adopts the others' part records and commits; a member, which writes its
 * ranks into the coordinator's directory and proves them with part records; and a
 * finder, a member that has not found the coordinator's meeting yet. A save that one
 * engine serves is the coordinator's, of a meeting with one member: no meeting files,
 * no part records. */
typedef struct sv_role {
    /* The save's directory, once its plan is made (without the engine's lock, the save
     * still PLANNING, which keeps every other caller off it): the coordinator makes it
     * (and of several engines the meeting); the finder only looks whether the name is
     * taken, which rank 0's engine will refuse. */
    int (*open)(ck__saver *sv, sv_ckpt *c, ck_err *err);
    /* Rank 0 joins the save another rank began: the finder becomes the coordinator,
     * a member refuses it (another engine coordinates). */
    int (*rank0)(ck__saver *sv, sv_ckpt *c, ck_err *err);
    /* A rank's blobs (len bytes, packed), as it stages its part: into the coordinator's
     * manifest, or kept for the member's part record. */
    int (*blobs)(sv_ckpt *c, struct part *p, const uint8_t *blob, uint64_t len, ck_err *err);
    /* Whether a staged part waits for the save's directory (the finder has none). */
    bool waits;
    /* The coordinator's: it builds the manifest (saver_tier.c asks, without naming
     * the table). */
    bool coordinates;
    /* A rank's file is written (r 0) or its write failed (r < 0, err): a member proves
     * the rank with its part record, or tells the reason the meeting gives. The new r. */
    int (*written)(ck__saver *sv, sv_ckpt *c, uint64_t rank, int r, ck_err *err);
    /* Whether from now on the save completes without any client. */
    bool (*committable)(const sv_ckpt *c);
    /* Every part is durable or adopted, or rank 0 asked: the coordinator commits once
     * both hold. */
    void (*commit)(ck__saver *sv, sv_ckpt *c);
    /* The save failed: the other engines are told through the meeting. */
    void (*failed)(ck__saver *sv, sv_ckpt *c);
    /* Takes the save apart (without the engine's lock): the coordinator removes its
     * directory, a member frees only its memory (the directory is the coordinator's). */
    void (*abort)(ck_save *s);
    /* The meeting thread's round of the save. */
    void (*tick)(ck__saver *sv, sv_ckpt *c, double t);
} sv_role;

extern const sv_role ck__sv_coordinator, ck__sv_member, ck__sv_finder;

struct sv_ckpt {
    struct sv_ckpt *next;
    char name[CK_NAME_MAX];
    ck_job_id job;                 /* with the name, what makes the save this one */
    char job_hex[CK_JOB_HEX_MAX];
    int state;
    uint64_t step, world;
    bool no_hash;
    ck_decl *decl;                 /* the first part's: the later ones must equal it */
    ck_save *s;
    part *parts;
    uint64_t joined, staged, durable;
    bool commit_requested, fail_reported;
    unsigned writes;               /* write jobs queued or running */
    int fail_code;
    char fail_msg[CK_ERR_MSG_MAX];
    uint64_t bytes_staged, bytes_written;
    double t0;
    const sv_role *role;
    /* Shared by several daemons: */
    uint32_t nodes;
    char token[CK_TOKEN_MAX];
    char meet[PATH_MAX];           /* the meeting's directory, once known */
    dev_t dev;                     /* member: the pending directory's identity, which */
    ino_t ino;                     /* the rename keeps: ROOT/NAME is it once committed */
    uint64_t remote;               /* coordinator: ranks adopted from part records */
    uint32_t seq;                  /* member: part files written */
    peer *peers;
    unsigned npeers;
    char (*stale)[CK_TOKEN_MAX];   /* member: meetings of other jobs found to be debris */
    unsigned nstale;
    double deadline;               /* the part timeout */
    double next_watch;             /* when to read the peers' heartbeats next */
    bool heard;                    /* the failure came from the meeting: not announced */
    double failed_at;              /* C_FAILED: when */
    bool stuck_reported;           /* CK_SAVER_STUCK sent: its writes never returned */
    /* Tiered saves (saver_tier.c): */
    uint8_t level;                 /* asked (ck_level, never DEFAULT) */
    uint8_t reached;               /* told in COMMITTED */
    uint8_t seen;                  /* the highest level its meeting showed, while there */
    bool told;                     /* COMMITTED sent */
    char note[CK_ERR_MSG_MAX];     /* why the level reached is lower than asked */
    uint8_t *tier;                 /* member: the coordinator's tier file, until committed */
    size_t tier_len;
    char (*clique)[CK_NODE_ID_MAX];/* the others of this engine's clique */
    uint32_t nclique;
    char (*order)[CK_NODE_ID_MAX]; /* every engine of the save, in the tier file's order */
    uint32_t norder;
    bool shared;                   /* member: its share.ID is written */
    bool early;                    /* replicate_begin was weighed: once, whatever came of it */
    void (*landed)(void *arg, const char *name, const char *file, uint64_t bytes);
    void *landed_arg;              /* opts.landed and arg, for the writers' threads */
    /* Level durable: the drain asked (CK_SAVER_DRAIN), its outcome when this engine's
     * daemon drained it (ck__saver_drained), and whether drain.ID holds that outcome. */
    bool drain_asked, drain_known, drain_put;
    double next_look;              /* the meeting gone: when to look at ROOT/NAME next */
    int drain_code;
    char drain_msg[CK_ERR_MSG_MAX];
    /* Coordinator: NAME's lock in the durable root, held while the meeting is there
     * (the save's own lock is in the local tier): a daemon starting on the durable root
     * keeps the meeting, and another job's save of NAME is refused as ever. -1: none. */
    int meet_lock, meet_rootfd;
};

enum { JOB_WRITE, JOB_COMMIT, JOB_ABORT, JOB_REPLICATE };

typedef struct sv_job {
    struct sv_job *next;
    sv_ckpt *c;
    uint64_t rank;
    int kind;
} sv_job;

struct ck__saver {
    ck__saver_opts o;
    char root[PATH_MAX];
    pthread_mutex_t mu;
    pthread_cond_t work, idle;
    sv_job *head, *tail;
    bool stop;
    bool closing;                  /* ck__saver_free walks the list: no pruning */
    pthread_t *th;
    unsigned nth;
    sv_ckpt *list;
    /* Shared saves: the meeting thread, its wake-up, the graves it tends. */
    pthread_t meet_th;
    bool meet_running;
    pthread_cond_t meet_cv;
    grave *graves;
    double beat_every;             /* seconds between heartbeats, and between watches */
};

/* ---- saver_state.c ---- */

/* CLOCK_MONOTONIC, in seconds. */
double ck__sv_now(void);
/* A line for the engine's log, when it has one. */
void ck__sv_log(ck__saver *sv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Tells the engine's user (opts.event) of c's news; rank for DURABLE. */
void ck__sv_emit(ck__saver *sv, ck__saver_ev_kind kind, const sv_ckpt *c, uint64_t rank);
/* The save of name and job in flight (or failed and remembered), or NULL. */
sv_ckpt *ck__sv_find(ck__saver *sv, const char *name, const ck_job_id *job);
/* Whether c is still in the engine's list (looked up by address). */
bool ck__sv_listed(const ck__saver *sv, const sv_ckpt *c);
/* Frees c's parts (all: c itself too). */
void ck__sv_free_parts(sv_ckpt *c, bool all);
/* Takes c out of the engine's list. */
void ck__sv_unlink(ck__saver *sv, sv_ckpt *c);
/* Fails c (once, while it collects) with code and msg: told to the other engines of a
 * shared save, reported once nothing of it runs any more (ck__sv_finish_failed). */
void ck__sv_fail(ck__saver *sv, sv_ckpt *c, int code, const char *msg);
void ck__sv_finish_failed(ck__saver *sv, sv_ckpt *c);
/* Queues a job of kind (JOB_*) for the worker threads. */
int ck__sv_push(ck__saver *sv, sv_ckpt *c, uint64_t rank, int kind);
/* Binds and queues the parts staged before c's directory was known. */
int ck__sv_resolve(ck__saver *sv, sv_ckpt *c, ck_err *err);
/* Binds rank's staged part (its image or its sources) to c's save and queues its
 * write. */
int ck__sv_bind_part(ck__saver *sv, sv_ckpt *c, uint64_t rank, ck_err *err);

/* ---- saver_tier.c ---- */

/* The coordinator of a tiered save of several engines takes NAME's lock in the durable
 * root (c->meet_lock) before it makes the meeting: -EBUSY naming the holder while
 * another writer (another job) saves NAME there. Let go when c is freed
 * (ck__sv_free_parts). */
int ck__sv_tier_lock(ck__saver *sv, sv_ckpt *c, ck_err *err);
/* Lets that lock go (none held: nothing); saver_state.c, for ck__sv_free_parts. */
void ck__sv_tier_unlock(sv_ckpt *c);
/* The data root of the engine's saves: the local tier of a tiered engine, else root. */
const char *ck__sv_data_root(const ck__saver *sv);
/* Whether a tiered engine can take a save of b (the clique rule for its node count):
 * 0, or the error. Sets nothing. */
int ck__sv_tier_check(const ck__saver *sv, const ck__begin *b, ck_err *err);
/* JOB_COMMIT of a tiered save: commits this engine's copy (the coordinator publishes
 * the manifest), then replicates. */
void ck__sv_tier_commit(ck__saver *sv, sv_ckpt *c);
/* JOB_REPLICATE: sends this engine's copy to its clique and records the outcome. */
void ck__sv_tier_replicate(ck__saver *sv, sv_ckpt *c);
/* Whether a collecting save replicates beside its write once its clique is known
 * (decision 0204): tiered, of several engines, its ranks wait for level replicated or
 * more, and this engine's share of them (world / nodes) has all begun. */
bool ck__sv_tier_early_ready(const ck__saver *sv, const sv_ckpt *c);
/* A collecting save's round: a ready member writes its share.ID once; once every
 * engine's least rank is known (the others' share records, the coordinator's 0), the
 * early clique and this engine's files go to opts.replicate_begin, once. */
void ck__sv_tier_early(ck__saver *sv, sv_ckpt *c);
/* A member's round, once its records are out: true when the coordinator's tier file
 * is there and this engine's commit is queued. */
bool ck__sv_tier_member(ck__saver *sv, sv_ckpt *c);
/* A SETTLING save's round: the levels reached, COMMITTED once the asked one is (or
 * cannot be), the end once every engine's replication ended or the deadline passed. */
void ck__sv_tier_tick(ck__saver *sv, sv_ckpt *c, double t);
/* A settling save's watch of the other engines (saver_meet.c, before each round of
 * ck__sv_tier_tick), once per beat: a member learns the others from their joins; an
 * engine that still owes a record and whose heartbeat stood still for --dead-after, or
 * that restarted, is marked dead for good (peer.dead), and logged. */
void ck__sv_settle_watch(ck__saver *sv, sv_ckpt *c, double t);
/* The engine of c named id (one of the others), or NULL (saver_state.c). */
peer *ck__sv_peer(sv_ckpt *c, const char *id);

/* ---- saver_meet.c ---- */

/* The meeting thread (opts.node_id set): heartbeats, and every shared save's round
 * every poll_ms. Takes the engine's lock itself. */
void *ck__sv_meet_thread(void *arg);

#endif
