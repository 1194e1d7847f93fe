/* softmax.c - CPU loops of softmax_elem.h. */
#include "softmax.h"

#include "softmax_elem.h"

void k_softmax_causal(float *a, size_t rows, int T)
{
    for (size_t r = 0; r < rows; r++)
        k_softmax_causal_row(a + r * (size_t)T, (int)(r % (size_t)T), T);
}

void k_softmax_causal_bwd(float *dp, const float *a, size_t rows, int T, float scale)
{
    for (size_t r = 0; r < rows; r++)
        k_softmax_causal_bwd_row(dp + r * (size_t)T, a + r * (size_t)T, (int)(r % (size_t)T),
                                 T, scale);
}
