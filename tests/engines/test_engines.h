/* test_engines.h - the engines the tests wrap around the real one: fault injection
 * and recording (tests/engines/).
 *
 * They implement the core's engine interface (ck/engine.h) and are built for tests
 * only, as SQLite's test VFS is: the product library, ckptd and the tools carry none
 * of this. The test build of the daemon (ckptd-test, tests/ckptd/meson.build) links
 * them for its --inject-fault.
 */
#ifndef CK_TEST_ENGINES_H
#define CK_TEST_ENGINES_H

#include "ck/engine.h"

/* ---- fault injection (the crash tests and ckptd-test's --inject-fault) ---- */

typedef enum ck_fault_kind {
    CK_FAULT_NONE = 0,
    CK_FAULT_EIO,      /* the N-th operation fails with -EIO */
    CK_FAULT_ENOSPC,   /* the N-th operation fails with -ENOSPC */
    CK_FAULT_SHORT,    /* the first data write of >= 8 KiB at or after N moves half its bytes */
    CK_FAULT_FSYNC,    /* the first fsync at or after N fails with -EIO */
    CK_FAULT_CRASH,    /* operation N and all after it do nothing and fail (-ECANCELED):
                          the process "died" and left the disk as it was */
    CK_FAULT_SLOW,     /* the first fsync at or after N takes CK_FAULT_SLOW_S longer, then
                          succeeds: a disk slow to flush, which holds its save back */
} ck_fault_kind;

#define CK_FAULT_SLOW_S 5

typedef struct ck_fault {
    ck_fault_kind kind;
    uint64_t at;       /* 0-based operation index */
} ck_fault;

/* Parses "eio@17", "enospc@3", "short@0", "fsync@0", "crash@42", "slow@0". */
int ck_fault_parse(const char *s, ck_fault *out);

/* Wraps inner. Every call counts as one operation, each data I/O in a queue
 * submission too. Thread-safe. */
int ck_engine_fault_new(ck_engine *inner, ck_fault fault, ck_engine **out);
/* Operations counted so far, and whether the fault has fired. */
uint64_t ck_engine_fault_ops(ck_engine *e);
bool ck_engine_fault_fired(ck_engine *e);

/* ---- recording (the power-loss crash test, tests/ckpt/test_crash_states.c) ---- */

typedef enum ck_rec_kind {
    CK_REC_CREATE,     /* path: a new file */
    CK_REC_MKDIR,      /* path */
    CK_REC_RENAME,     /* path -> to */
    CK_REC_LINK,       /* path -> to */
    CK_REC_UNLINK,     /* path */
    CK_REC_RMDIR,      /* path */
    CK_REC_FALLOCATE,  /* path, len: the file's size */
    CK_REC_WRITE,      /* path, off, len, data */
    CK_REC_FSYNC,      /* path: a file or a directory */
    CK_REC_STEP,       /* path: the name of a durable step done by other code */
} ck_rec_kind;

typedef struct ck_rec_op {
    ck_rec_kind kind;
    char *path, *to;
    uint64_t off, len;
    void *data;
} ck_rec_op;

/* Wraps inner and records every operation that changes the disk, in order, with the
 * bytes of every write (engine_record.c says what is recorded). Thread-safe. */
int ck_engine_record_new(ck_engine *inner, ck_engine **out);
/* The record so far (valid until the next operation or destroy); -ENOMEM if a record
 * was lost. */
int ck_engine_record_ops(ck_engine *e, const ck_rec_op **ops, size_t *n);

#endif
