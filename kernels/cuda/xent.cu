/* xent.cu - CUDA twin of xent.c, over xent_elem.h: one thread per row. */
#include "launch.h"

extern "C" {
#include "kernels_cuda.h"
#include "xent_elem.h"
}

__global__ static void xent_kernel(float *d, double *loss, const float *l, const int *tgt,
                                   int N, int V, float scale)
{
    K_FOR_EACH(n, (size_t)N) loss[n] = k_xent_row(d + n * V, l + n * V, tgt[n], V, scale);
}

extern "C" int k_cuda_xent(float *dlogits, double *loss, const float *logits,
                           const int *targets, int N, int V, float scale, void *s)
{
    if (N > 0)
        xent_kernel<<<k_blocks((size_t)N), K_THREADS, 0, (cudaStream_t)s>>>(
            dlogits, loss, logits, targets, N, V, scale);
    return k_launched();
}
