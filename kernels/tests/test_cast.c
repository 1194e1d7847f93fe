/* Bitwise tests of the f32 <-> bf16 / f16 casts: fixed special values, exhaustive
 * round trips of every 16-bit pattern, and a sweep of f32 values checked against the
 * definition of round-to-nearest-even (nearest neighbour, ties to the even pattern). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cast.h"
#include "cast_elem.h"
#include "check.h"

static float f(uint32_t u) { return k_bits_f32(u); }

static void fixed_bf16(void)
{
    static const uint32_t cases[][2] = {
        {0x00000000, 0x0000}, {0x80000000, 0x8000},      /* +-0 */
        {0x3f800000, 0x3f80}, {0xbf800000, 0xbf80},      /* +-1 */
        {0x7f800000, 0x7f80}, {0xff800000, 0xff80},      /* +-Inf */
        {0x7f7fffff, 0x7f80},                            /* f32 max rounds to Inf */
        {0x7f7f0000, 0x7f7f},                            /* bf16 max is exact */
        {0x7f7f7fff, 0x7f7f}, {0x7f7f8000, 0x7f80},      /* below / at the tie to Inf */
        {0x3f808000, 0x3f80}, {0x3f818000, 0x3f82},      /* ties go to even */
        {0x3f808001, 0x3f81},                            /* just past a tie */
        {0x00000001, 0x0000}, {0x00008000, 0x0000},      /* subnormals round to 0... */
        {0x00018000, 0x0002}, {0x00010000, 0x0001},      /* ...or to even subnormals */
        {0x807fffff, 0x8080},                            /* -max subnormal -> -min normal */
        {0x7fc00000, 0x7fc0}, {0xffc00001, 0xffc0},      /* quiet NaNs */
        {0x7f800001, 0x7fc0}, {0xffa00000, 0xffe0},      /* signaling NaNs come out quiet */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t got = k_f32_to_bf16_elem(f(cases[i][0]));
        CHECK(got == cases[i][1], "bf16(0x%08x) = 0x%04x, want 0x%04x", cases[i][0], got,
              cases[i][1]);
    }
}

static void fixed_f16(void)
{
    static const uint32_t cases[][2] = {
        {0x00000000, 0x0000}, {0x80000000, 0x8000},      /* +-0 */
        {0x3f800000, 0x3c00}, {0xc0000000, 0xc000},      /* 1, -2 */
        {0x7f800000, 0x7c00}, {0xff800000, 0xfc00},      /* +-Inf */
        {0x477fe000, 0x7bff},                            /* 65504, f16 max */
        {0x477fefff, 0x7bff}, {0x477ff000, 0x7c00},      /* below / at the tie to Inf */
        {0x7f7fffff, 0x7c00},                            /* f32 max overflows */
        {0x38800000, 0x0400},                            /* 2^-14, min normal */
        {0x387fc000, 0x03ff},                            /* max subnormal */
        {0x33800000, 0x0001},                            /* 2^-24, min subnormal */
        {0x33000000, 0x0000}, {0x33000001, 0x0001},      /* tie at 2^-25 -> 0 (even) */
        {0x33c00000, 0x0002},                            /* 1.5 * 2^-24: tie -> even 2 */
        {0x387fe000, 0x0400},                            /* subnormal rounds up to normal */
        {0x3f801000, 0x3c00}, {0x3f803000, 0x3c02},      /* normal ties to even */
        {0x00000001, 0x0000}, {0x80000001, 0x8000},      /* f32 subnormals vanish, signed */
        {0x7fc00000, 0x7e00}, {0x7f800001, 0x7e00},      /* NaNs quiet */
        {0xff802000, 0xfe01},                            /* top payload bits kept */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t got = k_f32_to_f16_elem(f(cases[i][0]));
        CHECK(got == cases[i][1], "f16(0x%08x) = 0x%04x, want 0x%04x", cases[i][0], got,
              cases[i][1]);
    }
    CHECK(k_f32_bits(k_f16_to_f32_elem(0x0001)) == 0x33800000u, "widen min subnormal");
    CHECK(k_f32_bits(k_f16_to_f32_elem(0x83ff)) == 0xb87fc000u, "widen -max subnormal");
    CHECK(k_f32_bits(k_f16_to_f32_elem(0x7c00)) == 0x7f800000u, "widen Inf");
    CHECK(k_f32_bits(k_f16_to_f32_elem(0xfc01)) == 0xffc02000u, "widen sNaN -> qNaN");
    CHECK(k_f32_bits(k_f16_to_f32_elem(0x8000)) == 0x80000000u, "widen -0");
}

static int is_nan16_bf(uint16_t h) { return (h & 0x7fff) > 0x7f80; }
static int is_nan16_f16(uint16_t h) { return (h & 0x7fff) > 0x7c00; }

/* Every 16-bit pattern widens and narrows back to itself (NaNs: to a quiet NaN of the
 * same sign). */
static void round_trips(void)
{
    for (uint32_t h = 0; h <= 0xffff; h++) {
        uint16_t b = k_f32_to_bf16_elem(k_bf16_to_f32_elem((uint16_t)h));
        if (is_nan16_bf((uint16_t)h))
            CHECK(is_nan16_bf(b) && (b & 0x0040) && (b & 0x8000) == (h & 0x8000),
                  "bf16 NaN 0x%04x -> 0x%04x", h, b);
        else
            CHECK(b == h, "bf16 0x%04x -> 0x%04x", h, b);
        uint16_t g = k_f32_to_f16_elem(k_f16_to_f32_elem((uint16_t)h));
        if (is_nan16_f16((uint16_t)h))
            CHECK(is_nan16_f16(g) && (g & 0x0200) && (g & 0x8000) == (h & 0x8000),
                  "f16 NaN 0x%04x -> 0x%04x", h, g);
        else
            CHECK(g == h, "f16 0x%04x -> 0x%04x", h, g);
    }
}

/* The result is the nearer of the two neighbours bracketing x, the even one on a tie.
 * Neighbours of a finite result h are h-1 and h+1 in the magnitude ordering. */
static void check_rne(float x, uint16_t h, float (*widen)(uint16_t), uint16_t inf,
                      const char *what)
{
    double xd = x, got = widen(h);
    uint16_t mag = h & 0x7fff, sign = h & 0x8000;
    double err = fabs(xd - got);
    if (mag == inf) {
        /* Overflow is right only when x is at or past the midpoint of max and 2*max's
         * successor spacing, i.e. |x| >= max + ulp/2 (inclusive: max has odd pattern). */
        double max = widen((uint16_t)(inf - 1)), below = widen((uint16_t)(inf - 2));
        CHECK(fabs(xd) >= max + (max - below) / 2, "%s(%a) overflowed", what, x);
        return;
    }
    uint16_t nb[2] = {(uint16_t)(sign | (mag ? mag - 1 : 0)), (uint16_t)(sign | (mag + 1))};
    for (int k = 0; k < 2; k++) {
        if ((nb[k] & 0x7fff) >= inf)
            continue;
        double e2 = fabs(xd - widen(nb[k]));
        CHECK(err < e2 || (err == e2 && (mag & 1) == 0), "%s(%a) = 0x%04x, neighbour 0x%04x nearer",
              what, x, h, nb[k]);
    }
}

static float widen_bf(uint16_t h) { return k_bf16_to_f32_elem(h); }
static float widen_f16(uint16_t h) { return k_f16_to_f32_elem(h); }

static void sweep(void)
{
    /* A stride prime to 2^32 visits a million patterns of every exponent. */
    for (uint64_t i = 0; i < (1u << 20); i++) {
        uint32_t u = (uint32_t)(i * 4099u + (i >> 3) * 7u) ^ (uint32_t)(i << 11);
        float x = f(u);
        if (isnan(x)) {
            CHECK(is_nan16_bf(k_f32_to_bf16_elem(x)), "bf16 NaN 0x%08x", u);
            CHECK(is_nan16_f16(k_f32_to_f16_elem(x)), "f16 NaN 0x%08x", u);
            continue;
        }
        check_rne(x, k_f32_to_bf16_elem(x), widen_bf, 0x7f80, "bf16");
        check_rne(x, k_f32_to_f16_elem(x), widen_f16, 0x7c00, "f16");
        if (check_failures > 20)
            return;
    }
}

static void loops(void)
{
    float src[5] = {1.0f, -2.5f, 0.0f, 65504.0f, 1e-3f}, back[5];
    uint16_t h[5];
    k_cast_f32_to_bf16(h, src, 5);
    k_cast_bf16_to_f32(back, h, 5);
    for (int i = 0; i < 5; i++)
        CHECK(h[i] == k_f32_to_bf16_elem(src[i]) && back[i] == k_bf16_to_f32_elem(h[i]),
              "bf16 loop element %d", i);
    k_cast_f32_to_f16(h, src, 5);
    k_cast_f16_to_f32(back, h, 5);
    for (int i = 0; i < 5; i++)
        CHECK(h[i] == k_f32_to_f16_elem(src[i]) && back[i] == k_f16_to_f32_elem(h[i]),
              "f16 loop element %d", i);
}

int main(void)
{
    fixed_bf16();
    fixed_f16();
    round_trips();
    sweep();
    loops();
    CHECK_DONE();
}
