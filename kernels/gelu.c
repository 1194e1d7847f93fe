/* gelu.c - CPU loops of gelu_elem.h. */
#include "gelu.h"

#include "gelu_elem.h"

void k_gelu(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = k_gelu_elem(x[i]);
}

void k_gelu_bwd(float *dx, const float *x, const float *dy, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dx[i] = k_gelu_bwd_elem(x[i], dy[i]);
}
