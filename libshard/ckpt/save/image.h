/* save/image.h - a rank's data file as an image in memory (private to the core).
 *
 * The one place that lays out the bytes of a rank's file: each shard the plan gives
 * that rank at its file offset, zeros before, between and after (the gaps are hashed,
 * so they must be zeros). The client builds its staging area with it, a shared save
 * the image it writes in place. */
#ifndef CK_SAVE_IMAGE_H
#define CK_SAVE_IMAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "ck/types.h"
#include "model/plan.h"

/* Where one tensor's shard of a rank comes from: memory, or fill(arg, off, dst, len),
 * or the image itself (placed: the caller wrote the bytes there). */
typedef struct ck__shard_src {
    const void *mem;
    ck_fill_fn fill;
    void *arg;
    bool placed;
} ck__shard_src;

/* Fills image, ck__plan_file_size(p, rank) bytes, from src (one per plan shard, read
 * only for the shards rank writes). 0, or the fill's error, or -EINVAL for a source
 * that is empty; *bad then is the plan shard at fault, for the caller's message. */
int ck__rank_image(const ck__plan *p, uint64_t rank, const ck__shard_src *src, void *image,
                   uint32_t *bad);

#endif
