/* bias_elem.h - a bias over the rows of [N, O] and its gradient, for the CPU loops
 * (bias.c) and the CUDA twins (cuda/bias.cu). The gradient of column o is one GPU
 * thread's sum over the rows in order, as on the CPU: the same bits. */
#ifndef KERNELS_BIAS_ELEM_H
#define KERNELS_BIAS_ELEM_H

#include <stddef.h>

#include "kernel_fn.h"

/* Element i of y[N, O] += b[i % O]. */
KERNEL_FN float k_bias_add_elem(float y, const float *b, size_t i, int O)
{
    return y + b[i % (size_t)O];
}

/* db[o] += sum_n dy[n, o]. */
KERNEL_FN void k_bias_grad_col(float *db, const float *dy, int N, int O, int o)
{
    float s = db[o];
    for (int n = 0; n < N; n++)
        s += dy[(size_t)n * (size_t)O + (size_t)o];
    db[o] = s;
}

#endif
