/* xent.c - CPU loop of xent_elem.h. */
#include "xent.h"

#include <stddef.h>

#include "xent_elem.h"

void k_xent(float *dlogits, double *loss, const float *logits, const int *targets, int N,
            int V, float scale)
{
    for (int n = 0; n < N; n++)
        loss[n] = k_xent_row(dlogits + (size_t)n * V, logits + (size_t)n * V, targets[n], V,
                             scale);
}
