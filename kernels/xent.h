/* xent.h - softmax cross-entropy over rows of logits (CPU loop of xent_elem.h). */
#ifndef KERNELS_XENT_H
#define KERNELS_XENT_H

/* logits[N, V] against targets[N] (each in [0, V)): loss[n] per row, and
 * dlogits = (softmax - onehot) * scale. */
void k_xent(float *dlogits, double *loss, const float *logits, const int *targets, int N,
            int V, float scale);

#endif
