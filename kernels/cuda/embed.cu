/* embed.cu - CUDA twins of embed.c, over embed_elem.h: one thread per element forward.
 * The backward adds rows into the tables where tokens repeat; without atomics, and in
 * the CPU loop's row order so that the bits are the CPU's: a thread per (position,
 * column) of wpe adds its rows in order; a thread per (token, column) of wte scans
 * the rows in order for its token (V * C threads, each reading every token id: for the
 * small vocabularies of byte-level models; above K_EMBED_SCAN_VMAX tokens, a thread
 * per column does both tables, as the CPU loop does). */
#include "launch.h"

extern "C" {
#include "embed_elem.h"
#include "kernels_cuda.h"
}

#define K_EMBED_SCAN_VMAX 1024

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

/* dwpe[t, c] += dout[n, c] for n = t, t + T, ... in order. */
__global__ static void wpe_bwd_kernel(float *dwpe, const float *dout, int N, int T, int C)
{
    K_FOR_EACH(i, (size_t)T * C) {
        size_t t = i / C, c = i % C;
        float s = dwpe[i];
        for (size_t n = t; n < (size_t)N; n += T)
            s += dout[n * C + c];
        dwpe[i] = s;
    }
}

/* dwte[v, c] += dout[n, c] for the rows n whose token is v, in order. */
__global__ static void wte_bwd_kernel(float *dwte, const float *dout, const int *tok, int N,
                                      int V, int C)
{
    K_FOR_EACH(i, (size_t)V * C) {
        int v = (int)(i / C);
        size_t c = i % C;
        float s = dwte[i];
        for (int n = 0; n < N; n++)
            if (tok[n] == v)
                s += dout[(size_t)n * C + c];
        dwte[i] = s;
    }
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
                                int N, int T, int C, int V, void *s)
{
    cudaStream_t st = (cudaStream_t)s;
    if (N <= 0 || C <= 0)
        return 0;
    if (V > K_EMBED_SCAN_VMAX) {
        embed_bwd_kernel<<<k_blocks((size_t)C), K_THREADS, 0, st>>>(dwte, dwpe, dout, tok, N,
                                                                    T, C);
        return k_launched();
    }
    wpe_bwd_kernel<<<k_blocks((size_t)T * C), K_THREADS, 0, st>>>(dwpe, dout, N, T, C);
    if (V > 0)
        wte_bwd_kernel<<<k_blocks((size_t)V * C), K_THREADS, 0, st>>>(dwte, dout, tok, N, V, C);
    return k_launched();
}
