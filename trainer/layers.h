/* layers.h - the GPT's compute, over f32 row-major arrays in the world's device memory.
 *
 * Everything goes through sh/ops.h (the device table): the same code runs on CPU
 * ranks (kernels/ loops, OpenBLAS) and on CUDA ranks (the CUDA twins, cuBLAS). model.c
 * fetches the (unsharded) parameters through the module hooks and calls these. Shapes
 * use N = rows (batch x sequence), C = channels. Backward functions add (+=) into
 * parameter gradients, so gradient accumulation works by not zeroing, and write (=) or
 * add into input gradients as each one says. Each returns 0 or a negative errno with
 * the message in err.
 */
#ifndef TR_LAYERS_H
#define TR_LAYERS_H

#include <stdbool.h>
#include <stddef.h>

#include "sh/sh.h"

/* A weight as the forward multiplies it: `raw` in its group's param_dtype (f32, or
 * bf16 under mixed precision), and `f32` the same values in f32 (raw itself when f32). */
typedef struct tr_weight {
    ck_dtype dtype;
    const void *raw;
    const float *f32;
} tr_weight;

/* y[N,O] = x[N,K] W[O,K]^T + b (b may be NULL). A bf16 weight multiplies x rounded to
 * bf16 (x16: scratch of N*K bf16 at least), accumulating in f32. */
int tr_linear_fwd(sh_world *w, float *y, const float *x, void *x16, const tr_weight *W,
                  const float *b, int N, int K, int O, ck_err *err);
/* dW += dy^T x, db += sum_rows dy (db may be NULL), dx = dy W (dx may be NULL), or
 * dx += dy W when accumulate; accumulating in f32. A bf16 weight's two GEMMs take dy
 * and x rounded to bf16, as under torch's autocast (the tensor cores' rate on a GPU):
 * x16 is scratch of N * TR_X16_PER_ROW(K, O) floats. */
int tr_linear_bwd(sh_world *w, float *dx, float *dW, float *db, const float *dy,
                  const float *x, void *x16, const tr_weight *W, int N, int K, int O,
                  bool accumulate, ck_err *err);
/* Floats of bf16 scratch a linear layer needs: its input (forward), its output's
 * gradient and its input (backward, 16-byte aligned). Per row: (K + O) / 2 + 4. */
#define TR_X16_PER_ROW(K, O) (((size_t)(K) + (size_t)(O)) / 2 + 4)

#endif
