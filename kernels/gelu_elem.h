/* gelu_elem.h - GELU (tanh approximation, GPT-2's) and its derivative, per element.
 *
 *   gelu(x) = 0.5 x (1 + tanh(s (x + 0.044715 x^3))),  s = sqrt(2 / pi)
 *
 * The backward recomputes tanh from the saved input instead of saving it: one
 * activation per element is kept, not two.
 */
#ifndef KERNELS_GELU_ELEM_H
#define KERNELS_GELU_ELEM_H

#include <math.h>

#include "kernel_fn.h"

#define K_GELU_S 0.7978845608028654f   /* sqrt(2 / pi) */
#define K_GELU_C 0.044715f

KERNEL_FN float k_gelu_elem(float x)
{
    float u = K_GELU_S * (x + K_GELU_C * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}

/* dy * gelu'(x). */
KERNEL_FN float k_gelu_bwd_elem(float x, float dy)
{
    float u = K_GELU_S * (x + K_GELU_C * x * x * x);
    float t = tanhf(u);
    float du = K_GELU_S * (1.0f + 3.0f * K_GELU_C * x * x);
    return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
}

#endif
