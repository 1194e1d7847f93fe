/* bias.h - bias add and bias gradient over f32 [N, O] rows (CPU loops of bias_elem.h). */
#ifndef KERNELS_BIAS_H
#define KERNELS_BIAS_H

#include "colsum_tile.h"

/* y[n, o] += b[o]. */
void k_bias_add(float *y, const float *b, int N, int O);
/* db[o] += sum over n of dy[n, o]. */
void k_bias_grad(float *db, const float *dy, int N, int O);

/* The GPU's bias gradient (colsum_tile.h: chunks of rows, then the chunks), replayed;
 * part: k_col_chunks(N) * O floats of scratch. */
void k_bias_grad_tiled(float *db, const float *dy, int N, int O, float *part);

#endif
