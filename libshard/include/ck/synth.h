/* ck/synth.h - the synthetic checkpoint formula, shared by ckpt-synth and the tests.
 *
 * Element k (row-major index into the full tensor) of tensor i holds the low itemsize
 * bytes, little-endian, of splitmix64(seed ^ ((uint64)i << 40) ^ k); an element wider
 * than 8 bytes (c128) holds those 8 bytes twice (byte x is byte x mod 8). Anyone can
 * recompute any byte of a synthetic checkpoint, an export or a reshard from it.
 */
#ifndef CK_SYNTH_H
#define CK_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "ck/layout.h"

static inline uint64_t ck_splitmix64(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t ck_synth_elem(uint64_t seed, uint32_t tensor, uint64_t k)
{
    return ck_splitmix64(seed ^ ((uint64_t)tensor << 40) ^ k);
}

typedef struct ck_synth_src {
    uint64_t seed;
    uint32_t tensor;           /* i in the formula */
    size_t itemsize;
    int ndim;
    uint64_t shape[CK_MAX_NDIM];
    ck_box box;                /* the shard */
} ck_synth_src;

/* A ck_fill_fn (ck/types.h): bytes [off, off+len) of the shard's row-major data. */
CK_API int ck_synth_fill(void *arg, uint64_t off, void *dst, size_t len);

#endif
