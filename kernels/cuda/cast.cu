/* cast.cu - CUDA twins of cast.c, over cast_elem.h. */
#include "launch.h"

extern "C" {
#include "cast_elem.h"
#include "kernels_cuda.h"
}

#define CAST_TWIN(name, dst_t, src_t, elem)                                             \
    __global__ static void name##_kernel(dst_t *dst, const src_t *src, size_t n)        \
    {                                                                                   \
        K_FOR_EACH(i, n) dst[i] = elem(src[i]);                                         \
    }                                                                                   \
    extern "C" int k_cuda_cast_##name(dst_t *dst, const src_t *src, size_t n, void *s)  \
    {                                                                                   \
        if (n)                                                                          \
            name##_kernel<<<k_blocks(n), K_THREADS, 0, (cudaStream_t)s>>>(dst, src, n); \
        return k_launched();                                                            \
    }

CAST_TWIN(f32_to_bf16, uint16_t, float, k_f32_to_bf16_elem)
CAST_TWIN(bf16_to_f32, float, uint16_t, k_bf16_to_f32_elem)
CAST_TWIN(f32_to_f16, uint16_t, float, k_f32_to_f16_elem)
CAST_TWIN(f16_to_f32, float, uint16_t, k_f16_to_f32_elem)
