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
 *   kd_restore.c  the restorer thread: RESOLVE, FETCH and TIERS off the event loop,
 *                 FETCHes of one checkpoint taken together
 *   kd_ckpt.c     per-checkpoint state: its parts, its clients, saver events
 *   kd_plan.c     the planner thread: checks big box lists and joins ranks to saves,
 *                 off the event loop
 *   kd_staging.c  mapping staging memfds, the staging budget, the admission queue
 *   kd_tiersave.c tiered saves: a node's copy sent to its clique (the saver's
 *                 replicate hook, over kd_peer_client.c), where each save settled
 *   kd_early.c    a node's part sent to its clique as it is written (decision 0204)
 *   kd_drain.c    the drainer thread: the drains asked for (kd_drain_offer, below the
 *                 save path that calls it), the policy, the drains owed, the drains
 *                 another node makes, stood by for
 *   kd_drain_copy.c one drain: local copies to a durable one, paced, every block checked
 *                 (its declarations come after the tiers' types it holds)
 *   kd_retain.c   retention per tier: the K newest local, the M newest durable, pins;
 *                 its passes run on the restorer's thread, which it wakes through the
 *                 callback the restorer gave it
 * The peer service (--local-root, --peer-listen; docs/PROTOCOL.md, "Peer protocol"): a
 * UCX worker on a thread of its own, and the client calls the rest of the daemon (and
 * ckptctl) make to other nodes' services. Only these files know UCX, and only
 * kd_peer_ucx.c includes it; the daemon's event loop never waits on a peer.
 *   kd_peer_serve.c  the service's thread: connections, requests, timeouts
 *   kd_drain_part.c  a node's part of a drain (PART): its files into the durable copy a
 *                    drain's committer began
 *   kd_drain_pipe.c  how a drain's writer moves its files: read ahead, written,
 *                    checked on a thread of their own, paced
 *   kd_tiers.c       where the copies are (the local tier, live peers, the durable
 *                    root), which checkpoint can be restored, fetching the nearest
 *   kd_peer_client.c INVENTORY, PUT and GET, synchronous, from any thread but the loop
 *   kd_peer_xfer.c   a copy's stream both ways: chunks under acks; the receiver's writer
 *   kd_peer_grow.c   a node's files as they are written, then their manifest: the source
 *                    of a PUT begun beside the local write
 *   kd_peer_inv.c    the copies a local tier holds, and finding one to send
 *   kd_peer_ucx.c    UCX: the worker, the listener, endpoints, whole messages
 *   kd_peer_bufs.c   the transfers' chunk buffers, used again
 *   kd_peer_addr.c   ADDR[:PORT], and the address file ROOT/.ckptd.ID.peer
 *   kd_peer_key.c    the job's peer key, the proofs of it a HELLO exchanges, and the
 *                    seals of what follows
 *   kd_peer_wire.c   the peer messages: encoding, and decoding with every field checked
 *   kd_reply.c    finding a client by id, sending replies
 *   kd_log.c      the log
 *   kd_parse.c    decimal counts of command lines and addresses
 * The declarations below follow the same order.
 */
#ifndef KD_H
#define KD_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "async/saver.h"
#include "async/proto.h"
#include "io/hash.h"

#define KD_MAX_FDS 8          /* descriptors a client may have in flight unconsumed */
#define KD_MAX_SHARDS (1u << 24) /* shard records per save (docs/PROTOCOL.md) */
#define KD_REPLICAS_MAX 64u   /* --replicas: copies of a node's part, its own included */

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
    const char *local_root;    /* this node's local tier (--local-root); NULL: none */
    const char *peer_listen;   /* ADDR[:PORT] of the peer service (--peer-listen) */
    unsigned peer_timeout;     /* seconds a peer may stay silent in a transfer */
    unsigned drain_every;      /* drain every K'th replicated save (--drain-every); 0: none */
    uint64_t drain_rate;       /* bytes/s of a drain's reads (--drain-rate); 0: unpaced */
    unsigned keep_local;       /* --keep-local: checkpoints the local tier keeps; 0: all */
    unsigned keep_durable;     /* --keep-durable: of each run in the root; 0: all */
    unsigned replicas, jump;   /* tiered saves' cliques (--replicas F, --jump J) */
    const char *peer_key;      /* --peer-key; NULL: DIR/.ckptd.key (kd_peer_key.c) */
    unsigned peer_checkers;    /* --peer-checkers: threads hashing a received stream */
} kd_opts;

/* The job's peer key (kd_peer_key.c): who holds it may speak to a peer service. */
#define KD_PEER_KEY_LEN 32
#define KD_PEER_NONCE_LEN 32
#define KD_PEER_PROOF_LEN 32
typedef struct kd_peer_key {
    uint8_t b[KD_PEER_KEY_LEN];
    char file[PATH_MAX];           /* where it was read, for messages */
} kd_peer_key;

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

/* A save is its name and its job (ck__begin.job): two jobs' saves of one name are two
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

/* A BEGIN on its way through the planner: the rank's part and staging memfd, then the
 * outcome of its join (the first rank's seals the declaration there: its layouts and
 * tilings are checked beside the event loop, never on it). */
typedef struct kd_join {
    struct kd_join *next;
    uint64_t client;
    pid_t pid;
    int fd;
    ck__begin d;
    uint64_t bytes;            /* the declaration's, counted against --plan-memory */
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
    uint8_t level;                 /* COMMITTED, SETTLED: the level reached */
    char (*nodes)[CK_NODE_ID_MAX]; /* SETTLED, DRAIN: the save's daemons in order */
    uint32_t n_nodes;
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
    /* Held shared by each fetch while it makes and fills a root LOCAL/.fetched/N (the
     * drainer's and the restorer's threads); retention drops empty fetched roots only
     * when it can take it whole, so never a root a fetch is about to fill. */
    pthread_rwlock_t fetching;
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
    char local_root[PATH_MAX]; /* realpath of --local-root; "" without */
    int local_lock_fd;         /* LOCAL/.ckptd.ID.lock, held for the daemon's life */
    struct kd_peers *peers;    /* the peer service; NULL without --peer-listen */
    kd_peer_key peer_key;      /* with a local tier: every peer call proves it holds it */
    struct kd_restorer *restorer; /* RESOLVE, FETCH and TIERS (kd_restore.c); NULL: none */
    struct kd_drainer *drainer;   /* drains to the durable tier (kd_drain.c); NULL: none */
    struct kd_retain *retain;  /* retention's pins and runs (kd_retain.c) */
    /* Saves whose part goes to its clique as it is written (kd_early.c), and the lock
     * of that list, which the saver's writers and the early PUTs' threads take. */
    struct kd_early *early;
    pthread_mutex_t early_mu;
    bool stopping_early;
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

/* kd_restore.c */
/* Starts the restorer's thread (after any fork). */
int kd_restore_start(kd_server *s, ck_err *err);
/* Stops it once the request it works on is done; what waits is dropped. */
void kd_restore_stop(kd_server *s);
/* Queues c's RESOLVE, FETCH or TIERS (q taken); a full queue, or no restorer, is an
 * ERROR now. */
void kd_restore_submit(kd_server *s, kd_client *c, uint16_t type, ck__restore_req *q);
/* Sends the replies the restorer finished to their clients, if still connected. */
void kd_restore_replies(kd_server *s);

/* kd_ckpt.c */
/* Takes what d holds and fd: the rank joins through the planner. */
void kd_ckpt_begin(kd_server *s, kd_client *c, ck__begin *d, int fd);
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
/* Upper bound of the bytes the save's plan and state hold while it is in flight. */
uint64_t kd_plan_cost(const ck__begin *d);
/* Bytes of the part's declaration itself (tensors, boxes and blobs). */
uint64_t kd_join_bytes(const ck__begin *d);
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

/* kd_retain.c: retention per tier (--keep-local, --keep-durable; decisions 0182, 0195) */
/* Owners of pins: the pids of client processes (a loader's RESOLVE and FETCH come on
 * connections of their own: its pins stay until the last connection of its process
 * closes), and the daemon's drains: those it owes (queued or running), and those it
 * stands by for. */
#define KD_PIN_OWED (1ull << 63)
#define KD_PIN_WATCHED ((1ull << 63) | 1)
int kd_retain_init(kd_server *s, ck_err *err);
void kd_retain_free(kd_server *s);
/* The thread that runs the passes (the restorer's) says how to ask it for one: wake(arg),
 * called under retention's lock, must only flag and signal. */
void kd_retain_runs_on(kd_server *s, void (*wake)(void *arg), void *arg);
/* After a commit of name (NULL: none): learns its run, and asks for a pass. From the
 * event loop or any thread: the pass runs on the restorer's. */
void kd_retain_after_commit(kd_server *s, const char *name);
/* While pinned by some owner (until kd_retain_unpin of the owner, or for 30 minutes
 * after the last pin of the name by it), no copy of name in any tier is removed. */
void kd_retain_pin(kd_server *s, uint64_t owner, const char *name);
void kd_retain_unpin(kd_server *s, uint64_t owner);
/* A drain's hold (KD_PIN_OWED, KD_PIN_WATCHED): name's copies stay, beyond K, until
 * kd_retain_release of the same owner and name, however long that takes. */
void kd_retain_hold(kd_server *s, uint64_t owner, const char *name);
void kd_retain_release(kd_server *s, uint64_t owner, const char *name);
/* A pass (the restorer's thread only). */
void kd_retain_run(kd_server *s);

/* ---- the peer service ---- */

/* Peer protocol (docs/PROTOCOL.md, "Peer protocol"). Every message is one UCX active
 * message: a 16-byte header (u32 magic "CKP1", u16 version, u16 type, u64 arg: a
 * DATA's stream offset, an ACK's bytes taken, else 0) and a payload. */
#define KD_PEER_VERSION 9
#define KD_PEER_MAGIC 0x31504b43u           /* "CKP1" */
#define KD_PEER_HDR 16
/* After AUTH every message but DATA ends in a seal of this many bytes: HMAC-SHA256 under
 * the connection's session key (kd_peer_key.c; decision 0196). DATA needs none: every
 * byte of a stream is checked against the manifest, whose SHA-256 the sealed GET_OK or
 * MANIFEST declares. */
#define KD_PEER_SEAL_LEN 32
#define KD_PEER_AM_ID 1                     /* the UCX active message id of every message */
#define KD_PEER_MSG_MAX (16u << 20)         /* payload of a message but DATA */
#define KD_PEER_REQ_MAX (1u << 20)          /* payload the service takes from a client */
#define KD_PEER_CHUNK (1u << 20)            /* the bytes a sender puts in one DATA */
#define KD_PEER_CHUNK_MAX (4u << 20)        /* the most a receiver takes in one DATA */
/* Stream bytes sent and not yet acknowledged: the window, which the receiver states
 * (PUT_READY, GET) as one block of the default 4 MiB for each thread that checks them,
 * at least two blocks (kd_peer_window; peer protocol 6, decision 0200). A window
 * outside these bounds is refused. */
#define KD_PEER_WINDOW_MIN (8u << 20)
#define KD_PEER_WINDOW_MAX (32u << 20)
#define KD_PEER_DATA_ALIGN 4096u            /* a received DATA's buffer */
#define KD_PEER_BUFS_KEEP (KD_PEER_WINDOW_MAX / KD_PEER_CHUNK + 2) /* idle chunk buffers kept */
#define KD_PEER_HELD_MAX 64u                /* DATA held ahead of the receiver's cursor */
/* The most threads of a receiver that check the blocks of the stream, beside the one
 * that writes it: one per block the window holds (decisions 0190, 0200). ckptd's
 * --peer-checkers; by default one per CPU but the writer's, none on one CPU (the writer
 * checks). */
#define KD_PEER_CHECKERS 8u
/* A sender's read-ahead (decision 0202): KD_PEER_READERS chunks read at once, at most
 * KD_PEER_AHEAD chunks read past what was sent. */
#define KD_PEER_READERS 4u
#define KD_PEER_AHEAD 8u
#define KD_PEER_CONNS_MAX 32u               /* connections the service keeps */
#define KD_PEER_XFERS_MAX 4u                /* PUTs and GETs it serves at once */
#define KD_PEER_PORT 7471                   /* --peer-listen without a port */
#define KD_PEER_ADDR_MAX 128                /* "HOST:PORT" with its NUL */

enum kd_peer_type {
    /* the side that connects -> the service */
    KD_P_HELLO = 1,        /* str id, u64 instance, 32 bytes nonce */
    KD_P_INVENTORY = 2,    /* empty */
    KD_P_PUT = 3,          /* a stream: str name, str source, u64 manifest bytes (0: it
                            * comes last), 32 bytes the manifest's SHA-256 (zeros), u32
                            * block size, u32 n, n x (str file, u64 size); then DATA after
                            * PUT_READY, the data files first, MANIFEST before the
                            * manifest's bytes */
    KD_P_GET = 4,          /* str name, str source ("": any copy), u64 time (0: any), u8
                            * all, u32 n, n x str file (all: every file of the copy; n is
                            * then 0) */
    KD_P_AUTH = 5,         /* 32 bytes: the caller's proof that it holds the peer key */
    KD_P_PART = 6,         /* str name, str source ("": any copy), u64 time, 32 bytes the
                            * drain's manifest's SHA-256, str token, u32 n, n x str file:
                            * write these files of this node's copy into the durable
                            * copy's pending directory .pending/NAME.TOKEN */
    KD_P_MANIFEST = 7,     /* in a PUT, once, before the manifest's bytes: u64 its bytes,
                            * 32 bytes its SHA-256 */
    KD_P_WAITING = 8,      /* empty, in a PUT before MANIFEST: the sender has nothing to
                            * send yet (its files are being written, its copy committed) */
    /* either way, in a transfer */
    KD_P_DATA = 16,        /* arg: stream offset; the bytes */
    KD_P_ACK = 17,         /* arg: stream bytes the receiver took (written and checked) */
    KD_P_ABORT = 18,       /* as ERROR, name "": the sender gives the stream up */
    /* the service -> the side that connects */
    KD_P_HELLO_OK = 64,    /* str id, u64 instance, 32 bytes nonce, 32 bytes proof */
    KD_P_INVENTORY_OK = 65,/* u32 n, n x copy (kd_peer_copy) */
    KD_P_PUT_READY = 66,   /* empty: send the stream */
    KD_P_GET_OK = 67,      /* a stream as PUT's, of the copy chosen; DATA follows */
    KD_P_COMMITTED = 68,   /* str name: the PUT's copy is committed */
    KD_P_ERROR = 69,       /* str name, i32 -errno, str message */
    KD_P_PART_DONE = 70,   /* str name: the PART's files are written, checked, fsynced; an
                            * ACK (arg: bytes written) comes at most once a tick before */
};

/* What a copy in a local tier is to the node (docs/FORMAT.md, "Copies"). */
enum kd_copy_kind {
    KD_COPY_OWN = 0,               /* LOCAL/NAME */
    KD_COPY_REPLICA = 1,           /* LOCAL/.replicas/SRC/NAME, kept for daemon SRC */
    KD_COPY_FETCHED = 2,           /* LOCAL/.fetched/N/NAME, fetched to restore from */
};

/* One copy a node holds (INVENTORY). A checkpoint is its name and its commit time:
 * copies of one name and another time are copies of another save of that name. */
typedef struct kd_peer_copy {
    char name[CK_NAME_MAX];
    uint64_t step;
    uint64_t time_ns;              /* the commit time its manifest records */
    char source[CK_COPY_ID_MAX];   /* the daemon whose data it holds */
    uint8_t kind;                  /* enum kd_copy_kind */
    bool complete;
    uint32_t n_files;              /* data files of the checkpoint */
    uint32_t n_held;               /* of them in this copy */
    char (*held)[CK_FILE_NAME_MAX];/* partial: their names; NULL when complete */
} kd_peer_copy;

/* What a stream carries (PUT, GET_OK) or a GET asks for: the checkpoint's name, the
 * copy's source, the manifest's bytes, and data files (names; sizes in a stream). */
typedef struct kd_preq {
    char name[CK_NAME_MAX];
    char source[CK_COPY_ID_MAX];
    uint64_t time_ns;              /* GET: a copy of the save committed then; 0: any */
    uint64_t manifest_size;        /* a stream's; a PUT's: 0 (its manifest comes last) */
    uint8_t manifest_sha256[CK_SHA256_LEN];   /* a stream's, a PART's: what its manifest
                                               * must hash to */
    uint32_t block_size;           /* a stream's: its data files' blocks */
    char token[CK_TOKEN_MAX];      /* a PART's: the durable copy's pending directory */
    uint32_t window;               /* a GET's: the window of its requester, which receives */
    bool all;
    uint32_t n;
    ck_file *files;
} kd_preq;

/* One side's HELLO (the caller's) or HELLO_OK (the service's, with its proof). */
typedef struct kd_phello {
    char id[CK_COPY_ID_MAX];
    uint64_t instance;
    uint8_t nonce[KD_PEER_NONCE_LEN];
    uint8_t proof[KD_PEER_PROOF_LEN];
} kd_phello;

typedef struct kd_peer_opts {
    const char *local_root;        /* realpath */
    const char *listen;            /* ADDR[:PORT] */
    const char *id;
    const char *durable_root;      /* where ROOT/.ckptd.ID.peer says where it listens */
    uint64_t instance;
    const kd_peer_key *key;        /* a caller proves it holds it before anything else */
    unsigned timeout;              /* s a peer may stay silent before its transfer fails */
    unsigned wait;                 /* s a PUT may say WAITING with no DATA (--part-timeout) */
    uint64_t drain_rate;           /* bytes/s a PART reads at (--drain-rate); 0: unpaced */
    unsigned checkers;             /* threads that check a PUT's blocks (--peer-checkers) */
    void (*log)(void *arg, const char *msg);
    void *log_arg;
} kd_peer_opts;

/* One call to another node's service, from a thread that may block (never the event
 * loop): every wait for the peer lasts at most timeout seconds since it last spoke. */
typedef struct kd_peer_call {
    const char *addr;              /* HOST:PORT */
    const char *id;                /* this side's daemon id, in HELLO */
    const kd_peer_key *key;        /* the job's: each side proves it holds it */
    unsigned timeout;
    unsigned checkers;             /* a GET's threads that check its blocks beside its
                                    * writer (0: the writer checks) */
    /* A busy refusal fails the call at once (-EBUSY), for a caller with another peer
     * to ask first; else it is made again within timeout. */
    bool busy_fails;
    /* bytes of the stream sent or taken; may be NULL */
    void (*progress)(void *arg, uint64_t done, uint64_t total);
    void *arg;
    /* true: the caller gives the call up (-ECANCELED) at its next wait (within 100 ms),
     * closing the connection, so that the peer drops what it was doing; may be NULL */
    bool (*stop)(void *arg);
    void *stop_arg;
} kd_peer_call;

/* kd_peer_serve.c */
/* Whether ADDR[:PORT] can be listened on for peers: it parses, and is no wildcard,
 * which would say nothing a peer could connect to. */
int kd_peers_check_listen(const char *listen, ck_err *err);
/* Listens (the address file written) and runs the service on a thread of its own. */
int kd_peers_start(const kd_peer_opts *o, struct kd_peers **out, ck_err *err);
/* Fails the transfers in progress (nothing of them stays), removes the address file,
 * stops the thread. */
void kd_peers_stop(struct kd_peers *p);

/* kd_tiers.c: where the copies of checkpoints are, seen from this node, and restoring
 * from the nearest (docs/ARCHITECTURE.md, "Tiers"). */
typedef enum kd_where {
    KD_AT_LOCAL = 0,               /* this node's local tier */
    KD_AT_PEER = 1,                /* a live peer's local tier */
    KD_AT_DURABLE = 2,             /* the durable root */
} kd_where;

/* One copy of a checkpoint, where it lies and who holds it. */
typedef struct kd_tcopy {
    kd_peer_copy c;
    uint8_t where;                 /* enum kd_where */
    char holder[CK_COPY_ID_MAX];   /* the daemon that holds it ("" in the durable root) */
    uint32_t peer;                 /* KD_AT_PEER: its index in kd_tview.peers */
    char root[PATH_MAX];           /* local and durable: the root it lies in */
} kd_tcopy;

/* A daemon that publishes a peer address in the durable root, and whether it answered. */
typedef struct kd_tpeer {
    char id[CK_COPY_ID_MAX];
    char addr[KD_PEER_ADDR_MAX];
    int r;                         /* 0: it answered; else it is lost, and why says why */
    char why[256];
} kd_tpeer;

typedef struct kd_tview {
    kd_tcopy *v;
    size_t n;
    kd_tpeer *peers;
    size_t npeers;
} kd_tview;

typedef struct kd_tiers_opts {
    const char *local;             /* the local tier (realpath); NULL: none, and no peers */
    const char *durable;           /* the durable root (realpath) */
    const char *id;                /* this daemon's */
    const kd_peer_key *key;        /* the job's peer key, for every call to a peer */
    unsigned timeout;              /* s a peer may stay silent (--peer-timeout) */
    unsigned checkers;             /* each fetch's (kd_peer_call's; --peer-checkers) */
    void (*log)(void *arg, const char *msg);
    void *log_arg;
    /* bytes of each fetch from a peer taken so far (kd_peer_call's); may be NULL */
    void (*progress)(void *arg, uint64_t done, uint64_t total);
    void *progress_arg;
    pthread_rwlock_t *fetching;    /* the server's (kd_server.fetching); may be NULL */
} kd_tiers_opts;

/* Every copy of name ("": of every checkpoint) this node can reach: its local tier's,
 * the durable root's, and with peers every live peer's (their INVENTORY, asked at once,
 * each within the timeout). */
int kd_tiers_gather(const kd_tiers_opts *o, const char *name, bool peers, kd_tview *t,
                    ck_err *err);
/* RESOLVE: what (a name), or with newest the newest PREFIX<step> whose every data file
 * has a live copy; pick->why says why it is not the newest saved, if it is not. */
int kd_tiers_resolve(const kd_tiers_opts *o, const char *what, bool newest,
                     ck__restore_pick *pick, ck_err *err);
/* FETCH: makes the data files of checkpoint name (n of them; none: its manifest)
 * readable from this node, nearest first: a copy in the local tier; else fetched from
 * a live peer's copy into LOCAL/.fetched/N (a copy that fails, a peer that dies, is
 * skipped for the next); else the durable root's complete copy, read in place.
 * *time gets the commit time of the save it chose (the newest that can be restored). */
int kd_tiers_fetch(const kd_tiers_opts *o, const char *name, char (*files)[CK_FILE_NAME_MAX],
                   uint32_t n, uint64_t *time, ck_err *err);
/* The copy directories that hold the files (none: the manifest) of the save of name
 * committed at time, nearest first, each needed (at most CK_COPIES_MAX). */
int kd_tiers_cover(const kd_tiers_opts *o, const char *name, uint64_t time,
                   char (*files)[CK_FILE_NAME_MAX], uint32_t n, ck__restore_dirs *out,
                   ck_err *err);
/* Fetches file of the save of name committed at time from a live peer's copy, never
 * this node's own (one found bad), into a new root LOCAL/.fetched/N (root, PATH_MAX
 * bytes, gets it): checked block by block on arrival, committed by rename. */
int kd_tiers_refetch(const kd_tiers_opts *o, const char *name, uint64_t time,
                     const char *file, char *root, ck_err *err);
/* Whether every data file of the save of name committed at time has a copy in t. */
bool kd_tiers_whole(const kd_tview *t, const char *name, uint64_t time);
/* Whether copy c holds data file file (a complete copy holds every one). */
bool kd_tiers_holds(const kd_peer_copy *c, const char *file);

/* ---- the drain (kd_drain.c, kd_drain_copy.c) ---- */

enum kd_drain_state {
    KD_DRAIN_QUEUED = 0, KD_DRAIN_RUNNING = 1, KD_DRAIN_DONE = 2, KD_DRAIN_FAILED = 3,
    KD_DRAIN_STANDBY = 4,          /* another daemon drains it; this one stands by */
};

/* One drain, as the DRAIN reply says it. */
typedef struct kd_drain_row {
    char name[CK_NAME_MAX];
    uint64_t step;                 /* 0 until its manifest is read */
    uint8_t state;                 /* enum kd_drain_state */
    uint64_t done, total;          /* bytes streamed to the durable root, of total */
    char why[CK_ERR_MSG_MAX];      /* failed: why; done with nothing to do: why not;
                                    * standing by: who drains it */
} kd_drain_row;

typedef struct kd_drain_rows {
    kd_drain_row *rows;
    uint32_t n;
    uint32_t every;                /* --drain-every */
    uint64_t rate;                 /* --drain-rate, bytes/s; 0: unpaced */
} kd_drain_rows;

/* The pace of the drain's reads: a token bucket of rate bytes/s, without a burst. Used
 * by one thread alone (the drainer's; a part's). */
typedef struct kd_drain_bucket {
    uint64_t rate;                 /* 0: unpaced */
    double t;                      /* kd_now() when what was taken is paid for */
} kd_drain_bucket;

/* kd_drain_pipe.c: a drain writer's files read ahead, written and checked at once
 * (decision 0203); the drains' pacing */
/* Takes n bytes of b's rate: sleeps until they are paid for. b NULL or rate 0:
 * unpaced. */
void kd_drain_pace(kd_drain_bucket *b, uint64_t n);
/* The bytes a paced drain reads at once: a tenth of a second of b's rate (4 KiB to
 * 1 MiB, a multiple of 4 KiB). */
size_t kd_drain_chunk(const kd_drain_bucket *b);
struct ck__copy_in;                /* ops/copy.h */
typedef struct kd_dpipe kd_dpipe;
/* A file for the pipe: len bytes of fd from its start. */
typedef struct kd_dpipe_file_in {
    int fd;                        /* the caller's, open for reading */
    bool direct;                   /* fd's file description is O_DIRECT */
    uint64_t len;
    const char *what;              /* its path, for messages */
    uint32_t tag;                  /* the caller's name for it, given back with an error */
    void (*wrote)(void *arg, size_t n);   /* n more of its bytes written; may be NULL */
    bool (*stop)(void *arg);       /* true: give up (-ECANCELED); may be NULL */
    void *arg;
} kd_dpipe_file_in;
/* A pipe into c, which was begun with one checker (opts.checkers = 1): the pipe's
 * checker thread checks every chunk once it is written. */
int kd_dpipe_open(struct ck__copy_in *c, kd_drain_bucket *bucket, kd_dpipe **out,
                  ck_err *err);
/* Moves f into c after what the pipe moved before, paced. On an error *bad is the tag
 * of the file whose read failed or whose block the checker found bad (untouched for a
 * failure of the durable side), and c is only to be freed. */
int kd_dpipe_file(kd_dpipe *p, const kd_dpipe_file_in *f, uint32_t *bad, ck_err *err);
/* Waits until every chunk written is checked: 0, or the checker's error (*bad). */
int kd_dpipe_end(kd_dpipe *p, uint32_t *bad, ck_err *err);
/* Stops the checker (what it has not checked stays unchecked: unless kd_dpipe_end said
 * 0, the copy is to be given up), waits for the reads in flight, frees p. */
void kd_dpipe_free(kd_dpipe *p);

/* kd_drain_part.c: a node's part of a drain (decision 0197) */
typedef struct kd_dpart_opts {
    const char *root;              /* the local root of this node's copy: ROOT/NAME */
    const char *durable;           /* the durable root the drain's copy is committed in */
    const char *id;                /* this daemon's */
    /* name, time_ns (the save), manifest_sha256 (the drain's manifest), token (its
     * pending directory), files (names) */
    const kd_preq *q;
    kd_drain_bucket *bucket;
    bool (*stop)(void *arg);       /* true: give the part up (-ECANCELED); may be NULL */
    void *stop_arg;
} kd_dpart_opts;
/* Writes data files q->files of this node's copy ROOT/NAME of the save of q->time_ns
 * into the pending directory q->token of the durable copy that a drain's committer
 * began (ck__copy_in as a writer that joins it: the directory's manifest must be
 * q->manifest_sha256's, and every block is checked against it), fsynced; *done counts
 * its data files' bytes written. On failure nothing of the part is left there. */
int kd_drain_part(const kd_dpart_opts *o, _Atomic uint64_t *done, ck_err *err);
/* The same on a thread of its own (the peer service's PART): kd_dpart_poll says 0
 * while it runs, 1 once written, or its error; kd_dpart_free gives it up if it still
 * runs (within one chunk) and frees it. */
typedef struct kd_dpart kd_dpart;
int kd_dpart_start(const kd_dpart_opts *o, kd_dpart **out, ck_err *err);
int kd_dpart_poll(kd_dpart *p, uint64_t *done, ck_err *err);
void kd_dpart_free(kd_dpart *p);

/* One drain in progress. */
typedef struct kd_drain_ctx {
    kd_tiers_opts o;
    const char *name;
    kd_drain_bucket *bucket;
    bool (*stop)(void *arg);       /* true: give the drain up (-ECANCELED) */
    void *stop_arg;
    _Atomic uint64_t done, total;  /* read by the event loop for the status */
    uint64_t fetched_seen;         /* bytes of the fetch in progress already paced */
} kd_drain_ctx;

/* kd_drain.c */
/* Starts the drainer (with a local tier; after any fork), queueing the drains the
 * local tier's .ckptd.ID.drain says a daemon of this id owed. */
int kd_drain_start(kd_server *s, ck_err *err);
/* Gives up the drain in progress (still owed: the next start resumes it), stops. */
void kd_drain_stop(kd_server *s);
/* The save path's call once checkpoint name (of step) is replicated: every
 * --drain-every'th is drained, by nodes[0], the first of the save's daemons, while the
 * others stand by in their order and take the drain over from one whose heartbeat
 * stops before the durable root holds the checkpoint (decision 0192). With no nodes
 * (ckptctl drain --offer), by the daemon whose own copy holds its first data file.
 * Returns at once (never waits on the drain or on storage); any thread. */
void kd_drain_offer(kd_server *s, const char *name, uint64_t step,
                    const char (*nodes)[CK_NODE_ID_MAX], uint32_t n_nodes);
/* A save that asked for level durable: name is drained ahead of the policy's drains,
 * by nodes[0] while the others stand by as for an offer (without nodes, by the daemon
 * whose own copy holds its first data file); the daemon that drains it tells its saver
 * how it ended (ck__saver_drained). -EAGAIN when the queue is full. */
int kd_drain_wait(kd_server *s, const char *name, const char (*nodes)[CK_NODE_ID_MAX],
                  uint32_t n_nodes);
/* DRAIN: queues name ("": nothing; offer: as kd_drain_offer), replies DRAIN_OK. */
void kd_drain_request(kd_server *s, kd_client *c, const char *name, bool offer);

/* kd_drain_copy.c */
/* Drains checkpoint d->name: its copies in the local tiers (this node's, and what live
 * peers hold, fetched) made a complete copy in the durable root, every block checked,
 * committed by rename. 0 committed; 1 the durable root held it already; else -errno
 * and nothing of it in the durable root. *step gets its step. */
int kd_drain_copy(kd_drain_ctx *d, uint64_t *step, ck_err *err);
/* kd_tiersave.c: tiered saves (the saver's replicate hook; where a save settled; the
 * drain of a save asked durable) */
int kd_tiersave_replicate(void *arg, const char *name, const char *const *peers, uint32_t n,
                          ck_err *err);
void kd_tiersave_settled(kd_server *s, const kd_event *e);
/* The saver's CK_SAVER_DRAIN: drains e->name now (kd_drain_wait), or tells the saver
 * why it cannot. */
void kd_tiersave_durable(kd_server *s, const kd_event *e);

/* kd_early.c: replication beside the local write (decision 0204). The saver's landed
 * and replicate_begin hooks (arg: the server); kd_early_finish, at the commit: 1 when
 * an early PUT of name was begun, done[i] saying whether peers[i] committed its replica
 * through it (0: none was, done all false); kd_early_cancel when the save failed;
 * kd_early_stop at the end, after the saver. */
void kd_early_landed(void *arg, const char *name, const char *file, uint64_t bytes);
void kd_early_begin(void *arg, const char *name, const char *dir, const char *const *peers,
                    uint32_t n, const ck_file *files, uint32_t nfiles, uint32_t block_size);
int kd_early_finish(kd_server *s, const char *name, const char *const *peers, uint32_t n,
                    bool *done);
void kd_early_cancel(kd_server *s, const char *name);
void kd_early_stop(kd_server *s);

/* kd_peer_client.c */
int kd_peer_inventory(const kd_peer_call *c, kd_peer_copy **out, size_t *n, ck_err *err);
/* Sends the copy ROOT/NAME (every data file it holds) to be kept as a replica;
 * returns once the peer committed it. Its source is the copy's (a partial copy's
 * file says it), else c->id. */
int kd_peer_put(const kd_peer_call *c, const char *root, const char *name, ck_err *err);
/* One peer of a PUT to several: its call, and how its PUT ended. */
typedef struct kd_peer_put_to {
    const kd_peer_call *c;
    int r;                         /* 0: it committed the replica; else the error in err */
    ck_err err;
    double secs;                   /* from its PUT to its end */
} kd_peer_put_to;
/* kd_peer_put to n peers (at most KD_REPLICAS_MAX - 1) at once, on this thread: the
 * copy is read once, each chunk sent to every peer still in (decision 0201), so the
 * stream moves at its slowest peer's pace; a peer that fails (a refusal, its death,
 * its silence) ends alone, and one silent while it holds the others back is given up
 * at half its call's timeout. Peers that were busy are asked again together, within
 * the first call's timeout. The first error of to[] (each says its own), or 0. */
int kd_peer_put_fan(kd_peer_put_to *to, uint32_t n, const char *root, const char *name);
struct kd_xsend;
/* The same with a stream the caller made (kd_xsend_open_grow, declared by q) and frees
 * after (its readers stopped): once, a busy peer failing with -EBUSY. */
int kd_peer_put_stream(kd_peer_put_to *to, uint32_t n, struct kd_xsend *x, const kd_preq *q,
                       const char *name);
/* The peers of such a PUT, as ckptd's replication and ckptctl name them: each one's
 * address (given, or looked up in the durable root by daemon id) and its call, a copy
 * of proto whose arg is the peer's own moved (its progress counts there). */
typedef struct kd_fan_peer {
    char addr[KD_PEER_ADDR_MAX];
    const char *name;              /* as the caller named it: an id or an address */
    kd_peer_call c;
    uint64_t moved;
} kd_fan_peer;
typedef struct kd_fan {
    uint32_t n;
    kd_fan_peer *p;                /* KD_REPLICAS_MAX - 1 of them: they never move */
    kd_peer_put_to *to;            /* to[i] is p[i]'s */
} kd_fan;
int kd_fan_open(kd_fan *f, ck_err *err);
/* Adds peer NAME (a daemon id looked up in root when by_id, else an address): -E2BIG
 * past KD_REPLICAS_MAX - 1 peers, a lookup's error (f unchanged) naming the peer. */
int kd_fan_add(kd_fan *f, const char *root, const char *name, bool by_id,
               const kd_peer_call *proto, ck_err *err);
void kd_fan_free(kd_fan *f);
/* Fetches NAME's manifest and data files (all of some copy's, or those named) from
 * the copy of source ("" or NULL: any) the peer holds, into the copy INTO/NAME,
 * checked block by block and committed by rename. */
int kd_peer_get(const kd_peer_call *c, const kd_preq *ask, const char *into, ck_err *err);
/* Asks the peer to write q->files of its copy of the save of q->name at q->time_ns into
 * the durable copy's pending directory q->token (PART; kd_drain_part); returns once it
 * says they are written, checked and fsynced. c->progress hears the bytes written. */
int kd_peer_part(const kd_peer_call *c, const kd_preq *q, ck_err *err);

/* kd_peer_grow.c: a node's data files as its save writes them, then its committed
 * copy's manifest (a kd_xsend's source; the caller serializes all but the reads). */
struct ck__copy_cut;
struct ck__copy_out;
typedef struct kd_grow kd_grow;
int kd_grow_open(const char *root, const char *dir, const char *name, const ck_file *files,
                 uint32_t n, kd_grow **out, ck_err *err);
void kd_grow_landed(kd_grow *g, uint32_t f, uint64_t bytes);
/* The next piece (ck__copy_out_cut's) and its stream offset (*at): 1; 0 at the end;
 * -EAGAIN: nothing written yet that was not cut. A piece of whichever data file has
 * the most landed bytes not yet cut (files in any order, each in order: decision
 * 0206), at most CK_COPY_BEGUN_MAX of them begun and not cut whole at once, each piece
 * a multiple of 4096 bytes; the manifest once every file was cut whole. */
int kd_grow_cut(kd_grow *g, size_t max, struct ck__copy_cut *k, uint64_t *at, ck_err *err);
int kd_grow_read(const kd_grow *g, struct ck__copy_cut *k, void *buf, ck_err *err);
/* The committed copy's manifest alone, once its data files are checked to be the ones
 * declared (-ESTALE); then attached (under the caller's lock) as the stream's end. */
int kd_grow_manifest(const kd_grow *g, struct ck__copy_out **out, ck_err *err);
void kd_grow_attach(kd_grow *g, struct ck__copy_out *manifest);
bool kd_grow_attached(const kd_grow *g, uint64_t *size, uint8_t sha256[CK_SHA256_LEN]);
uint64_t kd_grow_data_bytes(const kd_grow *g);
void kd_grow_free(kd_grow *g);

/* kd_peer_xfer.c */
struct kd_ucx;
typedef struct kd_xsend kd_xsend;
typedef struct kd_xrecv kd_xrecv;
struct kd_pconn;
struct kd_pmsg;
/* Sending: the stream of copy ROOT/NAME (the files ask names, all it holds when ask is
 * NULL or ask->all); q gets what is sent (kd_preq_free), its source the copy's: a
 * partial copy's own, else source. A PUT's (put): the data files, then the manifest,
 * which each lane is declared MANIFEST before its first byte; q declares none. */
int kd_xsend_open(const char *root, const char *name, const char *source, const kd_preq *ask,
                  bool put, kd_preq *q, kd_xsend **out, ck_err *err);
/* A PUT's stream begun beside the local write (decision 0204): the data files (n, in
 * dir, the save's pending directory beneath the local root ROOT) as they are written,
 * a piece read only once kd_xsend_grow says its bytes landed; then, once kd_xsend_finish
 * attached the committed copy ROOT/NAME's manifest, the manifest. q declares the files
 * and the block size. */
int kd_xsend_open_grow(const char *root, const char *dir, const char *name,
                       const char *source, const ck_file *files, uint32_t n,
                       uint32_t block_size, kd_preq *q, kd_xsend **out, ck_err *err);
/* File f of a grown stream has bytes from its start written (any thread). */
void kd_xsend_grow(kd_xsend *x, uint32_t f, uint64_t bytes);
/* The copy is committed: its data files must be the ones declared (-ESTALE, naming the
 * first that differs), and its manifest ends the stream (any thread). */
int kd_xsend_finish(kd_xsend *x, ck_err *err);
/* A receiver of the stream on c, whose worker is u, a lane (its index, or -ENOMEM),
 * with the window it stated (checked by the wire: KD_PEER_WINDOW_MIN to _MAX). Every
 * lane is added before the first pump (-EINVAL after): each chunk is read once and sent
 * on every lane still in. The stream's readers signal every lane's u when the next
 * chunk is read, so the thread that pumps waits on its workers alone; u stays valid
 * until kd_xsend_free. */
int kd_xsend_to(kd_xsend *x, struct kd_pconn *c, struct kd_ucx *u, uint32_t window);
/* Sends DATA of what the readers read while every lane's window allows (never waiting
 * for a read); 1 once every lane still in acknowledged every byte. A lane whose send
 * fails is given up (its connection says why); < 0 when the copy cannot be read, or no
 * lane is left. */
int kd_xsend_pump(kd_xsend *x, ck_err *err);
/* Gives a lane up: it is sent nothing more, and holds the others back no more. */
void kd_xsend_drop(kd_xsend *x, int lane);
uint32_t kd_xsend_window(const kd_xsend *x, int lane);
/* An ACK on a lane: how much its receiver took. */
int kd_xsend_ack(kd_xsend *x, int lane, uint64_t taken, ck_err *err);
/* Bytes a lane's receiver acknowledged (and the stream's, in total). */
uint64_t kd_xsend_done(kd_xsend *x, int lane, uint64_t *total);
/* Bytes sent (on every lane still in). */
uint64_t kd_xsend_sent(const kd_xsend *x);
bool kd_xsend_all_sent(kd_xsend *x);
/* A stream growing as its files are written that sent all it could: it waits for its
 * source (more bytes landed, or the commit's manifest), not for a receiver. */
bool kd_xsend_waits(kd_xsend *x);
/* Stops and joins the readers (they wake the lanes' workers: before those close). */
void kd_xsend_stop(kd_xsend *x);
void kd_xsend_free(kd_xsend *x);
/* Receiving into ROOT/q->name, a copy of q->source, through a writer thread of its own
 * that wakes u (kd_ucx_signal) whenever it took a message, and checkers (at most
 * KD_PEER_CHECKERS; 0: the writer checks) threads that check its blocks. */
int kd_xrecv_open(const char *root, const kd_preq *q, struct kd_ucx *u, unsigned checkers,
                  void (*log)(void *arg, const char *msg), void *log_arg, kd_xrecv **out,
                  ck_err *err);
/* --peer-checkers's default: one per CPU but the writer's, at most KD_PEER_CHECKERS. */
unsigned kd_peer_checkers_default(void);
/* The window of a receiver with that many checkers: what it states to its sender. */
uint32_t kd_peer_window(unsigned checkers);
/* The window x states (PUT_READY): kd_peer_window of its checkers. */
uint32_t kd_xrecv_window(const kd_xrecv *x);
/* A PUT's MANIFEST: its manifest's size and SHA-256, which extend the stream (the
 * writer declares them to the copy before it writes the manifest's first byte).
 * -EPROTO for a second, or in a stream whose manifest came first. */
int kd_xrecv_manifest(kd_xrecv *x, uint64_t size, const uint8_t *sha256, ck_err *err);
/* A PUT's WAITING, counted: -EPROTO after its MANIFEST (the stream's end is known). */
int kd_xrecv_waiting(kd_xrecv *x, ck_err *err);
/* The WAITING it took. */
unsigned kd_xrecv_waitings(const kd_xrecv *x);
/* A PUT's: how many times the writer was handed a piece of another data file than the
 * piece before while that one was not yet whole (0: its files came one after the
 * other). */
unsigned kd_xrecv_switches(const kd_xrecv *x);
/* Takes a DATA (m is x's, whatever happens): held until what comes before it came,
 * then queued for the writer. -EPROTO for one outside the window or overlapping. */
int kd_xrecv_data(kd_xrecv *x, struct kd_pmsg *m, ck_err *err);
/* What the writer did since the last call: ACKs it (on c). 0: nothing new; 2: new bytes
 * acknowledged; 1: the whole stream is written and checked (then kd_xrecv_commit);
 * < 0: the writer failed (a block's hash, the disk), or the ACK could not be sent. */
int kd_xrecv_poll(kd_xrecv *x, struct kd_pconn *c, ck_err *err);
/* Stream bytes written, checked and acknowledged (and the stream's, in total). */
uint64_t kd_xrecv_done(const kd_xrecv *x, uint64_t *total);
/* Commits the copy, once kd_xrecv_poll said 1. */
int kd_xrecv_commit(kd_xrecv *x, ck_err *err);
/* Frees x; an uncommitted copy leaves nothing. */
void kd_xrecv_free(kd_xrecv *x);

/* kd_peer_inv.c */
/* The copies LOCAL holds: its own (LOCAL/NAME), then replicas (LOCAL/.replicas/SRC/NAME)
 * and fetched copies (LOCAL/.fetched/N/NAME); self is this daemon's id, the source of
 * its own complete copies. roots, when not NULL, gets the root each lies in. */
int kd_inv_scan(const char *local, const char *self, kd_peer_copy **out,
                char (**roots)[PATH_MAX], size_t *n, ck_err *err);
/* The root (LOCAL, LOCAL/.replicas/SRC or LOCAL/.fetched/N) of a copy of ask->name that
 * holds every file ask names (ask->all: the one that holds most), of ask->source and
 * committed at ask->time_ns when given, and that copy's source. */
int kd_inv_find(const char *local, const char *self, const kd_preq *ask, char *root,
                size_t len, char source[CK_COPY_ID_MAX], ck_err *err);
/* Recovers LOCAL and every replica and fetched root under it (ck_root_recover): the
 * pending copies of writers that died are removed. */
int kd_inv_recover(const char *local, void (*log)(void *arg, const char *msg), void *arg,
                   ck_err *err);
/* LOCAL/.replicas/SRC into root (PATH_MAX bytes), made (0700) if absent: directories
 * of this user, never links. */
int kd_inv_replica_root(const char *local, const char *src, char *root, ck_err *err);
/* A new, empty root LOCAL/.fetched/N (PATH_MAX bytes) for one fetch: copies fetched
 * separately never meet, whatever their names and sources. */
int kd_inv_fetch_root(const char *local, char *root, ck_err *err);
/* Removes the fetch root made for name if a failed fetch left it empty. */
void kd_inv_fetch_drop(const char *root, const char *name);

/* kd_peer_bufs.c */
/* Buffers of size bytes, aligned to KD_PEER_DATA_ALIGN, used again (at most keep of
 * them kept idle); safe from several threads. */
typedef struct kd_bufs kd_bufs;
kd_bufs *kd_bufs_new(size_t size, unsigned keep);
/* A buffer of b's, or NULL (out of memory). */
void *kd_bufs_get(kd_bufs *b);
size_t kd_bufs_size(const kd_bufs *b);
/* Gives p back to pool (a kd_bufs; the signature of kd_pconn_send_buf's release). */
void kd_bufs_put(void *pool, void *p);
/* The owner lets go of b: it is freed once every buffer taken came back. */
void kd_bufs_drop(kd_bufs *b);

/* kd_peer_ucx.c */
typedef struct kd_ucx kd_ucx;
typedef struct kd_pconn kd_pconn;
typedef struct kd_pmsg {
    struct kd_pmsg *next;
    bool ready;                    /* its bytes are all here */
    uint16_t version, type;
    uint64_t arg;
    uint8_t *data;
    size_t len;
    kd_bufs *bufs;                 /* data is a buffer of this pool's, else malloc'd */
    unsigned refs;                 /* a received DATA: checkers yet to take it */
} kd_pmsg;
/* A UCX context and worker for one thread; listening on addr when not NULL (*bound
 * gets the address it listens on, its port chosen by the kernel when 0). */
int kd_ucx_open(const char *listen, kd_ucx **out, char *bound, size_t len, ck_err *err);
/* Closes every connection (bounded by a second) and the worker. */
void kd_ucx_close(kd_ucx *u);
/* Progresses the worker until it has nothing to do, and frees closed connections. */
void kd_ucx_progress(kd_ucx *u);
/* Wakes whoever sleeps on u's descriptor (or in kd_ucx_wait); from any thread. */
void kd_ucx_signal(kd_ucx *u);
/* Arms the worker's event descriptor (kd_ucx_fd): true when it is safe to sleep on it
 * now, false when there is work to progress first. */
bool kd_ucx_arm(kd_ucx *u);
int kd_ucx_fd(const kd_ucx *u);
/* kd_ucx_progress, then up to ms asleep on the descriptor, then kd_ucx_progress. */
void kd_ucx_wait(kd_ucx *u, int ms);
int kd_ucx_connect(kd_ucx *u, const char *addr, kd_pconn **out, ck_err *err);
/* A connection the listener accepted since the last call, or NULL. */
kd_pconn *kd_ucx_accepted(kd_ucx *u);
/* The next whole message of c, or NULL; the caller frees it (kd_pmsg_free). */
kd_pmsg *kd_pconn_next(kd_pconn *c);
void kd_pmsg_free(kd_pmsg *m);
/* Sends a message; takes payload (malloc'd, or NULL with len 0) whatever happens. */
int kd_pconn_send(kd_pconn *c, uint16_t type, uint64_t arg, void *payload, size_t len);
/* As kd_pconn_send, but payload is handed to release(ctx, payload) once UCX is done with
 * it (sent, or failed), on the worker's thread, instead of freed. */
int kd_pconn_send_buf(kd_pconn *c, uint16_t type, uint64_t arg, void *payload, size_t len,
                      void (*release)(void *ctx, void *payload), void *ctx);
/* Sends the encoded message w (taken). */
int kd_pconn_send_w(kd_pconn *c, uint16_t type, ck__wbuf *w);
/* From now on every message but DATA carries a seal (KD_PEER_SEAL_LEN bytes at the end
 * of its payload) under the session key of key and the two HELLOs (kd_peer_session),
 * both ways, numbered in each direction: sent ones get it, and kd_pconn_next hands out
 * only what carries the right one, the seal taken off (the first that does not fails
 * c). is_caller: this side connected. */
void kd_pconn_seal(kd_pconn *c, const kd_peer_key *key, const kd_phello *caller,
                   const kd_phello *service, bool is_caller);
/* 0 while usable; else -errno, and why: nothing more is taken from it (the messages
 * that came whole before still are). */
int kd_pconn_failed(const kd_pconn *c, const char **why);
/* The transport itself failed (the peer closed or died): nothing can be sent either.
 * Otherwise a failed connection can still carry an ERROR saying why. */
bool kd_pconn_broken(const kd_pconn *c);
/* Marks c failed (its messages dropped from now on); why names the cause. */
void kd_pconn_fail(kd_pconn *c, int code, const char *why);
const char *kd_pconn_peer(const kd_pconn *c);
/* Bytes of sends not yet completed. */
size_t kd_pconn_unsent(const kd_pconn *c);
/* Bytes of received messages c may have waiting to be taken (more fails it). */
void kd_pconn_set_budget(kd_pconn *c, size_t bytes);
/* Closes c: at once, once what was sent went out, or once the peer hung up after
 * reading the last word (an ERROR); a second at most. c is freed by the worker later
 * (kd_ucx_progress). */
typedef enum kd_close { KD_CLOSE_NOW, KD_CLOSE_FLUSH, KD_CLOSE_LAST_WORD } kd_close;
void kd_pconn_close(kd_pconn *c, kd_close how);
void *kd_pconn_user(const kd_pconn *c);
void kd_pconn_set_user(kd_pconn *c, void *user);

/* kd_peer_addr.c */
/* "HOST:PORT", "[V6]:PORT", or without the port (default_port): a socket address. */
int kd_addr_parse(const char *s, unsigned default_port, struct sockaddr_storage *sa,
                  socklen_t *len, ck_err *err);
void kd_addr_format(const struct sockaddr *sa, char *out, size_t len);
/* ROOT/.ckptd.ID.peer, written atomically: "ckptd peer V\naddress A\ninstance I\n", V
 * KD_PEER_VERSION (a peer of another version is not found). */
int kd_addr_publish(const char *root, const char *id, const char *addr, uint64_t instance,
                    ck_err *err);
void kd_addr_unpublish(const char *root, const char *id);
/* The address daemon ID published in ROOT. */
int kd_addr_lookup(const char *root, const char *id, char *addr, size_t len,
                   uint64_t *instance, ck_err *err);

/* kd_peer_key.c (decision 0194) */
/* The job's peer key: from file, or DURABLE/.ckptd.key when file is NULL. With make, a
 * missing one is made (mode 0600; the first daemon on the durable root makes it, the
 * others read it). A link, FIFO or device in its place, a file others may read or
 * another user owns, or one that is not a key file is refused, naming it. */
int kd_peer_key_load(const char *file, const char *durable, bool make, kd_peer_key *key,
                     ck_err *err);
/* n bytes from the kernel's random source. */
int kd_peer_random(void *p, size_t n, ck_err *err);
/* The caller: its HELLO (a fresh nonce) into w, and what it said into me. */
int kd_peer_greet(const char *id, kd_phello *me, ck__wbuf *w, ck_err *err);
/* The service: reads the caller's HELLO into caller, and writes HELLO_OK (a nonce of its
 * own, and its proof) into w; what it said into me. */
int kd_peer_answer(const kd_peer_key *key, const char *id, uint64_t instance,
                   const kd_pmsg *hello, kd_phello *caller, kd_phello *me, ck__wbuf *w,
                   ck_err *err);
/* The caller: checks the service's HELLO_OK (read into service): -EACCES when it does
 * not prove that it holds key; else its own proof, the AUTH, into auth. */
int kd_peer_check_answer(const kd_peer_key *key, const kd_phello *me, const kd_pmsg *ok,
                         kd_phello *service, ck__wbuf *auth, ck_err *err);
/* The service: checks the caller's AUTH; -EACCES when it does not prove that it holds
 * key. */
int kd_peer_check_auth(const kd_peer_key *key, const kd_phello *caller,
                       const kd_phello *me, const kd_pmsg *auth, ck_err *err);
/* The connection's session key, which both sides derive once the HELLOs are exchanged:
 * fresh for each connection (its nonces), never on the wire. */
void kd_peer_session(const kd_peer_key *key, const kd_phello *caller, const kd_phello *service,
                     uint8_t out[KD_PEER_KEY_LEN]);
/* The seal of a message: HMAC-SHA256(session, direction, seq, header, payload); -ENOMEM
 * when OpenSSL cannot compute it. */
int kd_peer_seal(const uint8_t session[KD_PEER_KEY_LEN], bool from_caller, uint64_t seq,
                 const uint8_t hdr[KD_PEER_HDR], const void *payload, size_t len,
                 uint8_t out[KD_PEER_SEAL_LEN]);

/* kd_peer_wire.c */
/* HELLO, or with ok HELLO_OK (which carries the proof); the reader goes by m's type. */
void kd_pw_hello(ck__wbuf *w, const kd_phello *h, bool ok);
int kd_pw_get_hello(const kd_pmsg *m, kd_phello *h, ck_err *err);
void kd_pw_auth(ck__wbuf *w, const uint8_t proof[KD_PEER_PROOF_LEN]);
int kd_pw_get_auth(const kd_pmsg *m, uint8_t proof[KD_PEER_PROOF_LEN], ck_err *err);
/* PUT and GET_OK (stream) and GET (ask). A PUT's manifest comes last (manifest_size
 * 0), a GET_OK's first: the other is refused. */
void kd_pw_stream(ck__wbuf *w, const kd_preq *q);
int kd_pw_get_stream(const kd_pmsg *m, kd_preq *q, ck_err *err);
/* MANIFEST: a PUT's manifest's size and SHA-256. */
void kd_pw_manifest(ck__wbuf *w, uint64_t size, const uint8_t sha256[CK_SHA256_LEN]);
int kd_pw_get_manifest(const kd_pmsg *m, uint64_t *size, uint8_t sha256[CK_SHA256_LEN],
                       ck_err *err);
void kd_pw_ask(ck__wbuf *w, const kd_preq *q);
int kd_pw_get_ask(const kd_pmsg *m, kd_preq *q, ck_err *err);
/* PUT_READY: the receiver's window. */
void kd_pw_window(ck__wbuf *w, uint32_t window);
int kd_pw_get_window(const kd_pmsg *m, uint32_t *window, ck_err *err);
/* PART: name, source, time_ns, manifest_sha256, token, files (names). */
void kd_pw_part(ck__wbuf *w, const kd_preq *q);
int kd_pw_get_part(const kd_pmsg *m, kd_preq *q, ck_err *err);
void kd_preq_free(kd_preq *q);
void kd_pw_error(ck__wbuf *w, const char *name, int code, const char *msg);
/* ERROR and ABORT (name "" for ABORT): what the peer said, into err. */
int kd_pw_get_error(const kd_pmsg *m, const char *peer, ck_err *err);
void kd_pw_abort(ck__wbuf *w, int code, const char *msg);
void kd_pw_name(ck__wbuf *w, const char *name);
int kd_pw_get_name(const kd_pmsg *m, char name[CK_NAME_MAX], ck_err *err);
void kd_pw_inventory(ck__wbuf *w, const kd_peer_copy *v, size_t n);
/* TIERS_OK (the client protocol): u32 peers, each str id, str address, i32 0 or -errno,
 * str why; u32 copies, each u8 where, str holder, a copy as INVENTORY_OK's. */
void kd_pw_tiers(ck__wbuf *w, const kd_tview *t);
int kd_pw_get_tiers(const void *p, size_t len, kd_tview *t, ck_err *err);
void kd_tview_free(kd_tview *t);
/* DRAIN_OK (the client protocol): u32 every, u64 rate, u32 n, each str name, u64 step,
 * u8 state, u64 done, u64 total, str why. */
void kd_pw_drains(ck__wbuf *w, const kd_drain_rows *d);
int kd_pw_get_drains(const void *p, size_t len, kd_drain_rows *d, ck_err *err);
void kd_peer_copies_free(kd_peer_copy *v, size_t n);
int kd_pw_get_inventory(const kd_pmsg *m, kd_peer_copy **out, size_t *n, ck_err *err);
const char *kd_pw_type_name(unsigned type);

/* kd_reply.c */
kd_client *kd_client_find(kd_server *s, uint64_t id);
/* Sends a whole message; a client that cannot take it now is dropped. */
void kd_send(kd_server *s, kd_client *c, ck__wbuf *w);
void kd_send_error(kd_server *s, kd_client *c, const char *name, int code, const char *msg);
/* ADMIT, DURABLE, COMMITTED: the checkpoint's name, then a and b where not NULL. */
/* COMMITTED: the name, the level reached, why it is lower than asked ("" if not). */
void kd_send_committed(kd_server *s, kd_client *c, const char *name, uint8_t level,
                       const char *note);
void kd_send_named(kd_server *s, kd_client *c, uint16_t type, const char *name,
                   const uint64_t *a, const uint64_t *b);

/* kd_log.c */
void kd_log(kd_server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kd_log_cb(void *arg, const char *msg);
/* CLOCK_MONOTONIC seconds. */
double kd_now(void);
/* A formatted line through a log callback (kd_log_cb, or a caller's), for the parts that
 * are handed a callback rather than the server; nothing when log is NULL. */
void kd_log_to(void (*log)(void *arg, const char *msg), void *arg, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* kd_parse.c */
/* Whether s is a decimal count in lo..hi: digits only (no sign, space or empty string),
 * stored in *out when it is. */
bool kd_decimal(const char *s, unsigned lo, unsigned hi, unsigned *out);

#endif
