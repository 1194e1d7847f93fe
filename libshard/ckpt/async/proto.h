/* async/proto.h - the ckptd wire protocol, shared by the client and the daemon (private).
 *
 * Every message is a 16-byte header followed by its payload, little-endian:
 *   u32 magic "CKD1" | u16 version | u16 type | u32 payload length | u32 zero
 * The payload is built with ck__wbuf and parsed with ck__rbuf (enc.h), so a reader
 * never trusts a length. Decoders check every count against the hard limits below
 * before allocating; names, meshes and dtypes are checked by the daemon
 * (ckptd/kd_proto.c) and again by the core when the save is declared. The protocol
 * is documented in docs/PROTOCOL.md; bump CK_PROTO_VERSION on any change.
 */
#ifndef CK_ASYNC_PROTO_H
#define CK_ASYNC_PROTO_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "ck/ckpt.h"
#include "ck/client.h"
#include "ck/decl.h"
#include "format/enc.h"

#define CK_PROTO_MAGIC   0x31444b43u      /* "CKD1" */
#define CK_PROTO_VERSION 8
#define CK_PROTO_HDR     16
#define CK_PROTO_MAX_MSG (16u << 20)      /* payload bytes */
#define CK_PROTO_MAX_TENSORS (1u << 18)
#define CK_PROTO_MAX_BLOBS 4096u
#define CK_PROTO_MAX_BOXES (1u << 20)     /* boxes of all box-list tensors of a BEGIN */
#define CK_PROTO_MAX_NODES 4096u         /* daemons taking part in one save */
#define CK_PROTO_MAX_FILES (1u << 20)     /* data files a FETCH names */

enum ck__msg_type {
    /* client -> daemon */
    CK_MSG_HELLO = 1,     /* str root ("" : any) */
    CK_MSG_BEGIN = 2,     /* ck__begin; the staging memfd rides along (SCM_RIGHTS) */
    CK_MSG_STAGED = 3,    /* str name, u64 rank: the staging area holds the part */
    CK_MSG_COMMIT = 4,    /* str name: rank 0 asks for the commit */
    CK_MSG_STATUS = 5,    /* empty */
    CK_MSG_RESOLVE = 6,   /* str what, u8 newest (1: what is a prefix PREFIX<step>) */
    CK_MSG_FETCH = 7,     /* str name, u32 n, n x str data file (n = 0: the manifest) */
    CK_MSG_TIERS = 8,     /* str name ("": every checkpoint) */
    CK_MSG_DRAIN = 9,     /* str name ("": none, the state alone), u8 offer (1: as the
                           * save path offers a replicated save: the policy decides) */
    /* daemon -> client */
    CK_MSG_HELLO_OK = 64, /* str root, u64 staging limit */
    CK_MSG_ADMIT = 65,    /* str name, u64 rank, u64 image bytes: copy now */
    CK_MSG_DURABLE = 66,  /* str name, u64 rank: the part is on disk, staging free */
    CK_MSG_COMMITTED = 67,/* str name, u8 level reached, str note (why not the asked) */
    CK_MSG_ERROR = 68,    /* str name ("" : the connection), i32 -errno, str message */
    CK_MSG_STATUS_OK = 69,/* ck__proto_status */
    CK_MSG_RESOLVE_OK = 70, /* str name, u64 step, u64 time, str why ("": the newest saved) */
    CK_MSG_FETCH_OK = 71, /* str name, u32 n, n x str directory of a copy, nearest first */
    CK_MSG_TIERS_OK = 72, /* where each copy is (ckptd/kd_peer_wire.c, kd_pw_tiers) */
    CK_MSG_DRAIN_OK = 73, /* the drains' state (ckptd/kd_peer_wire.c, kd_pw_drains) */
};

typedef struct ck__begin_blob {
    char name[CK_NAME_MAX];
    uint64_t len;
} ck__begin_blob;

/* One rank's part of a save, as its BEGIN says it: which save (the name and the job),
 * the declaration every rank of it shares (held by reference: the saver neither
 * copies nor replays it), which rank, and what it brings: its blobs, whose bytes
 * follow the rank's file image in its staging area, packed in order, and the area. */
typedef struct ck__begin {
    char name[CK_NAME_MAX];
    uint64_t step;
    ck_decl *decl;
    uint64_t rank;
    bool no_hash;
    uint32_t nblobs;
    ck__begin_blob *blobs;
    uint64_t staging_size;   /* bytes of the staging memfd */
    /* The daemons that serve the save's ranks, one per node (docs/FORMAT.md, "Saves
     * served by several daemons"); 0 and 1 both mean one daemon serves every rank. */
    uint32_t nodes;
    /* The job whose save this is (ck/client.h): with the name, what ranks must share to
     * be parts of one save. */
    ck_job_id job;
    /* The commit level the rank waits for (ck_level, ck/client.h; 0: the engine's
     * default). Every rank of a save asks for the same. */
    uint8_t level;
} ck__begin;

/* The world of the save b is a part of: its declaration's mesh. */
uint64_t ck__begin_world(const ck__begin *b);

/* Whether job is a job id at all (not all zero). */
bool ck__job_set(const ck_job_id *job);
/* Whether a and b are one job. */
bool ck__job_same(const ck_job_id *a, const ck_job_id *b);
/* The job id in lowercase hex (CK_JOB_HEX_MAX bytes with the NUL), as the meeting's
 * plan and a save's lock name it. */
void ck__job_hex(const ck_job_id *job, char *out);

/* Frees what b holds (its reference to the declaration, its blobs). */
void ck__begin_free(ck__begin *b);
/* Bytes of the blobs, and whether their sum overflows. */
bool ck__begin_blob_bytes(const ck__begin *b, uint64_t *out);

/* Starts a message in w (reserving the header); ck__proto_end fills the header in:
 * 0, -ENOMEM, or -EMSGSIZE for a payload over CK_PROTO_MAX_MSG. */
void ck__proto_start(ck__wbuf *w, uint16_t type);
int ck__proto_end(ck__wbuf *w);

/* Checks a header; -EPROTO with a message for a bad magic, -EPROTONOSUPPORT for
 * another version, -EMSGSIZE past CK_PROTO_MAX_MSG. */
int ck__proto_header(const uint8_t hdr[CK_PROTO_HDR], uint16_t *type, uint32_t *len,
                    ck_err *err);

void ck__proto_put_begin(ck__wbuf *w, const ck__begin *b);
/* Decodes a BEGIN payload: -EBADMSG (truncated, trailing bytes, counts over the
 * limits), or the declaration's own refusal (a tensor it cannot declare, named). The
 * declaration is not sealed: what sealing checks (layouts, tilings) is the planner's.
 * b is freed on error. */
int ck__proto_get_begin(const void *p, size_t len, ck__begin *b, ck_err *err);

/* A status row: one save in flight. */
typedef struct ck__proto_ckpt {
    char name[CK_NAME_MAX];
    ck_job_id job;                 /* the daemon's own: not on the wire */
    uint64_t world, joined, staged, durable;
    uint64_t bytes_staged, bytes_written;
    uint64_t bytes_per_s;
    uint32_t clients;
    uint8_t commit_requested, state;
} ck__proto_ckpt;

typedef struct ck__proto_status {
    uint64_t staging_limit, staging_used;
    uint32_t clients, waiting;     /* connected; waiting for staging room */
    uint32_t n;
    ck__proto_ckpt *ckpts;
} ck__proto_status;

void ck__proto_put_status(ck__wbuf *w, const ck__proto_status *s);
int ck__proto_get_status(const void *p, size_t len, ck__proto_status *s, ck_err *err);

/* ---- restoring from the tiers (proto_restore.c; docs/PROTOCOL.md, "Restoring") ----
 * RESOLVE, FETCH and TIERS are decoded with every field checked: names as a save's
 * (ck_name_check), a prefix as the start of one, data files as plain file names, at
 * most CK_PROTO_MAX_FILES of them; their replies' directories are absolute paths, at
 * most CK_COPIES_MAX. */
typedef struct ck__restore_req {
    char name[CK_NAME_MAX];     /* RESOLVE: the name, or the prefix; FETCH, TIERS: the name */
    bool newest;                /* RESOLVE: the newest PREFIX<step> that can be restored */
    uint32_t n;                 /* FETCH: the data files wanted */
    char (*files)[CK_FILE_NAME_MAX];
} ck__restore_req;

void ck__proto_put_restore(ck__wbuf *w, uint16_t type, const ck__restore_req *q);
/* type is RESOLVE, FETCH or TIERS; -EBADMSG naming the field (q freed on error). */
int ck__proto_get_restore(uint16_t type, const void *p, size_t len, ck__restore_req *q,
                          ck_err *err);
void ck__restore_req_free(ck__restore_req *q);

/* RESOLVE_OK: the checkpoint to restore and, when it is not the newest saved, why. */
typedef struct ck__restore_pick {
    char name[CK_NAME_MAX];
    uint64_t step, time_ns;
    char why[CK_ERR_MSG_MAX];
} ck__restore_pick;
void ck__proto_put_pick(ck__wbuf *w, const ck__restore_pick *k);
int ck__proto_get_pick(const void *p, size_t len, ck__restore_pick *k, ck_err *err);

/* FETCH_OK: the directories of the copies to open, nearest first (ck_open_copies). */
typedef struct ck__restore_dirs {
    char name[CK_NAME_MAX];
    uint32_t n;
    char (*dirs)[PATH_MAX];
} ck__restore_dirs;
void ck__proto_put_dirs(ck__wbuf *w, const ck__restore_dirs *d);
int ck__proto_get_dirs(const void *p, size_t len, ck__restore_dirs *d, ck_err *err);
void ck__restore_dirs_free(ck__restore_dirs *d);

/* ---- the client's side of the socket (client_conn.c) ---- */

typedef struct ck__msg {
    uint16_t type;
    uint32_t len;
    uint8_t *payload;          /* malloc'd, len bytes */
} ck__msg;

/* CLOCK_MONOTONIC seconds, the clock of the deadlines below (INFINITY: none). */
double ck__conn_now(void);
/* Connects to ckptd's socket; -ETIMEDOUT when its backlog stays full past deadline. */
int ck__conn_connect_by(const char *path, double deadline, int *fd, ck_err *err);
int ck__conn_connect(const char *path, int *fd, ck_err *err);
/* Sends one whole message (a ck__proto_end'ed buffer), with fd attached when >= 0;
 * -ETIMEDOUT when the daemon has not taken all of it by deadline (INFINITY: none). */
int ck__conn_send_by(int sock, const ck__wbuf *w, int fd, double deadline, ck_err *err);
int ck__conn_send(int sock, const ck__wbuf *w, int fd, ck_err *err);
/* Reads one message: 1; 0 when none began by start_by; -ETIMEDOUT when one began but
 * was not whole by finish_by; or -errno (-ECONNRESET when the daemon closed the
 * connection). */
int ck__conn_recv_by(int sock, double start_by, double finish_by, ck__msg *m, ck_err *err);
/* The same without deadlines: blocking, or (block false) 0 when none is waiting. */
int ck__conn_recv(int sock, bool block, ck__msg *m, ck_err *err);

#endif
