/* Copy-in / copy-out / chunk-cat: torch.chunk parts (short and empty trailing parts),
 * zero padding in the slots, and the round trip full -> slots -> full for every world
 * size from 1 to 5, with tensors of 1, 2, 5 and 7 rows. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "flat.h"

enum { NSEG = 4 };

static void chunk_rule(void)
{
    size_t off, len;
    k_chunk_rows(5, 4, 0, &off, &len);
    CHECK(off == 0 && len == 2, "5/4 part 0: %zu+%zu", off, len);
    k_chunk_rows(5, 4, 2, &off, &len);
    CHECK(off == 4 && len == 1, "5/4 part 2: %zu+%zu", off, len);
    k_chunk_rows(5, 4, 3, &off, &len);
    CHECK(off == 5 && len == 0, "5/4 part 3 must be empty: %zu+%zu", off, len);
    k_chunk_rows(2, 3, 2, &off, &len);
    CHECK(off == 2 && len == 0, "2/3 part 2 must be empty: %zu+%zu", off, len);
}

static void round_trip(size_t world)
{
    k_seg seg[NSEG] = {{1, 12, 0}, {2, 4, 0}, {5, 8, 0}, {7, 4, 0}};
    size_t slot = k_flat_layout(seg, NSEG, world);
    uint8_t *full[NSEG], *back[NSEG];
    for (int i = 0; i < NSEG; i++) {
        size_t n = seg[i].rows * seg[i].row_bytes;
        full[i] = malloc(n);
        back[i] = calloc(1, n);
        for (size_t b = 0; b < n; b++)
            full[i][b] = (uint8_t)(1 + 31 * i + b);   /* never 0: padding must be 0 */
    }
    uint8_t *flat = malloc(slot * world), *gathered = malloc(slot * world);
    memset(flat, 0xee, slot * world);
    k_rs_chunk_cat(flat, slot, (const void *const *)full, seg, NSEG, world);

    /* Each slot equals what copy-in builds for that rank from its own shard, and from
     * the full tensor. */
    for (size_t r = 0; r < world; r++) {
        const void *shard[NSEG];
        for (int i = 0; i < NSEG; i++) {
            size_t off, len;
            k_chunk_rows(seg[i].rows, world, r, &off, &len);
            shard[i] = len ? full[i] + off * seg[i].row_bytes : NULL;
            /* The padding after part r of tensor i is zero. */
            size_t c = seg[i].rows / world + (seg[i].rows % world != 0);
            for (size_t b = len * seg[i].row_bytes; b < c * seg[i].row_bytes; b++)
                CHECK(flat[r * slot + seg[i].flat_off + b] == 0,
                      "world %zu rank %zu tensor %d pad byte %zu not zero", world, r, i, b);
        }
        memset(gathered + r * slot, 0xee, slot);
        k_ag_copy_in(gathered + r * slot, shard, false, seg, NSEG, world, r);
        CHECK(memcmp(gathered + r * slot, flat + r * slot, slot) == 0,
              "world %zu rank %zu: copy-in from shard differs from chunk-cat", world, r);
        memset(gathered + r * slot, 0xee, slot);
        k_ag_copy_in(gathered + r * slot, (const void *const *)full, true, seg, NSEG, world, r);
        CHECK(memcmp(gathered + r * slot, flat + r * slot, slot) == 0,
              "world %zu rank %zu: copy-in from full differs from chunk-cat", world, r);
    }
    k_ag_copy_out((void *const *)back, gathered, slot, seg, NSEG, world);
    for (int i = 0; i < NSEG; i++)
        CHECK(memcmp(back[i], full[i], seg[i].rows * seg[i].row_bytes) == 0,
              "world %zu tensor %d: copy-out does not rebuild the tensor", world, i);
    for (int i = 0; i < NSEG; i++) {
        free(full[i]);
        free(back[i]);
    }
    free(flat);
    free(gathered);
}

int main(void)
{
    chunk_rule();
    for (size_t w = 1; w <= 5; w++)
        round_trip(w);
    CHECK_DONE();
}
