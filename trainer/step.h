/* step.h - one training step: micro-batches, forward, loss, backward, clip, AdamW. */
#ifndef TR_STEP_H
#define TR_STEP_H

#include "data.h"
#include "model.h"

typedef struct tr_step_cfg {
    int batch;           /* sequences per step, all ranks together */
    int accum;           /* micro-batches per step */
    float lr, clip;      /* this step's learning rate; clip 0: off */
} tr_step_cfg;

/* Buffers a step reuses: ids in host memory, the targets' copy, logits and their
 * gradient in the device's (zero-initialized: the first step sets them up), and the
 * step's results, which stay on the device until tr_step_result reads them. */
typedef struct tr_step_buf {
    sh_world *w;
    int *tok, *tgt, *tgt_dev;
    int cap;
    sh_tensor logits, dlogits;
    double *stats;       /* device: the summed loss, the gradients' sum of squares */
    double tokens;       /* the last step's tokens on all ranks */
} tr_step_buf;

/* Room for N tokens (the host ids keep their contents). */
int tr_step_buf_reserve(tr_step_buf *b, sh_world *w, int N, ck_err *err);

/* The loss of one micro-batch tok/tgt[N = B * T] (host) through the model, summed over
 * its tokens and added to *loss (one double of device memory); with backward,
 * dlogits = dloss * scale and the backward runs. */
int tr_batch_loss(tr_model *m, tr_step_buf *b, int B, float scale, bool backward,
                  double *loss, ck_err *err);

/* Trains one step on samples [pos, pos + batch) of the data order, this rank taking
 * its slice of each micro-batch, and advances the data position. The host never
 * waits for the device inside (on CUDA ranks the step is queued and runs behind);
 * its loss and gradient norm stay on the device for tr_step_result. */
int tr_step(tr_model *m, sh_adamw *opt, tr_data *d, const tr_step_cfg *c, tr_step_buf *b,
            ck_err *err);
/* The last step's results (the host waits for the step to finish): *loss, the mean
 * over the step's tokens on all ranks; *norm, the gradient norm before clipping (0
 * without clipping). */
int tr_step_result(tr_step_buf *b, double *loss, double *norm, ck_err *err);
void tr_step_buf_free(tr_step_buf *b);

#endif
