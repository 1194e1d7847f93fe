/* sh/tensor.h - tensors: a dtype, a shape, a device, and storage.
 *
 * A META tensor has a shape and no storage (the model is built on META, sharded,
 * then materialized). A CUDA tensor's storage is device memory (cudaMalloc), in a
 * build with CUDA. Storage is row-major and owned by the tensor.
 */
#ifndef SH_TENSOR_H
#define SH_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "ck/types.h"

typedef enum sh_device { SH_META = 0, SH_CPU = 1, SH_CUDA = 2 } sh_device;

typedef struct sh_tensor {
    ck_dtype dtype;                 /* CK_F32, CK_BF16 or CK_F16 */
    sh_device device;
    int ndim;
    int64_t shape[CK_MAX_NDIM];
    size_t numel;
    void *data;                     /* NULL on META and when numel is 0 */
    size_t cap;                     /* bytes allocated */
} sh_tensor;

/* An empty f32 CPU tensor owning nothing; fill it with sh_tensor_resize. */
#define SH_TENSOR_INIT {CK_F32, SH_CPU, 0, {0}, 0, NULL, 0}
/* The same on a device (SH_CPU or SH_CUDA, e.g. sh_world_device(w)). */
#define SH_TENSOR_INIT_ON(dev) {CK_F32, (dev), 0, {0}, 0, NULL, 0}

/* Gives t this dtype and shape on its device (a META one, e.g. a zeroed sh_tensor,
 * becomes a CPU tensor), reusing its storage when large enough. The contents are
 * unspecified. -ENOTSUP for a CUDA tensor in a build without CUDA. */
int sh_tensor_resize(sh_tensor *t, ck_dtype dtype, int ndim, const int64_t *shape,
                     ck_err *err);
/* Converts t's elements to dtype in place, on its device. */
int sh_tensor_cast(sh_tensor *t, ck_dtype dtype, ck_err *err);
void sh_tensor_free(sh_tensor *t);

/* dst[i] = src[i] converted, for the floating dtypes f32, bf16, f16; host memory
 * (sh/ops.h's sh_convert works on the world's device). */
int sh_cast(void *dst, ck_dtype dst_dtype, const void *src, ck_dtype src_dtype, size_t n,
            ck_err *err);

/* Parameter initializers. Values depend only on (seed, the parameter's full name,
 * the element's global row-major index), never on how the tensor is sharded, so the
 * full tensor is the same for every world size. */
typedef enum sh_init_kind { SH_INIT_ZEROS, SH_INIT_ONES, SH_INIT_UNIFORM } sh_init_kind;
typedef struct sh_init_spec {
    sh_init_kind kind;
    float bound;                    /* UNIFORM: values in [-bound, bound) */
} sh_init_spec;

/* Fills dst with elements [start, start + n) of the parameter called name. */
void sh_init_fill(const sh_init_spec *init, uint64_t seed, const char *name, uint64_t start,
                  float *dst, size_t n);

#endif
