/* norm.c - CPU loops of norm_elem.h. */
#include "norm.h"

#include "norm_elem.h"

double k_sumsq(const float *x, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += k_sq_elem(x[i]);
    return s;
}

void k_scale(float *x, float s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = k_scale_elem(x[i], s);
}

void k_scale_add(float *dst, const float *src, float s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = k_scale_add_elem(dst[i], src[i], s);
}
