/* async/client_int.h - the client's state and its transports (private to the core).
 *
 * A save's part goes through the same steps whatever carries it: join (declare the
 * part; the engine may hold it back while its staging memory is full), copy into the
 * staging memfd laid out as the rank's data file (the only stall, client.c), stage
 * (hand it over), and for rank 0 commit. client.c owns those steps and the save's
 * states, client_slots.c the staging areas; a transport only carries the steps to an
 * engine and brings the engine's news back as state changes:
 *
 *   client_embedded.c   the engine on threads of this process, shared by the ranks
 *                       that are threads of it; news arrive as saver events
 *   client_connected.c  ckptd over its Unix socket; news arrive as replies
 *
 * so no function of client.c asks which transport it runs on.
 */
#ifndef CK_ASYNC_CLIENT_INT_H
#define CK_ASYNC_CLIENT_INT_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "async/proto.h"
#include "ck/client.h"
#include "io/staging.h"
#include "model/plan.h"
#include "save/image.h"

#define CK_CLIENT_SLOTS 2       /* staging areas per client: double buffering */
#define CK_CLIENT_MAX_WAIT 86400 /* s: the largest time limit on ckptd */

typedef struct ck__client_slot {
    int fd;                     /* the memfd, -1 when none */
    uint8_t *map;
    uint64_t size;
    ck__staging_pages pages;
    ck_client_save *user;       /* the save whose part it holds, until durable */
    bool hooked;                /* opts.staging_mapped accepted this mapping */
    /* Embedded: given up while the engine's writes from it had not finished (storage
     * that hangs): never reused and never unmapped, since a write may still resume. */
    bool lost;
} ck__client_slot;

typedef struct ck__client_transport ck__client_transport;
typedef struct ck__client_hub ck__client_hub;

struct ck_client {
    const ck__client_transport *t;
    char root[PATH_MAX];
    ck__client_slot slots[CK_CLIENT_SLOTS];
    unsigned next_slot;
    bool small_pages;           /* opts.small_pages */
    bool pages_logged;          /* the staging's page size was logged */
    void (*log)(void *arg, const char *msg);
    void *log_arg;
    int (*staging_mapped)(void *arg, void *base, size_t len);     /* opts' */
    void (*staging_unmapping)(void *arg, void *base, size_t len);
    void *staging_arg;
    /* Staging made ahead (ck_client_reserve): a thread maps the slots of reserve_mask,
     * which no save holds, to reserve_bytes. Whatever touches the slots joins it first. */
    pthread_t reserver;
    bool reserving;
    unsigned reserve_mask;
    uint64_t reserve_bytes;
    /* The save whose copy runs on a thread (a lazy submit), until fenced: every call
     * that uses the engine fences it first, so the client keeps one user thread. */
    ck_client_save *lazy;
    /* Embedded: */
    ck__client_hub *hub;
    /* Connected: */
    char sock_path[108];
    int sock;                   /* -1 until connected */
    uint32_t nodes;             /* opts.nodes or $CKPTD_NODES: the daemons of the job */
    bool dead;                  /* the connection broke: every save failed */
    int dead_code;              /* and why, for the calls made on it since */
    char dead_msg[CK_ERR_MSG_MAX];
    ck_client_save *saves;      /* this client's saves, for replies */
    /* The time limits (docs/PROTOCOL.md, "Time limits"). Embedded, both are the part
     * timeout and some: the engines' own bounds end a save first, with its reason;
     * these end only the waits on writes that never return. */
    double timeout;             /* s: HELLO, ADMIT, a message taken, ckptd's silence */
    double commit_timeout;      /* s: a part made durable, a save committed */
    pid_t daemon_pid;           /* SO_PEERCRED at connect, for the errors */
    double heard;               /* ck__conn_now() of ckptd's last message */
    double probe_sent;          /* of the STATUS asking whether it is alive; 0: none */
    /* The wait in progress (ck__client_wait_for): its deadline, limit, and what for. */
    double wait_until, wait_limit;
    const char *waiting_for;
};

/* A synchronous part's sources as an embedded engine reads them (CK_SUBMIT_SYNC):
 * every read takes the lock shared and checks gone, so that once the client stops
 * waiting for a write that never returns, no late read touches memory the caller got
 * back. Freed with the save; once given up, with the engine (which may still call in). */
typedef struct ck__client_direct ck__client_direct;
typedef struct ck__direct_src {
    ck__client_direct *d;
    const uint8_t *mem;
} ck__direct_src;
struct ck__client_direct {
    pthread_rwlock_t lock;
    bool gone;
    uint32_t n;
    ck__shard_src *src;          /* what the engine gets: guarded copies of args */
    ck__direct_src *args;
    ck__client_direct *next;     /* in the engine's list of given-up guards */
};

struct ck_client_save {
    ck_client *cl;
    ck__begin b;                /* what the engine is told: the save, the declaration, ... */
    const ck__plan *plan;       /* the declaration's */
    ck__shard_src *src;         /* per plan shard: where this rank's bytes come from */
    uint32_t cap_b;
    uint8_t **blob_data;        /* per blob, copies */
    ck_client_state state;
    bool admitted;
    uint64_t image_bytes;       /* from the engine, checked against the plan */
    int code;
    char msg[CK_ERR_MSG_MAX];
    int slot;                   /* -1: none */
    uint64_t image, total;      /* what the part takes of its slot: the image, with blobs */
    ck_submit how;              /* the submit's callbacks (its sources are in src) */
    pthread_t copier;           /* a lazy submit: the thread that copies and stages */
    bool copying;               /* until the fence joined it */
    bool grew;                  /* its slot was made for it: the other one is made after */
    /* Rank 0's commit asked for while the copier runs: the copier asks for it once the
     * part is staged (ck__client_lazy_commit), so that ck_client_commit never waits for
     * the copy. */
    atomic_int lazy_commit;
    int lazy_rc;                /* the copier's outcome */
    ck_err lazy_err;
    ck__client_direct *direct;  /* a synchronous part's sources, or NULL */
    uint8_t reached;            /* COMMITTED: the level reached (ck_level) */
    char note[CK_ERR_MSG_MAX];  /* and why it is lower than asked, or "" */
    bool listed;
    ck_client_save *next;       /* in the transport's list of saves */
};

/* What carries a client's parts to an engine. State changes it reports go through
 * ck__client_set_state with the transport's lock held. */
struct ck__client_transport {
    bool connected;
    /* The lock that orders the saves' states with the engine's news. */
    void (*lock)(ck_client *cl);
    void (*unlock)(ck_client *cl);
    /* With the lock held: blocks until some news may have arrived. Negative when no
     * news ever will (the connection broke, and every save of it has failed). */
    int (*await)(ck_client *cl);
    /* Takes in the news that arrived, without blocking. */
    void (*poll)(ck_client *cl);
    /* The list of saves the engine's news are matched against. */
    ck_client_save **(*saves)(ck_client *cl);
    /* Declares sv's part with its staging area; returns once the engine admitted it
     * (sv->admitted, sv->image_bytes) or refused it. */
    int (*join)(ck_client_save *sv, const ck__client_slot *s, ck_err *err);
    /* The staging area holds the part: the engine may write it. */
    int (*stage)(ck_client_save *sv, const ck__client_slot *s, ck_err *err);
    /* The part is in sv->direct's sources and blobs (back to back): the engine reads
     * them as it writes. NULL where the engine cannot read this process's memory. */
    int (*stage_sources)(ck_client_save *sv, const void *blobs, ck_err *err);
    int (*commit)(ck_client_save *sv, ck_err *err);
    /* Lets go of the engine (the slots are already free). */
    void (*close)(ck_client *cl);
    /* Where the engine was given up (connected: ckptd did not answer in time), makes
     * a new link to it for the next save; NULL where there is nothing to redo. */
    int (*revive)(ck_client *cl, ck_err *err);
};

/* Each opens cl on its transport (cl->t set) or fails with err; cl is closed by the
 * caller either way. The connected one connects within cl->timeout. */
int ck__client_open_embedded(ck_client *cl, const char *root, const ck_client_opts *o,
                             ck_err *err);
int ck__client_open_connected(ck_client *cl, const char *sock, const char *root,
                              ck_err *err);

enum { CK__LAZY_RUNNING = 0, CK__LAZY_COMMIT_ASKED, CK__LAZY_DONE };

/* ---- client_state.c: what a transport may do to a client ---- */

/* COMMITTED at level (ck_level), with the engine's note (NULL: none). */
void ck__client_committed(ck_client_save *sv, uint8_t level, const char *note);
/* Moves sv forward to st (or to FAILED with code and msg); states never go back. */
void ck__client_set_state(ck_client_save *sv, ck_client_state st, int code, const char *msg);
/* Blocks until done(cl, arg) holds, taking in the engine's news meanwhile. Connected,
 * for at most limit seconds (and while ckptd answers): past it the connection is given
 * up and every save of it fails, naming what (e.g. "the commit") it waited for. */
void ck__client_wait_for(ck_client *cl, bool (*done)(ck_client *, const void *),
                         const void *arg, double limit, const char *what);
/* sv's part was handed over on a link now given up: the engine may still read its
 * staging, so this client never writes that memory again (it makes a new one). */
void ck__client_forsake(ck_client_save *sv);
/* sv's synchronous part was given up while the engine may still read its sources:
 * the reads that follow fail instead, and the guard goes onto *keep, to be freed with
 * the engine. */
void ck__client_direct_forsake(ck_client_save *sv, ck__client_direct **keep);
void ck__client_direct_free(ck__client_direct *d);

/* ---- client_slots.c: the staging areas ---- */

/* Unmaps s's memory (the engine may keep its own mapping); its user stays. A lost slot
 * is left mapped for good. */
void ck__client_slot_release(ck_client *cl, ck__client_slot *s);
/* Gives s a staging memfd of at least need bytes, every page faulted in. */
int ck__slot_map(ck_client *cl, ck__client_slot *s, uint64_t need, ck_err *err);
/* Picks a slot that no save holds for sv; -1 when none is free. */
int ck__slot_take(ck_client_save *sv);
/* Whether some slot is free (ck__client_wait_for), and whether every one is: no slot is
 * held by a part that is not durable yet. */
bool ck__slots_any_free(ck_client *cl, const void *arg);
/* Maps, on a thread, every slot that no save holds and that is smaller than bytes;
 * ck__slots_join waits for it. Nothing else touches those slots meanwhile. */
void ck__slots_reserve(ck_client *cl, uint64_t bytes);
void ck__slots_join(ck_client *cl);
bool ck__slots_all_free(ck_client *cl, const void *arg);

#endif
