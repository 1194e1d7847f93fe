/* cast.c - CPU loops over cast_elem.h. */
#include "cast.h"

#include "cast_elem.h"

void k_cast_f32_to_bf16(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = k_f32_to_bf16_elem(src[i]);
}

void k_cast_bf16_to_f32(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = k_bf16_to_f32_elem(src[i]);
}

void k_cast_f32_to_f16(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = k_f32_to_f16_elem(src[i]);
}

void k_cast_f16_to_f32(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = k_f16_to_f32_elem(src[i]);
}
