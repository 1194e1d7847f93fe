/* cast_elem.h - f32 <-> bf16 / f16 conversion of one element.
 *
 * Narrowing rounds to nearest, ties to even (what torch's .to() and the hardware
 * converters do). NaN stays NaN and is made quiet, keeping the sign and the top
 * payload bits that fit; +-Inf stays +-Inf; values past the target's max round to Inf
 * exactly when round-to-nearest-even says so. Widening is exact; a signaling f16 NaN
 * comes out quiet (as from the x86 and CUDA converters), a bf16 NaN keeps its bits
 * (bf16 -> f32 is a shift everywhere).
 *
 * Bits move through memcpy rather than pointer casts: that is defined behaviour in C
 * and in CUDA device code, and compiles to a register move.
 */
#ifndef KERNELS_CAST_ELEM_H
#define KERNELS_CAST_ELEM_H

#include <stdint.h>
#include <string.h>

#include "kernel_fn.h"

KERNEL_FN uint32_t k_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

KERNEL_FN float k_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* bf16 is the top half of an f32, so narrowing is rounding away the low 16 bits. */
KERNEL_FN uint16_t k_f32_to_bf16_elem(float f)
{
    uint32_t u = k_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)        /* NaN: truncate, force quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    /* Adding 0x7fff plus the lowest kept bit rounds half to even; a carry out of the
     * mantissa correctly bumps the exponent, up to Inf. */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

KERNEL_FN float k_bf16_to_f32_elem(uint16_t h)
{
    return k_bits_f32((uint32_t)h << 16);
}

/* IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. */
KERNEL_FN uint16_t k_f32_to_f16_elem(float f)
{
    uint32_t u = k_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)                          /* NaN: keep top payload, quiet */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x03ffu));
    if (a >= 0x477ff000u)                         /* >= 65520 rounds to Inf (and Inf) */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {                        /* below 2^-14: f16 subnormal or 0 */
        if (a < 0x33000000u)                      /* < 2^-25: rounds to 0 (tie at 2^-25 -> 0, even) */
            return sign;
        uint32_t e = a >> 23;                     /* 102..112 */
        uint32_t m = (a & 0x007fffffu) | 0x00800000u;
        uint32_t shift = 126u - e;                /* 14..24: bits dropped */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u)))
            q++;                                  /* may carry into the smallest normal: right */
        return (uint16_t)(sign | q);
    }
    /* Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits. */
    uint32_t r = a - 0x38000000u;
    r += 0x0fffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

KERNEL_FN float k_f16_to_f32_elem(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x03ffu;
    if (e == 0x1fu)                               /* Inf, or NaN: payload kept, quiet */
        return k_bits_f32(sign | 0x7f800000u | (m << 13) | (m ? 0x00400000u : 0u));
    if (e != 0)
        return k_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
    if (m == 0)
        return k_bits_f32(sign);
    /* Subnormal: m * 2^-24 is exact in f32. */
    float v = (float)m * k_bits_f32(0x33800000u);
    return sign ? -v : v;
}

#endif
