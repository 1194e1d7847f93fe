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

/* Copies part `rank` of a tensor into its padded place in `slot`; the part starts at
 * row `src_row` of `src`. An empty part may come with a NULL src (an empty shard). */
static void put_part(char *slot, const void *src, size_t src_row, const k_seg *s,
                     size_t world, size_t rank)
{
    size_t off, len;
    k_chunk_rows(s->rows, world, rank, &off, &len);
    size_t used = len * s->row_bytes;
    size_t padded = chunk_of(s->rows, world) * s->row_bytes;
    if (used)
        memcpy(slot + s->flat_off, (const char *)src + src_row * s->row_bytes, used);
    memset(slot + s->flat_off + used, 0, padded - used);
}

void k_ag_copy_in(void *slot, const void *const *src, bool src_is_full, const k_seg *seg,
                  size_t nseg, size_t world, size_t rank)
{
    for (size_t i = 0; i < nseg; i++) {
        size_t off = 0, len;
        if (src_is_full)
            k_chunk_rows(seg[i].rows, world, rank, &off, &len);
        put_part(slot, src[i], off, &seg[i], world, rank);
    }
}

void k_ag_copy_out(void *const *dst, const void *flat, size_t slot_bytes, const k_seg *seg,
                   size_t nseg, size_t world)
{
    for (size_t i = 0; i < nseg; i++) {
        for (size_t r = 0; r < world; r++) {
            size_t off, len;
            k_chunk_rows(seg[i].rows, world, r, &off, &len);
            if (len)
                memcpy((char *)dst[i] + off * seg[i].row_bytes,
                       (const char *)flat + r * slot_bytes + seg[i].flat_off,
                       len * seg[i].row_bytes);
        }
    }
}

void k_rs_chunk_cat(void *flat, size_t slot_bytes, const void *const *src, const k_seg *seg,
                    size_t nseg, size_t world)
{
    for (size_t r = 0; r < world; r++) {
        for (size_t i = 0; i < nseg; i++) {
            size_t off, len;
            k_chunk_rows(seg[i].rows, world, r, &off, &len);
            put_part((char *)flat + r * slot_bytes, src[i], off, &seg[i], world, r);
        }
    }
}
