/* tree_elem.h - the fixed order in which a GPU sums the partials of cooperating threads,
 * written out for the CPU drivers that replay a tiled kernel.
 *
 * A warp's xor-butterfly (x += shfl_xor(x, w) for w = 1, 2, 4, ...) leaves every
 * thread with the same bits, because each addition pairs the same two values on both
 * sides and float addition is commutative. What all of them hold is this tree:
 * ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)) ... The CPU driver that calls
 * this computes exactly what the kernel computes.
 */
#ifndef KERNELS_TREE_ELEM_H
#define KERNELS_TREE_ELEM_H

#include "kernel_fn.h"

/* The butterfly with strides 1, 2, 4, ... over p[0..n) (n a power of two, p
 * overwritten): returns what every lane holds at the end. */
KERNEL_FN float k_tree_sum(float *p, int n)
{
    for (int w = 1; w < n; w *= 2)
        for (int s = 0; s < n; s += 2 * w)
            p[s] = p[s] + p[s + w];
    return p[0];
}

#endif
