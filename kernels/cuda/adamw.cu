/* adamw.cu - CUDA twin of adamw.c, over adamw_elem.h. */
#include "launch.h"

extern "C" {
#include "kernels_cuda.h"
}

__global__ static void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n,
                                    k_adamw_hparams h)
{
    K_FOR_EACH(i, n) k_adamw_elem(&p[i], g[i], &m[i], &v[i], &h);
}

extern "C" int k_cuda_adamw_step(float *p, const float *g, float *m, float *v, size_t n,
                                 const k_adamw_hparams *h, void *s)
{
    if (n)
        adamw_kernel<<<k_blocks(n), K_THREADS, 0, (cudaStream_t)s>>>(p, g, m, v, n, *h);
    return k_launched();
}
