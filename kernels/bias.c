/* bias.c - CPU loops of bias_elem.h, and the replay of the GPU's chunked gradient. */
#include "bias.h"

#include "bias_elem.h"

void k_bias_add(float *y, const float *b, int N, int O)
{
    for (size_t i = 0; i < (size_t)N * (size_t)O; i++)
        y[i] = k_bias_add_elem(y[i], b, i, O);
}

void k_bias_grad(float *db, const float *dy, int N, int O)
{
    for (int o = 0; o < O; o++)
        k_bias_grad_col(db, dy, N, O, o);
}

void k_bias_grad_tiled(float *db, const float *dy, int N, int O, float *part)
{
    int chunks = k_col_chunks(N);
    for (int k = 0; k < chunks; k++)
        for (int o = 0; o < O; o++)
            part[(size_t)k * O + o] = k_col_part(dy, N, O, o, k);
    for (int o = 0; o < O; o++)
        k_col_finish(db, part, chunks, O, o);
}
