/* ops/copy.h - a copy of a checkpoint as a byte stream, and back (private; docs/FORMAT.md,
 * "Copies").
 *
 * The stream of a copy of NAME is its manifest (the file, byte for byte), then the data
 * files it carries, whole, in the order declared: what ckptd's peer service sends
 * between nodes; or those data files first and the manifest last (a PUT's: its sender
 * may send a node's files before the save's manifest exists, decision 0204). The sender reads it from a committed copy (ck__copy_out); the receiver
 * writes it into a new copy (ck__copy_in) through the commit protocol: a pending
 * directory under the save's lock, every block of every data file checked against the
 * manifest's SHA-256 as it arrives (the manifest is the truth: a block that differs
 * fails the copy, naming the file and the block; the manifest itself is checked
 * against the SHA-256 its sender declared, read at ck__copy_out_open), the files fsynced, NAME/copy written
 * when the copy is partial, the structure verified, and one rename. Nothing of a copy
 * that fails, or whose writer dies, is visible: its pending directory is removed, or
 * is debris that recovery removes.
 */
#ifndef CK_OPS_COPY_H
#define CK_OPS_COPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ck/ckpt.h"
#include "format/manifest.h"
#include "io/hash.h"

/* The largest manifest a copy takes: the largest a reader opens. */
#define CK_COPY_MANIFEST_MAX CK__MANIFEST_MAX
/* The largest block size a copy whose manifest comes last declares. */
#define CK_COPY_BLOCK_MAX (1u << 30)

/* ---- receiving ---- */

typedef struct ck__copy_in ck__copy_in;

typedef struct ck__copy_in_opts {
    const char *root;              /* the copy is committed as ROOT/NAME */
    const char *name;
    const char *source;            /* the daemon whose data it is: NAME/copy's source */
    uint64_t manifest_size;        /* bytes of the manifest, the stream's first */
    /* What the manifest's bytes must hash to (SHA-256), as its sender declared it; NULL:
     * the manifest is taken as it comes (its own checks still hold). */
    const uint8_t *manifest_sha256;
    /* The manifest comes after the data files (manifest_size 0 and manifest_sha256 NULL
     * here; ck__copy_in_manifest declares them before its first byte): each data block,
     * cut at block_size (a power of two, 4096 to CK_COPY_BLOCK_MAX, the checkpoint's
     * own), is hashed as it arrives, its SHA-256 kept (32 bytes a block), and the
     * hashes are compared with the manifest's at the commit. Its data files may come in
     * any order (ck__copy_in_write_at). Neither joins nor is joined, nor follows
     * another attempt. */
    bool manifest_last;
    uint32_t block_size;
    const ck_file *files;          /* the data files that follow (name, size), in order */
    uint32_t n_files;
    void (*log)(void *arg, const char *msg);   /* warnings after the commit; may be NULL */
    void *log_arg;
    /* 0: ck__copy_in_write checks each block once it wrote it. K > 0: it only writes,
     * and K checkers (threads of the caller's) check the blocks, checker k those whose
     * index in their file is k modulo K (ck__copy_in_check). */
    unsigned checkers;
    /* One copy by several writers (a drain, decision 0197). The committer's data files
     * that other writers put in its pending directory: not in its stream; at its
     * commit each must be there, a regular file of the manifest's size, and is fsynced
     * (their writers checked every block). */
    const ck_file *joined;
    uint32_t n_joined;
    /* A writer that joins: the token of the committer's pending directory
     * (ck__copy_in_token). It takes no lock and makes no directory; its stream is as
     * any copy's, the manifest first (manifest_sha256 is required, and the pending
     * directory's manifest must hash to it too, or the writer refuses to write there),
     * then the declared files, each created there (never over a file that exists) and
     * every block checked. Its commit fsyncs them and commits nothing; its free
     * without a commit removes what it created, and only that. */
    const char *join;
    /* A committer's new attempt at a copy whose attempt `again` (begun, not committed,
     * not yet freed) failed: a drain whose part failed (decision 0199). Begin takes
     * over again's save lock rather than taking it, and makes a new pending directory
     * with a new token, so that a writer of the failed attempt that still runs can
     * touch only the old one. Files again's writers finished are carried over by
     * ck__copy_in_carry; freeing again then removes its directory and drops no lock. */
    ck__copy_in *again;
} ck__copy_in_opts;

/* Checks what is declared (names of files, each once; sizes; the manifest no larger
 * than CK_COPY_MANIFEST_MAX), takes NAME's save lock in ROOT and makes its pending
 * directory. -EBUSY while another writer has NAME; -EEXIST when ROOT/NAME exists. */
int ck__copy_in_begin(const ck__copy_in_opts *o, ck__copy_in **out, ck_err *err);
/* The next len bytes of the stream. Once the manifest is whole it is opened and every
 * declared file is checked against it (a file of the checkpoint, of its recorded size;
 * the checkpoint hashed and named NAME); without checkers each data block is checked
 * by the call that wrote its last byte. An error fails the copy: ck__copy_in_free is
 * all that is left to call. */
int ck__copy_in_write(ck__copy_in *c, const void *buf, size_t len, ck_err *err);
/* The same, of len bytes at stream offset at. A copy whose manifest comes first takes
 * its stream in order (at is where the bytes taken end). One whose manifest comes last
 * (a PUT's, decision 0206) takes its data files in any order, each file's bytes in
 * order (with O_DIRECT while the pieces are aligned, as a peer's are): a file is begun
 * (created) at its first bytes and ended (fsynced, closed) at its last, at most
 * CK_COPY_BEGUN_MAX begun and not ended at once; then the manifest, in order, once
 * declared. Bytes out of that order fail the copy (-EPROTO). */
int ck__copy_in_write_at(ck__copy_in *c, uint64_t at, const void *buf, size_t len,
                         ck_err *err);
/* The data file (of n, base[i] where file i begins in the stream, base[n] the data's
 * end) that holds stream offset at < base[n]. */
uint32_t ck__copy_file_at(const uint64_t *base, uint32_t n, uint64_t at);
/* The data files a copy whose manifest comes last has begun and not ended, at most:
 * the descriptors it holds open. */
#define CK_COPY_BEGUN_MAX 32u
/* A manifest that comes last: its size and SHA-256, declared once, on the thread that
 * writes, before its first byte is written. */
int ck__copy_in_manifest(ck__copy_in *c, uint64_t size, const uint8_t *sha256, ck_err *err);
/* Checker k (< opts.checkers) takes the stream's next len bytes: each data block of its
 * share is checked against the manifest's SHA-256 as its last byte comes. Every checker
 * takes the whole stream, in order, on a thread of its own, and each message only once
 * ck__copy_in_write returned for it (the manifest is then open). Independent of the
 * other checkers and of the writer: no lock is taken. */
int ck__copy_in_check(ck__copy_in *c, unsigned k, const void *buf, size_t len, ck_err *err);
/* The same, of the bytes that ck__copy_in_write_at took at stream offset at: each
 * checker takes them in the order the writer did. */
int ck__copy_in_check_at(ck__copy_in *c, unsigned k, uint64_t at, const void *buf, size_t len,
                         ck_err *err);
/* Carries data file NAME from the pending directory of opts.again into c's, by a hard
 * link through c's engine (its bytes are not written again): a file that again's
 * stream wrote whole, or that a joiner of again's said it wrote, each block checked as
 * it was written. It must be one of c's joined files, not yet in c's directory, and a
 * regular file there (a planted link is -ELOOP, never followed); it is checked at c's
 * commit as they are (a regular file of its size, fsynced). */
int ck__copy_in_carry(ck__copy_in *c, const ck__copy_in *again, const char *name, ck_err *err);
/* The token of c's pending directory (ROOT/.pending/NAME.TOKEN), for its joiners. */
const char *ck__copy_in_token(const ck__copy_in *c);
/* Bytes of the stream still expected. */
uint64_t ck__copy_in_left(const ck__copy_in *c);
/* The whole stream arrived (and was checked by every checker): fsyncs, writes NAME/copy when the copy holds fewer files
 * than the manifest, verifies the structure, commits by rename. 0 once the rename
 * happened (a failed fsync of ROOT or catalog entry after it is logged, as a save's). */
int ck__copy_in_commit(ck__copy_in *c, ck_err *err);
/* Frees c; a copy not committed leaves nothing: its pending directory is removed and
 * NAME's lock dropped. */
void ck__copy_in_free(ck__copy_in *c);

/* ---- sending ---- */

typedef struct ck__copy_out {
    ck_info info;
    ck_copy copy;                  /* of the copy it reads: complete, or whose */
    uint64_t manifest_size;
    uint8_t manifest_sha256[CK_SHA256_LEN];    /* of the manifest's bytes, read at open */
    ck_file *files;                /* the data files it sends, in order */
    uint32_t n_files;
    uint64_t total;                /* the stream's bytes */
    struct ck__copy_out_state *st;
} ck__copy_out;

/* Opens the copy ROOT/NAME to send: its manifest, then the data files named (n of
 * them, each at most once), or, with names NULL, every data file it holds. Each must be
 * in the copy, a regular file of its recorded size. -ENOENT for no such checkpoint;
 * -ENODATA for a file the copy does not hold, naming it. */
int ck__copy_out_open(const char *root, const char *name, const char *const *names,
                      uint32_t n, ck__copy_out **out, ck_err *err);
/* Before the stream's first byte is taken: the stream is the data files, then the
 * manifest (a PUT's order, for a receiver that takes the manifest last:
 * ck__copy_in_opts.manifest_last). */
void ck__copy_out_manifest_last(ck__copy_out *c);
/* The next bytes of the stream into buf: *got == len but at its end. With buf and len
 * aligned to CK_COPY_OUT_ALIGN, a data file's bytes are read with O_DIRECT (not through
 * the page cache) where its file system takes it. */
int ck__copy_out_read(ck__copy_out *c, void *buf, size_t len, size_t *got, ck_err *err);
/* The alignment of a buffer, an offset and a length that O_DIRECT takes. */
#define CK_COPY_OUT_ALIGN 4096u
/* Sets O_DIRECT on fd where its file system takes it; whether it did. A copy's data
 * files were written with O_DIRECT, so their bytes are not in the page cache, and a
 * buffered read of them pays for filling it: a copy into the cache and another out,
 * the pages charged and reclaimed (docs/decisions/0186 and 0203). */
bool ck__direct_on(int fd);
/* Before an I/O of len bytes at off into buf: *direct says fd's file description is
 * O_DIRECT; a buffer, offset or length not aligned to CK_COPY_OUT_ALIGN turns the flag
 * off, for every descriptor of that description, and *direct with it. 0 or -errno. */
int ck__direct_fit(int fd, bool *direct, const void *buf, size_t len, uint64_t off);
/* Reads len bytes of fd at off into buf, whole (EINTR and short reads go on), with
 * O_DIRECT where ck__direct_fit lets it. 0, -errno, or -EBADMSG where the file ends
 * first. */
int ck__copy_pread(int fd, bool *direct, void *buf, size_t len, uint64_t off);
/* The next piece of the stream, cut ahead of its read so that several pieces can be
 * read at once (a peer sender's read-ahead): at most max bytes of one item (the
 * manifest or a data file), never past its end, with a descriptor of its own. */
typedef struct ck__copy_cut {
    int fd;                        /* -1 at the stream's end (len 0) */
    uint32_t item;                 /* 0: the manifest; i + 1: data file i */
    uint64_t off;
    size_t len;
    bool direct;                   /* fd's file is O_DIRECT */
} ck__copy_cut;
/* k->len 0 at the stream's end. Cuts are taken in stream order, one at a time (the
 * caller serializes them); each is then read (or dropped) on its own, from any thread. */
int ck__copy_out_cut(ck__copy_out *c, size_t max, ck__copy_cut *k, ck_err *err);
/* Reads k into buf (k->len bytes; with O_DIRECT when buf, k's offset and length are
 * aligned to CK_COPY_OUT_ALIGN), and drops k. */
int ck__copy_cut_read(const ck__copy_out *c, ck__copy_cut *k, void *buf, ck_err *err);
void ck__copy_cut_drop(ck__copy_cut *k);
void ck__copy_out_close(ck__copy_out *c);

/* ---- the same save elsewhere ---- */

/* Whether ROOT THERE holds NAME whole (not a partial copy) and of the save of HERE's
 * copy of it (its commit time: a drain copies the manifest byte for byte): 1 yes, 0 no
 * (nothing readable there), -1 when HERE holds no copy of NAME (retention took it).
 * What a tiered save's engine and a daemon standing by for a drain ask of the durable
 * root. */
int ck__copy_whole_in(const char *here, const char *there, const char *name);

#endif
