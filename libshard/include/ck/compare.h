/* ck/compare.h - do two checkpoints hold the same model, whatever their meshes?
 *
 * Compares the logical tensors of two checkpoints: the same names, dtypes and shapes,
 * and every element bit for bit (so -0.0 differs from 0.0 and a NaN equals the same
 * NaN). Each full tensor is streamed from both sides in matching row-major byte
 * ranges through ck_reader, so memory stays within mem_limit whatever the tensor and
 * however either side is sharded. Each difference is reported as one line; for a
 * tensor whose elements differ, the line names the first differing element by its
 * global index and coordinates and shows both values.
 */
#ifndef CK_COMPARE_H
#define CK_COMPARE_H

#include <stdint.h>

#include "ck/ckpt.h"

typedef struct ck_compare_opts {
    uint64_t mem_limit;        /* read buffers of both sides together; 0: 64 MiB */
    void (*diff)(void *arg, const char *msg);
    void (*progress)(void *arg, uint64_t done, uint64_t total);
    void *cb_arg;
} ck_compare_opts;

typedef struct ck_compare_result {
    uint64_t tensors;          /* names seen on either side */
    uint64_t differing;        /* tensors missing on a side, or of another dtype, shape
                                  or content */
    uint64_t bytes_compared;   /* per side */
} ck_compare_result;

/* Returns 0 when the comparison ran (res->differing says whether they differ), or an
 * error that stopped it (I/O, a bad checkpoint, memory). */
CK_API int ck_compare(ck_ckpt *a, ck_ckpt *b, const ck_compare_opts *o, ck_compare_result *res,
                      ck_err *err);

#endif
