/* rand.h - a seeded xorshift for the kernel tests: the same inputs on every run. */
#ifndef KERNELS_TEST_RAND_H
#define KERNELS_TEST_RAND_H

#include <stdint.h>

static uint64_t test_rng = 0x9e3779b97f4a7c15ull;

/* Uniform in [-1, 1). */
static inline float test_uniform(void)
{
    test_rng ^= test_rng << 13;
    test_rng ^= test_rng >> 7;
    test_rng ^= test_rng << 17;
    return (float)((double)(test_rng >> 11) / 4503599627370496.0 - 1.0);
}

#endif
