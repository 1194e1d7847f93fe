/* step.c - see step.h. */
#include "step.h"

#include <stdlib.h>

#include "layers.h"

int tr_step(tr_model *m, sh_adamw *opt, tr_data *d, const tr_step_cfg *c, tr_step_buf *b,
            double *loss, double *norm, ck_err *err)
{
    sh_world *w = sh_module_world(m->root);
    int W = sh_world_size(w), rank = sh_world_rank(w);
    int T = m->cfg.seq, V = m->cfg.vocab;
    int mb = c->batch / (c->accum * W), N = mb * T;   /* this rank's micro-batch */
    if (mb * c->accum * W != c->batch)
        return ck_err_set(err, -EINVAL, "batch %d is not a multiple of accum %d x %d ranks",
                          c->batch, c->accum, W);
    if (N > b->cap) {
        int *t1 = realloc(b->tok, sizeof(int) * (size_t)N);
        int *t2 = t1 ? realloc(b->tgt, sizeof(int) * (size_t)N) : NULL;
        if (t1)
            b->tok = t1;
        if (!t2)
            return ck_err_set(err, -ENOMEM, "out of memory for a batch");
        b->tgt = t2;
        b->cap = N;
    }
    sh_adamw_set_lr(opt, c->lr);
    *loss = 0.0;
    *norm = 0.0;
    int rc = 0;
    for (int a = 0; !rc && a < c->accum; a++) {
        uint64_t first = d->st.pos + (uint64_t)a * (uint64_t)(mb * W) + (uint64_t)rank * (uint64_t)mb;
        for (int i = 0; i < mb; i++)
            tr_data_sample(d, first + (uint64_t)i, b->tok + i * T, b->tgt + i * T);
        /* Gradients accumulate unsharded; the reduce-scatter runs on the last one. */
        rc = sh_set_requires_gradient_sync(m->root, a == c->accum - 1, err);
        if (!rc)
            rc = tr_model_forward(m, b->tok, mb, &b->logits, err);
        if (!rc)
            rc = sh_tensor_resize(&b->dlogits, CK_F32, 3, b->logits.shape, err);
        if (!rc) {
            /* The mean over this rank's tokens and micro-batches; FSDP's division by
             * the ranks makes it the mean over the step's tokens. */
            *loss += tr_cross_entropy(b->dlogits.data, b->logits.data, b->tgt, N, V,
                                      1.0f / (float)(N * c->accum));
            rc = tr_model_backward(m, &b->dlogits, err);
        }
    }
    if (!rc && c->clip > 0)
        rc = sh_clip_grad_norm(m->root, c->clip, norm, err);
    if (!rc)
        rc = sh_adamw_step(opt, err);
    if (!rc)
        rc = sh_zero_grad(m->root, err);
    if (!rc)
        rc = sh_all_reduce(sh_world_comm(w), loss, loss, 1, CK_F64, SH_SUM, NULL, err);
    if (rc)
        return rc;
    *loss /= (double)c->batch * T;
    d->st.pos += (uint64_t)c->batch;
    return 0;
}

void tr_step_buf_free(tr_step_buf *b)
{
    free(b->tok);
    free(b->tgt);
    sh_tensor_free(&b->logits);
    sh_tensor_free(&b->dlogits);
    *b = (tr_step_buf){0};
}
