/* softmax.h - causal softmax over stacked T x T score matrices (CPU loops of
 * softmax_elem.h). rows is a multiple of T (heads x batch stacked); row r is row
 * r % T of its matrix. */
#ifndef KERNELS_SOFTMAX_H
#define KERNELS_SOFTMAX_H

#include <stddef.h>

void k_softmax_causal(float *a, size_t rows, int T);
/* dp: the probabilities' gradient in, the scores' gradient times scale out. */
void k_softmax_causal_bwd(float *dp, const float *a, size_t rows, int T, float scale);

#endif
