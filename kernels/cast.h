/* cast.h - f32 <-> bf16 / f16 over arrays (CPU loops of cast_elem.h).
 * bf16 and f16 are carried as their uint16_t bit patterns. dst and src never overlap. */
#ifndef KERNELS_CAST_H
#define KERNELS_CAST_H

#include <stddef.h>
#include <stdint.h>

void k_cast_f32_to_bf16(uint16_t *dst, const float *src, size_t n);
void k_cast_bf16_to_f32(float *dst, const uint16_t *src, size_t n);
void k_cast_f32_to_f16(uint16_t *dst, const float *src, size_t n);
void k_cast_f16_to_f32(float *dst, const uint16_t *src, size_t n);

#endif
