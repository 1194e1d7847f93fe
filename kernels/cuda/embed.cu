/* embed.cu - CUDA twins of embed.c, over embed_elem.h: one thread per element
 * forward, one per column backward (no atomics: repeated tokens add in row order). */
#include "launch.h"

extern "C" {
#include "embed_elem.h"
#include "kernels_cuda.h"
}

__global__ static void embed_kernel(float *out, const int *tok, const float *wte,
                                    const float *wpe, size_t n, int T, int C)
{
    K_FOR_EACH(i, n) out[i] = k_embed_elem(tok, wte, wpe, i, T, C);
}

__global__ static void embed_bwd_kernel(float *dwte, float *dwpe, const float *dout,
                                        const int *tok, int N, int T, int C)
{
    K_FOR_EACH(c, (size_t)C) k_embed_bwd_col(dwte, dwpe, dout, tok, N, T, C, (int)c);
}

extern "C" int k_cuda_embed(float *out, const int *tok, const float *wte, const float *wpe,
                            int N, int T, int C, void *s)
{
    size_t n = (size_t)N * (size_t)C;
    if (n)
        embed_kernel<<<k_blocks(n), K_THREADS, 0, (cudaStream_t)s>>>(out, tok, wte, wpe, n, T,
                                                                      C);
    return k_launched();
}

extern "C" int k_cuda_embed_bwd(float *dwte, float *dwpe, const float *dout, const int *tok,
                                int N, int T, int C, void *s)
{
    if (N > 0 && C > 0)
        embed_bwd_kernel<<<k_blocks((size_t)C), K_THREADS, 0, (cudaStream_t)s>>>(
            dwte, dwpe, dout, tok, N, T, C);
    return k_launched();
}
