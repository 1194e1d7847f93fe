/* embed.c - CPU loops of embed_elem.h. */
#include "embed.h"

#include "embed_elem.h"

void k_embed(float *out, const int *tok, const float *wte, const float *wpe, int N, int T,
             int C)
{
    for (size_t i = 0; i < (size_t)N * (size_t)C; i++)
        out[i] = k_embed_elem(tok, wte, wpe, i, T, C);
}

void k_embed_bwd(float *dwte, float *dwpe, const float *dout, const int *tok, int N, int T,
                 int C)
{
    for (int c = 0; c < C; c++)
        k_embed_bwd_col(dwte, dwpe, dout, tok, N, T, C, c);
}
