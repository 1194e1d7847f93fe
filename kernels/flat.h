/* flat.h - the flat buffers of FSDP's collectives (copy-in, copy-out, chunk-cat).
 *
 * A group of tensors is all-gathered and reduce-scattered as one flat buffer of
 * `world` equal rank slots. Each tensor is cut on dim 0 as torch.chunk cuts it:
 * c = ceil(rows / world) rows per part, part r covering rows
 * [min(r*c, rows), min((r+1)*c, rows)), so trailing parts are short or empty. In the
 * flat buffer every part is padded with zeros to c rows so that all slots have the
 * same size (collectives need equal counts); the padding never leaves these buffers.
 *
 *   slot r = [ tensor 0 part r | pad ][ tensor 1 part r | pad ] ...
 *
 * The copies are byte copies: dtype casts are separate kernels (cast.h). They go
 * through a k_mem, so the same loops move host memory (libc) or device memory (the
 * CUDA runtime's asynchronous copies, kernels_cuda.h).
 */
#ifndef KERNELS_FLAT_H
#define KERNELS_FLAT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct k_seg {
    size_t rows;        /* dim-0 length of the full tensor (1 for a 0-D tensor) */
    size_t row_bytes;   /* bytes of one dim-0 row */
    size_t flat_off;    /* byte offset of this tensor's padded part in every slot */
} k_seg;

/* How bytes are copied and zeroed; 0 or a negative errno. */
typedef struct k_mem {
    int (*copy)(void *ctx, void *dst, const void *src, size_t n);
    int (*zero)(void *ctx, void *dst, size_t n);
    void *ctx;
} k_mem;

/* memcpy and memset. */
extern const k_mem k_host_mem;

/* The rows of part `rank` of `rows` cut into `world` parts (torch.chunk). */
void k_chunk_rows(size_t rows, size_t world, size_t rank, size_t *off, size_t *len);

/* Sets each seg's flat_off for `world` slots and returns the bytes of one slot. */
size_t k_flat_layout(k_seg *seg, size_t nseg, size_t world);

/* All-gather copy-in: part `rank` of each tensor into one slot, zero-padded.
 * src[i] holds tensor i's full rows when src_is_full, else only part `rank`. */
void k_ag_copy_in(void *slot, const void *const *src, bool src_is_full, const k_seg *seg,
                  size_t nseg, size_t world, size_t rank);

/* All-gather copy-out: from the gathered `world` slots into each full tensor dst[i]. */
void k_ag_copy_out(void *const *dst, const void *flat, size_t slot_bytes, const k_seg *seg,
                   size_t nseg, size_t world);

/* Reduce-scatter chunk-cat: each full tensor src[i] cut into the `world` slots,
 * zero-padded, ready for a reduce-scatter whose rank r receives slot r. */
void k_rs_chunk_cat(void *flat, size_t slot_bytes, const void *const *src, const k_seg *seg,
                    size_t nseg, size_t world);

/* The same three through `mem`: 0, or the first error of mem's calls. */
int k_ag_copy_in_on(const k_mem *mem, void *slot, const void *const *src, bool src_is_full,
                    const k_seg *seg, size_t nseg, size_t world, size_t rank);
int k_ag_copy_out_on(const k_mem *mem, void *const *dst, const void *flat,
                     size_t slot_bytes, const k_seg *seg, size_t nseg, size_t world);
int k_rs_chunk_cat_on(const k_mem *mem, void *flat, size_t slot_bytes,
                      const void *const *src, const k_seg *seg, size_t nseg, size_t world);

#endif
