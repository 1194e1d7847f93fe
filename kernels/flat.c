/* flat.c - copy-in, copy-out and chunk-cat over flat collective buffers (see flat.h). */
#include "flat.h"

#include <string.h>

static size_t chunk_of(size_t rows, size_t world)
{
    return rows / world + (rows % world != 0);
}

void k_chunk_rows(size_t rows, size_t world, size_t rank, size_t *off, size_t *len)
{
    size_t c = chunk_of(rows, world);
    /* rank < world, so rank * c <= rows + c cannot wrap for any real tensor. */
    size_t lo = rank * c < rows ? rank * c : rows;
    size_t hi = (rank + 1) * c < rows ? (rank + 1) * c : rows;
    *off = lo;
    *len = hi - lo;
}

size_t k_flat_layout(k_seg *seg, size_t nseg, size_t world)
{
    size_t off = 0;
    for (size_t i = 0; i < nseg; i++) {
        seg[i].flat_off = off;
        off += chunk_of(seg[i].rows, world) * seg[i].row_bytes;
    }
    return off;
}

static int host_copy(void *ctx, void *dst, const void *src, size_t n)
{
    (void)ctx;
    memcpy(dst, src, n);
    return 0;
}

static int host_zero(void *ctx, void *dst, size_t n)
{
    (void)ctx;
    memset(dst, 0, n);
    return 0;
}

const k_mem k_host_mem = {host_copy, host_zero, NULL};

/* Copies part `rank` of a tensor into its padded place in `slot`; the part starts at
 * row `src_row` of `src`. An empty part may come with a NULL src (an empty shard). */
static int put_part(const k_mem *mem, char *slot, const void *src, size_t src_row,
                    const k_seg *s, size_t world, size_t rank)
{
    size_t off, len;
    k_chunk_rows(s->rows, world, rank, &off, &len);
    size_t used = len * s->row_bytes;
    size_t padded = chunk_of(s->rows, world) * s->row_bytes;
    int rc = 0;
    if (used)
        rc = mem->copy(mem->ctx, slot + s->flat_off,
                       (const char *)src + src_row * s->row_bytes, used);
    if (!rc && padded > used)
        rc = mem->zero(mem->ctx, slot + s->flat_off + used, padded - used);
    return rc;
}

int k_ag_copy_in_on(const k_mem *mem, void *slot, const void *const *src, bool src_is_full,
                    const k_seg *seg, size_t nseg, size_t world, size_t rank)
{
    int rc = 0;
    for (size_t i = 0; !rc && i < nseg; i++) {
        size_t off = 0, len;
        if (src_is_full)
            k_chunk_rows(seg[i].rows, world, rank, &off, &len);
        rc = put_part(mem, slot, src[i], off, &seg[i], world, rank);
    }
    return rc;
}

int k_ag_copy_out_on(const k_mem *mem, void *const *dst, const void *flat,
                     size_t slot_bytes, const k_seg *seg, size_t nseg, size_t world)
{
    int rc = 0;
    for (size_t i = 0; !rc && i < nseg; i++) {
        for (size_t r = 0; !rc && r < world; r++) {
            size_t off, len;
            k_chunk_rows(seg[i].rows, world, r, &off, &len);
            if (len)
                rc = mem->copy(mem->ctx, (char *)dst[i] + off * seg[i].row_bytes,
                               (const char *)flat + r * slot_bytes + seg[i].flat_off,
                               len * seg[i].row_bytes);
        }
    }
    return rc;
}

int k_rs_chunk_cat_on(const k_mem *mem, void *flat, size_t slot_bytes,
                      const void *const *src, const k_seg *seg, size_t nseg, size_t world)
{
    int rc = 0;
    for (size_t r = 0; !rc && r < world; r++) {
        for (size_t i = 0; !rc && i < nseg; i++) {
            size_t off, len;
            k_chunk_rows(seg[i].rows, world, r, &off, &len);
            rc = put_part(mem, (char *)flat + r * slot_bytes, src[i], off, &seg[i], world, r);
        }
    }
    return rc;
}

void k_ag_copy_in(void *slot, const void *const *src, bool src_is_full, const k_seg *seg,
                  size_t nseg, size_t world, size_t rank)
{
    k_ag_copy_in_on(&k_host_mem, slot, src, src_is_full, seg, nseg, world, rank);
}

void k_ag_copy_out(void *const *dst, const void *flat, size_t slot_bytes, const k_seg *seg,
                   size_t nseg, size_t world)
{
    k_ag_copy_out_on(&k_host_mem, dst, flat, slot_bytes, seg, nseg, world);
}

void k_rs_chunk_cat(void *flat, size_t slot_bytes, const void *const *src, const k_seg *seg,
                    size_t nseg, size_t world)
{
    k_rs_chunk_cat_on(&k_host_mem, flat, slot_bytes, src, seg, nseg, world);
}
