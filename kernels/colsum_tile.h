/* colsum_tile.h - column sums over many rows (a bias gradient, LayerNorm's dw and db)
 * as the GPU computes them, for the CPU replays (bias.c, layernorm.c) and the CUDA
 * kernels (cuda/bias.cu, cuda/layernorm.cu).
 *
 * One thread per column summing all N rows leaves a GPU nearly idle (a few hundred
 * threads, thousands of dependent loads each). Instead the rows are cut into chunks
 * of K_COL_ROWS: one thread per (chunk, column) sums its chunk in row order from 0
 * into part[chunk][column], then one thread per column adds the chunks' parts to the
 * gradient in chunk order. Deterministic, and the CPU replay is bitwise the GPU's.
 */
#ifndef KERNELS_COLSUM_TILE_H
#define KERNELS_COLSUM_TILE_H

#include <stddef.h>

#include "kernel_fn.h"

#define K_COL_ROWS 64

KERNEL_FN int k_col_chunks(int N) { return (N + K_COL_ROWS - 1) / K_COL_ROWS; }

/* The sum of rows [chunk * K_COL_ROWS, ...) of column c of a[N, O], in order from 0. */
KERNEL_FN float k_col_part(const float *a, int N, int O, int c, int chunk)
{
    int n1 = (chunk + 1) * K_COL_ROWS < N ? (chunk + 1) * K_COL_ROWS : N;
    float s = 0.0f;
    for (int n = chunk * K_COL_ROWS; n < n1; n++)
        s = s + a[(size_t)n * (size_t)O + (size_t)c];
    return s;
}

/* dst[c] += the parts of column c (part[chunks][O]), chunk 0 first. */
KERNEL_FN void k_col_finish(float *dst, const float *part, int chunks, int O, int c)
{
    float s = dst[c];
    for (int k = 0; k < chunks; k++)
        s = s + part[(size_t)k * (size_t)O + (size_t)c];
    dst[c] = s;
}

#endif
