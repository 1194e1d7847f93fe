/* device/tensor.c - tensors on the CPU or a CUDA device, dtype casts through the device's
 * kernels, and parameter initializers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"

static bool is_float(ck_dtype dt)
{
    return dt == CK_F32 || dt == CK_BF16 || dt == CK_F16;
}

int sh_tensor_resize(sh_tensor *t, ck_dtype dtype, int ndim, const int64_t *shape,
                     ck_err *err)
{
    if (!is_float(dtype))
        return ck_err_set(err, -EINVAL, "tensors are f32, bf16 or f16, not dtype %d",
                          (int)dtype);
    if (ndim < 0 || ndim > CK_MAX_NDIM)
        return ck_err_set(err, -EINVAL, "a tensor has 0 to %d dims, not %d", CK_MAX_NDIM,
                          ndim);
    size_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return ck_err_set(err, -EINVAL, "negative size %lld in dim %d",
                              (long long)shape[d], d);
        numel *= (size_t)shape[d];
    }
    size_t bytes = numel * ck_dtype_size(dtype);
    /* A zeroed sh_tensor is on META: it becomes a CPU tensor, as it always has. */
    if (t->device == SH_META)
        t->device = SH_CPU;
    const sh_dev_ops *dev = sh_dev_for(t->device);
    if (!dev)
        return ck_err_set(err, -ENOTSUP, "a CUDA tensor of %zu bytes: this build has no "
                          "CUDA", bytes);
    if (bytes > t->cap) {
        /* The contents are unspecified, so nothing is carried over. */
        void *p;
        int rc = dev->alloc(&p, bytes, false);
        if (rc)
            return ck_err_set(err, rc, "tensor of %zu bytes on %s: out of memory", bytes,
                              dev->name);
        dev->free(t->data);
        t->data = p;
        t->cap = bytes;
    }
    t->dtype = dtype;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        t->shape[d] = shape[d];
    t->numel = numel;
    return 0;
}

int sh_tensor_cast(sh_tensor *t, ck_dtype dtype, ck_err *err)
{
    if (t->dtype == dtype)
        return 0;
    sh_tensor n = SH_TENSOR_INIT;
    n.device = t->device;
    int rc = sh_tensor_resize(&n, dtype, t->ndim, t->shape, err);
    if (!rc)
        rc = sh_dev_cast(sh_dev_for(t->device), n.data, dtype, t->data, t->dtype, t->numel,
                         err);
    if (rc) {
        sh_tensor_free(&n);
        return rc;
    }
    sh_tensor_free(t);
    *t = n;
    return 0;
}

void sh_tensor_free(sh_tensor *t)
{
    const sh_dev_ops *d = sh_dev_for(t->device);
    if (d)
        d->free(t->data);
    t->data = NULL;
    t->cap = 0;
    t->numel = 0;
}

int sh_dev_cast(const sh_dev_ops *d, void *dst, ck_dtype dst_dtype, const void *src,
                ck_dtype src_dtype, size_t n, ck_err *err)
{
    if (n == 0)
        return 0;
    int rc;
    if (dst_dtype == src_dtype && is_float(dst_dtype))
        rc = d->copy(dst, src, n * ck_dtype_size(dst_dtype));
    else if ((src_dtype == CK_F32 && (dst_dtype == CK_BF16 || dst_dtype == CK_F16)) ||
             (dst_dtype == CK_F32 && (src_dtype == CK_BF16 || src_dtype == CK_F16)))
        rc = d->cast(dst, dst_dtype, src, src_dtype, n);
    else
        return ck_err_set(err, -EINVAL, "no cast from %s to %s (f32 <-> bf16/f16 only)",
                          ck_dtype_name(src_dtype) ? ck_dtype_name(src_dtype) : "?",
                          ck_dtype_name(dst_dtype) ? ck_dtype_name(dst_dtype) : "?");
    return rc ? ck_err_set(err, rc, "casting %zu elements from %s to %s on %s", n,
                           ck_dtype_name(src_dtype), ck_dtype_name(dst_dtype), d->name)
              : 0;
}

int sh_cast(void *dst, ck_dtype dst_dtype, const void *src, ck_dtype src_dtype, size_t n,
            ck_err *err)
{
    return sh_dev_cast(&sh_dev_cpu, dst, dst_dtype, src, src_dtype, n, err);
}

/* splitmix64: a counter-based generator, so element i's value needs no state. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* FNV-1a of the name keys the stream, so two parameters never share values. */
static uint64_t name_key(uint64_t seed, const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = name; *p; p++)
        h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    return mix64(h ^ mix64(seed));
}

void sh_init_fill(const sh_init_spec *init, uint64_t seed, const char *name, uint64_t start,
                  float *dst, size_t n)
{
    uint64_t key = name_key(seed, name);
    for (size_t i = 0; i < n; i++) {
        switch (init->kind) {
        case SH_INIT_ZEROS: dst[i] = 0.0f; break;
        case SH_INIT_ONES: dst[i] = 1.0f; break;
        case SH_INIT_UNIFORM: {
            /* 24 random bits give every f32 in [0, 1) on a 2^-24 grid exactly. */
            float u = (float)(mix64(key + start + i) >> 40) * 0x1p-24f;
            dst[i] = init->bound * (2.0f * u - 1.0f);
            break;
        }
        }
    }
}
