/* xent_elem.h - softmax cross-entropy of one row of logits, for the CPU loop (xent.c)
 * and the CUDA twin (cuda/xent.cu). The log-sum-exp runs in double; exp and log are
 * libm's on the CPU and the device's on the GPU (equal within an ulp or so).
 */
#ifndef KERNELS_XENT_ELEM_H
#define KERNELS_XENT_ELEM_H

#include <math.h>

#include "kernel_fn.h"

/* Returns the row's loss, log sum exp(l) - l[target], and writes
 * d = (softmax(l) - onehot(target)) * scale. */
KERNEL_FN double k_xent_row(float *d, const float *l, int target, int V, float scale)
{
    float mx = l[0];
    for (int v = 1; v < V; v++)
        mx = l[v] > mx ? l[v] : mx;
    double sum = 0.0;
    for (int v = 0; v < V; v++)
        sum += exp((double)(l[v] - mx));
    double lse = (double)mx + log(sum);
    for (int v = 0; v < V; v++)
        d[v] = (float)exp((double)l[v] - lse) * scale;
    d[target] -= scale;
    return lse - (double)l[target];
}

#endif
