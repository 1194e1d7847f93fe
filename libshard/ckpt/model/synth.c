/* synth.c - generates synthetic shard bytes from the formula in ck/synth.h. */
#include "ck/synth.h"

#include <string.h>

int ck_synth_fill(void *arg, uint64_t off, void *dst, size_t len)
{
    const ck_synth_src *s = arg;
    const size_t is = s->itemsize;
    const ck_box *b = &s->box;
    uint8_t *out = dst;
    uint64_t e = off / is;            /* first element, index inside the box */
    size_t skip = (size_t)(off % is); /* bytes of it before off */

    /* Unravel e into box coordinates once; then step them like an odometer and keep
     * the global row-major index k in step, so each element costs one add. */
    uint64_t c[CK_MAX_NDIM], stride[CK_MAX_NDIM];
    uint64_t rem = e, k = 0, st = 1;
    for (int d = b->ndim - 1; d >= 0; d--) {
        c[d] = b->len[d] ? rem % b->len[d] : 0;
        rem = b->len[d] ? rem / b->len[d] : 0;
        stride[d] = st;
        st *= s->shape[d];
    }
    for (int d = 0; d < b->ndim; d++)
        k += (b->off[d] + c[d]) * stride[d];

    while (len > 0) {
        /* Whole elements along the innermost dim: k steps by one. */
        int last = b->ndim - 1;
        uint64_t left_in_row = last >= 0 ? b->len[last] - c[last] : 1;
        if (skip == 0 && len >= is) {
            uint64_t n = len / is < left_in_row ? len / is : left_in_row;
            for (uint64_t j = 0; j < n; j++) {
                uint64_t v = ck_synth_elem(s->seed, s->tensor, k + j);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
                if (is <= 8) {
                    memcpy(out + j * is, &v, is);
                    continue;
                }
#endif
                for (size_t x = 0; x < is; x++)
                    out[j * is + x] = (uint8_t)(v >> (8 * (x % 8)));
            }
            out += n * is;
            len -= n * is;
            if (last < 0)
                break;
            c[last] += n - 1;   /* the odometer below adds the last step */
            k += n - 1;
        } else {
            uint64_t v = ck_synth_elem(s->seed, s->tensor, k);
            uint8_t bytes[16];
            for (size_t i = 0; i < sizeof bytes; i++)
                bytes[i] = (uint8_t)(v >> (8 * (i % 8)));
            size_t n = is - skip < len ? is - skip : len;
            memcpy(out, bytes + skip, n);
            out += n;
            len -= n;
            skip = 0;
        }
        /* next element of the box */
        for (int d = last; d >= 0; d--) {
            k += stride[d];
            if (++c[d] < b->len[d])
                break;
            k -= c[d] * stride[d];
            c[d] = 0;
        }
    }
    return 0;
}
