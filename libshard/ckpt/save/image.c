/* image.c - a rank's data file in memory (see image.h). */
#include "save/image.h"

#include <errno.h>
#include <string.h>

int ck__rank_image(const ck__plan *p, uint64_t rank, const ck__shard_src *src, void *image,
                   uint32_t *bad)
{
    uint8_t *dst = image;
    uint64_t at = 0;
    for (uint32_t t = 0; t < ck__plan_ntensors(p); t++) {
        const ck__plan_shard *ps = ck__plan_shard_at(p, ck__plan_shard_of(p, t, rank));
        if (ps->writer != rank || !ps->bytes)
            continue;
        memset(dst + at, 0, ps->file_off - at);
        const ck__shard_src *s = &src[t];
        if (s->mem) {
            memcpy(dst + ps->file_off, s->mem, ps->bytes);
        } else {
            int r = s->fill ? s->fill(s->arg, 0, dst + ps->file_off, ps->bytes) : -EINVAL;
            if (r < 0) {
                *bad = t;
                return r;
            }
        }
        at = ps->file_off + ps->bytes;
    }
    if (ck__plan_file_size(p, rank) > at)    /* a rank that writes nothing has no image */
        memset(dst + at, 0, ck__plan_file_size(p, rank) - at);
    return 0;
}
