/* adamw.cu - CUDA twin of adamw.c's k_adamw_multi, over adamw_elem.h: the whole
 * optimizer step (every parameter's shard) in a few launches instead of one per
 * parameter. As torch's fused multi-tensor apply, the tensors are cut into chunks of
 * K_CHUNK elements and a launch's kernel parameters carry up to K_TENSORS tensors and
 * K_BLOCKS (tensor, chunk) pairs, one block each: no table in device memory, so
 * nothing is copied up and nothing waits. */
#include "launch.h"

extern "C" {
#include "kernels_cuda.h"
}

#define K_CHUNK 65536
#define K_TENSORS 24
#define K_BLOCKS 320

/* What one launch does (about 3 KB, under the 4 KB of kernel parameters). */
struct adamw_batch {
    k_adamw_tensor t[K_TENSORS];
    unsigned char tensor[K_BLOCKS];
    unsigned chunk[K_BLOCKS];
    k_adamw_hparams h;
};

__global__ static void adamw_kernel(const __grid_constant__ adamw_batch b)
{
    const k_adamw_tensor *t = &b.t[b.tensor[blockIdx.x]];
    k_adamw_hparams h = b.h;
    h.step_size = t->step_size;
    h.bc2_sqrt = t->bc2_sqrt;
    size_t first = (size_t)b.chunk[blockIdx.x] * K_CHUNK;
    size_t last = first + K_CHUNK < t->n ? first + K_CHUNK : t->n;
    for (size_t i = first + threadIdx.x; i < last; i += blockDim.x)
        k_adamw_elem(&t->p[i], t->g[i], &t->m[i], &t->v[i], &h);
}

extern "C" int k_cuda_adamw_multi(const k_adamw_tensor *t, int nt, const k_adamw_hparams *h,
                                  void *s)
{
    adamw_batch b;
    int nb = 0, ntb = 0;
    b.h = *h;
    for (int i = 0; i < nt; i++) {
        size_t chunks = (t[i].n + K_CHUNK - 1) / K_CHUNK;
        for (size_t c = 0; c < chunks; c++) {
            /* A tensor starts in a batch with room for it, and its chunks follow. */
            if (c == 0 && ntb == K_TENSORS) {
                adamw_kernel<<<nb, K_THREADS, 0, (cudaStream_t)s>>>(b);
                nb = ntb = 0;
            }
            if (c == 0)
                b.t[ntb++] = t[i];
            b.tensor[nb] = (unsigned char)(ntb - 1);
            b.chunk[nb++] = (unsigned)c;
            if (nb == K_BLOCKS) {
                adamw_kernel<<<nb, K_THREADS, 0, (cudaStream_t)s>>>(b);
                /* The tensor whose chunks continue stays the first of the next batch. */
                b.t[0] = b.t[ntb - 1];
                nb = 0;
                ntb = 1;
            }
        }
    }
    if (nb)
        adamw_kernel<<<nb, K_THREADS, 0, (cudaStream_t)s>>>(b);
    return k_launched();
}
