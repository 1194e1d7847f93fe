/* embed_elem.h - the GPT's input encoder (token plus position embedding), for the CPU
 * loops (embed.c) and the CUDA twins (cuda/embed.cu). Rows n = 0..N-1 are B sequences
 * of T tokens; row n has position n % T.
 *
 * The backward scatters rows into the tables, where tokens repeat: a column c is one
 * thread's work on the GPU, adding rows in order as the CPU loop does, so no atomics,
 * the same bits, and no result that depends on scheduling.
 */
#ifndef KERNELS_EMBED_ELEM_H
#define KERNELS_EMBED_ELEM_H

#include <stddef.h>

#include "kernel_fn.h"

/* Element i of out[N, C]: wte[tok[n], c] + wpe[n % T, c]. */
KERNEL_FN float k_embed_elem(const int *tok, const float *wte, const float *wpe, size_t i,
                             int T, int C)
{
    size_t n = i / (size_t)C, c = i % (size_t)C;
    return wte[(size_t)tok[n] * (size_t)C + c] + wpe[(n % (size_t)T) * (size_t)C + c];
}

/* Column c: dwte[tok[n], c] += dout[n, c] and dwpe[n % T, c] += dout[n, c], rows in order. */
KERNEL_FN void k_embed_bwd_col(float *dwte, float *dwpe, const float *dout, const int *tok,
                               int N, int T, int C, int c)
{
    for (int n = 0; n < N; n++) {
        float d = dout[(size_t)n * (size_t)C + (size_t)c];
        dwte[(size_t)tok[n] * (size_t)C + (size_t)c] += d;
        dwpe[(size_t)(n % T) * (size_t)C + (size_t)c] += d;
    }
}

#endif
