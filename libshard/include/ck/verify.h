/* ck/verify.h - checking a checkpoint, structurally and (deep) byte by byte.
 *
 * Structure: the version is known; every record decodes; every data file exists
 * with its recorded size; every extent lies inside its file and no two overlap;
 * every shard's box is the one its placements give its mesh coordinate; and every
 * element of every tensor is covered by exactly one saved shard. Deep: every block
 * of every data file is re-read and re-hashed in parallel and compared with the
 * manifest; a mismatch names the tensors whose bytes lie in that block.
 *
 * Every problem found is reported, not only the first.
 */
#ifndef CK_VERIFY_H
#define CK_VERIFY_H

#include <stdbool.h>
#include <stdint.h>

#include "ck/ckpt.h"

typedef struct ck_verify_opts {
    bool deep;
    unsigned threads;          /* hash threads; 0: one per online CPU */
    uint64_t mem_limit;        /* read buffers; 0: 64 MiB */
    void (*problem)(void *arg, const char *msg);
    void (*progress)(void *arg, uint64_t done, uint64_t total);
    void *cb_arg;
} ck_verify_opts;

typedef struct ck_verify_result {
    uint64_t problems;
    uint64_t tensors, shards, files;
    uint64_t blocks_hashed, bytes_hashed;
    double deep_seconds;
    bool unhashed;             /* deep asked, but the checkpoint has no hashes */
} ck_verify_result;

/* Returns 0 when the checks ran (res->problems says what they found), or an error
 * that stopped them (I/O, memory). */
CK_API int ck_verify(ck_ckpt *ck, const ck_verify_opts *o, ck_verify_result *res, ck_err *err);

#endif
