/* image.c - a rank's data file in memory (see image.h). */
#include "save/image.h"

#include <errno.h>
#include <string.h>

/* Copies plan shard i into the image after the bytes up to *at, zeros between. */
static int put(const ck__plan *p, uint32_t i, const ck__shard_src *src, uint8_t *dst,
               uint64_t *at)
{
    const ck__plan_shard *ps = ck__plan_shard_at(p, i);
    memset(dst + *at, 0, ps->file_off - *at);
    const ck__shard_src *s = &src[i];
    if (s->placed) {
        /* already there */
    } else if (s->mem) {
        memcpy(dst + ps->file_off, s->mem, ps->bytes);
    } else {
        int r = s->fill ? s->fill(s->arg, 0, dst + ps->file_off, ps->bytes) : -EINVAL;
        if (r < 0)
            return r;
    }
    *at = ps->file_off + ps->bytes;
    return 0;
}

int ck__rank_image(const ck__plan *p, uint64_t rank, const ck__shard_src *src, void *image,
                   uint32_t *bad)
{
    uint8_t *dst = image;
    uint64_t at = 0;
    /* In declaration order, which is the order of the offsets in the rank's file. */
    for (uint32_t t = 0; t < ck__plan_ntensors(p); t++) {
        uint32_t first, count;
        if (ck__plan_is_boxes(p, t))
            ck__plan_range(p, t, &first, &count);
        else
            first = ck__plan_shard_of(p, t, rank), count = 1;
        for (uint32_t i = first; i < first + count; i++) {
            const ck__plan_shard *ps = ck__plan_shard_at(p, i);
            if (ps->writer != rank || !ps->bytes)
                continue;
            int r = put(p, i, src, dst, &at);
            if (r < 0) {
                *bad = i;
                return r;
            }
        }
    }
    if (ck__plan_file_size(p, rank) > at)    /* a rank that writes nothing has no image */
        memset(dst + at, 0, ck__plan_file_size(p, rank) - at);
    return 0;
}
