/* kd.h - ckptd's state: one kd_server holds everything (no globals).
 *
 * One thread runs the event loop (kd_server.c): the listening socket, the signalfd,
 * the clients, and an eventfd through which the save engine's worker threads (the
 * core's ck__saver, shared with the embedded client) hand their events over.
 *
 * Each file owns one responsibility, and the files are layers, top to bottom: a file
 * calls only files below it. A lower file that has news for one above returns it
 * rather than calling up (kd_staging_admit_waiting hands kd_ckpt.c the parts whose
 * clients it must tell), so each file can be read knowing only what is below it.
 *   main.c        options, daemonizing, start and exit
 *   kd_server.c   socket, peer credentials, the event loop
 *   kd_recover.c  owning the root (its lock) and recovering it at start
 *   kd_proto.c    reading and validating messages, dispatching them
 *   kd_status.c   the STATUS reply
 *   kd_ckpt.c     per-checkpoint state: its parts, its clients, saver events
 *   kd_plan.c     the planner thread: checks big box lists and joins ranks to saves,
 *                 off the event loop
 *   kd_staging.c  mapping staging memfds, the staging budget, the admission queue
 *   kd_reply.c    finding a client by id, sending replies
 *   kd_log.c      the log
 * The declarations below follow the same order.
 */
#ifndef KD_H
#define KD_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "async/saver.h"
#include "async/proto.h"

#define KD_MAX_FDS 8          /* descriptors a client may have in flight unconsumed */
#define KD_MAX_SHARDS (1u << 24) /* shard records per save (docs/PROTOCOL.md) */
/* Boxes a BEGIN may declare and still have their tiling checked on the event loop
 * (about a millisecond); more go to the planner thread (docs/PROTOCOL.md). */
#define KD_INLINE_BOXES 4096u

typedef struct kd_opts {
    const char *root;
    char socket[108];
    uint64_t staging;          /* bytes of staging mapped at once */
    uint64_t plan_memory;      /* bytes of plans and declarations held at once */
    unsigned io_depth;
    unsigned hash_threads;
    unsigned writers;
    unsigned drain_timeout;    /* seconds a SIGTERM waits for ranks still staging */
    unsigned rank_timeout;     /* seconds a save waits for its next rank; 0: forever */
    char id[64];               /* this daemon among those sharing the root (--id); ""
                                * (the fuzzer's daemon): it serves no shared saves */
    unsigned part_timeout;     /* seconds a shared save waits for other daemons' parts */
    unsigned dead_after;       /* seconds another daemon's heartbeat may stand still */
    bool foreground;
    const char *log;
    ck_engine *engine;         /* wraps every save's I/O (ckptd-test's --inject-fault);
                                * NULL: the real engine */
} kd_opts;

typedef struct kd_client {
    struct kd_client *next;
    uint64_t id;
    int fd;
    pid_t pid;
    uint8_t *in;
    size_t in_len, in_cap;
    int fds[KD_MAX_FDS];
    unsigned nfds;
    bool drop;                 /* close after this round */
} kd_client;

/* One rank's part of a checkpoint in flight. Its staging mapping outlives the client:
 * the data is the daemon's once staged. */
typedef struct kd_part {
    struct kd_part *next;
    struct kd_part *wait_next; /* in the admission queue */
    struct kd_ckpt *ckpt;
    uint64_t rank;
    uint64_t client;           /* id; 0 once that client is gone */
    int fd;                    /* the memfd, until mapped */
    void *map;
    uint64_t need;             /* staging bytes: image + blobs */
    uint64_t image;
    bool admitted, waiting, staged;
} kd_part;

/* A save is its name and its job (ck__decl.job): two jobs' saves of one name are two
 * kd_ckpt, as they are two saves in the saver. */
typedef struct kd_ckpt {
    struct kd_ckpt *next;
    char name[CK_NAME_MAX];
    ck_job_id job;
    kd_part *parts;
    uint64_t plan_bytes;       /* counted against --plan-memory until the save ends */
    unsigned joins;            /* BEGINs of it in the planner */
    uint64_t world;            /* ranks, once one joined */
    bool shared;               /* served by several daemons: ranks absent here are others' */
    double progress;           /* kd_now() of its last BEGIN, ADMIT or STAGED */
    bool timed_out;            /* --rank-timeout abandoned it; FAILED is on its way */
} kd_ckpt;

/* A failed save the saver remembers (its late ranks get the failure) while clients
 * that held it are connected; when the last of them is gone it is forgotten, and a
 * BEGIN of the name is a retry. */
typedef struct kd_failed {
    struct kd_failed *next;
    char name[CK_NAME_MAX];
    ck_job_id job;
    unsigned n;
    uint64_t client[];         /* ids; 0 once gone */
} kd_failed;

/* A BEGIN on its way through the planner: the rank's declaration and staging memfd,
 * then the outcome of its join. */
typedef struct kd_join {
    struct kd_join *next;
    uint64_t client;
    pid_t pid;
    int fd;
    ck__decl d;
    uint64_t bytes;            /* the declaration's, counted against --plan-memory */
    bool check;                /* its box lists are the planner's to check */
    bool bad;                  /* they do not tile: a bad message, not a failed join */
    int r;
    uint64_t image;
    char msg[CK_ERR_MSG_MAX];
} kd_join;

/* Joins in order, appended and taken in O(1) (a client may queue many BEGINs). */
typedef struct kd_joinq {
    kd_join *head, *tail;
} kd_joinq;

typedef struct kd_event {
    struct kd_event *next;
    ck__saver_ev_kind kind;
    char name[CK_NAME_MAX];
    ck_job_id job;
    uint64_t rank;
    int code;
    char msg[CK_ERR_MSG_MAX];
} kd_event;

typedef struct kd_server {
    kd_opts o;
    char root[PATH_MAX];       /* realpath */
    FILE *log;
    int listen_fd, ep_fd, sig_fd, ev_fd;
    int reserve_fd;            /* /dev/null, given up to accept a client past the fd limit */
    bool fds_short;            /* out of descriptors: logged once, until a client is taken */
    double listen_resume;      /* kd_now() to listen again after a pause; 0: listening */
    int lock_fd;               /* ROOT/.ckptd.ID.lock, held for the daemon's life */
    uint64_t instance;         /* a nonce per start, in the heartbeat ROOT/.ckptd.ID.beat */
    ck__saver *saver;
    kd_client *clients;
    uint64_t next_id;
    unsigned nclients;
    kd_ckpt *ckpts;
    kd_failed *failed;
    uint64_t staging_used;
    kd_part *wait_head, *wait_tail;
    pthread_mutex_t ev_mu;     /* the event queue, filled by saver threads */
    kd_event *ev_head, *ev_tail;
    uint64_t plan_used;        /* of --plan-memory: saves in flight and queued joins */
    pthread_t plan_th;
    pthread_mutex_t plan_mu;   /* the planner's queues */
    pthread_cond_t plan_cv;
    kd_joinq plan_todo, plan_done;
    unsigned plan_queued;      /* joins submitted and not yet taken back */
    bool plan_stop, plan_running;
    bool stopping;
    bool drained;              /* the drain timeout passed: waiting saves were aborted */
    double drain_deadline;     /* CLOCK_MONOTONIC seconds */
} kd_server;

/* kd_server.c */
/* Recovers the root, then listens: the socket exists when it returns. */
int kd_server_start(kd_server *s, ck_err *err);
/* The signalfd of SIGTERM and SIGINT, on the event loop (after any fork). */
int kd_server_signals(kd_server *s, ck_err *err);
/* Starts the save engine's threads (after any fork). */
int kd_server_engine(kd_server *s, ck_err *err);
int kd_server_run(kd_server *s);

/* kd_recover.c */
/* Takes this daemon's lock on the root (-EBUSY: a ckptd of the same id holds it), then
 * recovers the root. */
int kd_recover(kd_server *s, ck_err *err);

/* kd_proto.c */
/* Consumes the complete messages in c's input; marks c to drop on a bad one. */
void kd_proto_input(kd_server *s, kd_client *c);
/* The peer closed with a message half sent. */
void kd_proto_truncated(kd_server *s, kd_client *c);

/* kd_status.c */
void kd_status_reply(kd_server *s, kd_client *c);

/* kd_ckpt.c */
/* Takes d's arrays and fd: the rank joins through the planner, which checks the box
 * lists first when check_boxes (a declaration too large to check on the loop). */
void kd_ckpt_begin(kd_server *s, kd_client *c, ck__decl *d, int fd, bool check_boxes);
void kd_ckpt_staged(kd_server *s, kd_client *c, const char *name, uint64_t rank);
void kd_ckpt_commit(kd_server *s, kd_client *c, const char *name);
void kd_ckpt_client_gone(kd_server *s, kd_client *c);
void kd_ckpt_events(kd_server *s);
/* Abandons the saves that waited --rank-timeout for a rank to begin or stage, naming
 * the ranks to their clients. */
void kd_ckpt_rank_timeouts(kd_server *s);
/* The drain timeout passed: aborts the saves still waiting for ranks (the saver logs
 * each by name). */
void kd_ckpt_drain_expired(kd_server *s);
void kd_saver_event(void *arg, const ck__saver_event *ev);
unsigned kd_ckpt_clients(const kd_ckpt *k, const kd_server *s);

/* kd_plan.c */
/* Shard records the declared tensors make on the declared mesh. */
uint64_t kd_plan_shards(const ck__decl *d);
/* Upper bound of the bytes the save's plan and state hold while it is in flight. */
uint64_t kd_plan_cost(const ck__decl *d);
/* Bytes of the declaration itself (tensors and blobs). */
uint64_t kd_join_bytes(const ck__decl *d);
/* Boxes of the declaration's box lists, and whether each list tiles its tensor
 * (ck_boxes_check: O(n log n) in the boxes). */
uint64_t kd_decl_boxes(const ck__decl *d);
int kd_decl_tiles(const ck__decl *d, ck_err *err);
int kd_plan_start(kd_server *s, ck_err *err);
void kd_plan_stop(kd_server *s);
void kd_plan_submit(kd_server *s, kd_join *j);
/* A finished join, or NULL. */
kd_join *kd_plan_done(kd_server *s);
void kd_join_free(kd_join *j);

/* kd_staging.c */
/* Checks a staging memfd: sealed against shrinking, at least size bytes. */
int kd_staging_check(int fd, uint64_t size, ck_err *err);
/* Admits p now or queues it; returns 1 admitted, 0 queued, or -errno (never fits). */
int kd_staging_admit(kd_server *s, kd_part *p, ck_err *err);
/* Unmaps p's staging, or takes p out of the queue. */
void kd_staging_release(kd_server *s, kd_part *p);
/* Maps the first waiting part if it now fits and returns it (its client may copy), or
 * NULL. Call it until NULL after every release: room is given in queue order. */
kd_part *kd_staging_admit_waiting(kd_server *s);

/* kd_reply.c */
kd_client *kd_client_find(kd_server *s, uint64_t id);
/* Sends a whole message; a client that cannot take it now is dropped. */
void kd_send(kd_server *s, kd_client *c, ck__wbuf *w);
void kd_send_error(kd_server *s, kd_client *c, const char *name, int code, const char *msg);
/* ADMIT, DURABLE, COMMITTED: the checkpoint's name, then a and b where not NULL. */
void kd_send_named(kd_server *s, kd_client *c, uint16_t type, const char *name,
                   const uint64_t *a, const uint64_t *b);

/* kd_log.c */
void kd_log(kd_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kd_log_cb(void *arg, const char *msg);
/* CLOCK_MONOTONIC seconds. */
double kd_now(void);

#endif
