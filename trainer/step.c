/* step.c - see step.h. */
#include "step.h"

#include <math.h>
#include <stdlib.h>

int tr_step_buf_reserve(tr_step_buf *b, sh_world *w, int N, ck_err *err)
{
    if (!b->w) {
        b->w = w;
        b->logits = b->dlogits = (sh_tensor)SH_TENSOR_INIT_ON(sh_world_device(w));
    }
    if (N <= b->cap)
        return 0;
    int *t1 = realloc(b->tok, sizeof(int) * (size_t)N);
    int *t2 = t1 ? realloc(b->tgt, sizeof(int) * (size_t)N) : NULL;
    if (t1)
        b->tok = t1;
    if (!t2)
        return ck_err_set(err, -ENOMEM, "out of memory for a batch");
    b->tgt = t2;
    sh_buffer_free(w, b->tgt_dev);
    b->tgt_dev = NULL;
    int rc = sh_buffer_alloc(w, sizeof(int) * (size_t)N, (void **)&b->tgt_dev, err);
    if (!rc && !b->stats)
        rc = sh_buffer_alloc(w, 2 * sizeof(double), (void **)&b->stats, err);
    if (!rc)
        b->cap = N;
    return rc;
}

int tr_batch_loss(tr_model *m, tr_step_buf *b, int B, float scale, bool backward,
                  double *loss, ck_err *err)
{
    sh_world *w = sh_module_world(m->root);
    int N = B * m->cfg.seq, V = m->cfg.vocab;
    int rc = tr_step_buf_reserve(b, w, N, err);
    for (int i = 0; !rc && i < N; i++)
        if (b->tgt[i] < 0 || b->tgt[i] >= V)
            rc = ck_err_set(err, -EINVAL, "target %d at %d is not in [0, %d)", b->tgt[i], i, V);
    if (!rc)
        rc = tr_model_forward(m, b->tok, B, &b->logits, err);
    if (!rc)
        rc = sh_tensor_resize(&b->dlogits, CK_F32, 3, b->logits.shape, err);
    if (!rc)
        rc = sh_copy(w, b->tgt_dev, b->tgt, sizeof(int) * (size_t)N, err);
    if (!rc)
        rc = sh_cross_entropy_add(w, b->dlogits.data, b->logits.data, b->tgt_dev, N, V,
                                  scale, loss, err);
    if (!rc && backward)
        rc = tr_model_backward(m, &b->dlogits, err);
    return rc;
}

int tr_step(tr_model *m, sh_adamw *opt, tr_data *d, const tr_step_cfg *c, tr_step_buf *b,
            ck_err *err)
{
    sh_world *w = sh_module_world(m->root);
    int W = sh_world_size(w), rank = sh_world_rank(w);
    int T = m->cfg.seq;
    int mb = c->batch / (c->accum * W), N = mb * T;   /* this rank's micro-batch */
    if (mb * c->accum * W != c->batch)
        return ck_err_set(err, -EINVAL, "batch %d is not a multiple of accum %d x %d ranks",
                          c->batch, c->accum, W);
    int rc = tr_step_buf_reserve(b, w, N, err);
    if (!rc)
        rc = sh_zero(w, b->stats, 2 * sizeof(double), err);
    if (rc)
        return rc;
    sh_adamw_set_lr(opt, c->lr);
    for (int a = 0; !rc && a < c->accum; a++) {
        uint64_t first = d->st.pos + (uint64_t)a * (uint64_t)(mb * W) + (uint64_t)rank * (uint64_t)mb;
        for (int i = 0; i < mb; i++)
            tr_data_sample(d, first + (uint64_t)i, b->tok + i * T, b->tgt + i * T);
        /* Gradients accumulate unsharded; the reduce-scatter runs on the last one. */
        rc = sh_set_requires_gradient_sync(m->root, a == c->accum - 1, err);
        /* The mean over this rank's tokens and micro-batches; FSDP's division by the
         * ranks makes it the mean over the step's tokens. */
        if (!rc)
            rc = tr_batch_loss(m, b, mb, 1.0f / (float)(N * c->accum), true, &b->stats[0],
                               err);
    }
    if (!rc && c->clip > 0)
        rc = sh_clip_grad_norm_dev(m->root, c->clip, &b->stats[1], err);
    if (!rc)
        rc = sh_adamw_step(opt, err);
    if (!rc)
        rc = sh_zero_grad(m->root, err);
    if (!rc)
        rc = sh_all_reduce(sh_world_comm(w), &b->stats[0], &b->stats[0], 1, CK_F64, SH_SUM,
                           NULL, err);
    if (rc)
        return rc;
    b->tokens = (double)c->batch * T;
    d->st.pos += (uint64_t)c->batch;
    return 0;
}

int tr_step_result(tr_step_buf *b, double *loss, double *norm, ck_err *err)
{
    double v[2];
    int rc = sh_copy_to_host(b->w, v, b->stats, sizeof v, err);
    if (rc)
        return rc;
    *loss = v[0] / b->tokens;
    *norm = sqrt(v[1]);
    return 0;
}

void tr_step_buf_free(tr_step_buf *b)
{
    free(b->tok);
    free(b->tgt);
    if (b->w) {
        sh_buffer_free(b->w, b->tgt_dev);
        sh_buffer_free(b->w, b->stats);
    }
    sh_tensor_free(&b->logits);
    sh_tensor_free(&b->dlogits);
    *b = (tr_step_buf){0};
}
