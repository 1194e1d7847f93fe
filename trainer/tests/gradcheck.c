/* gradcheck - the GPT's hand-written backward against central finite differences.
 *
 * A tiny configuration on one process, without FSDP (parameters and gradients are
 * plain arrays then): every element of every parameter is perturbed by +-h and the
 * loss difference compared with the analytic gradient. Parameters are first moved
 * away from their initial values (LayerNorm gains of 1, zero biases) so that every
 * term of the backward carries weight. f32 forward, losses summed in double: with
 * h = 1e-3 the finite difference is good to about 1e-4 of the largest gradient.
 * Last, a token outside the vocabulary must be refused with a message naming it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

#define MAX_PARAMS 64

static double loss_of(tr_model *m, const int *tok, const int *tgt, int B, sh_tensor *logits,
                      sh_tensor *dlogits, bool backward, ck_err *err)
{
    int N = B * m->cfg.seq, V = m->cfg.vocab;
    if (tr_model_forward(m, tok, B, logits, err) ||
        sh_tensor_resize(dlogits, CK_F32, 3, logits->shape, err))
        return NAN;
    double loss;
    if (sh_cross_entropy(sh_module_world(m->root), dlogits->data, logits->data, tgt, N, V,
                         1.0f / (float)N, &loss, err))
        return NAN;
    if (backward && tr_model_backward(m, dlogits, err))
        return NAN;
    return loss / N;
}

static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float uniform(uint64_t *s) { return (float)(next(s) >> 40) / (float)(1 << 24) * 2 - 1; }

int main(int argc, char **argv)
{
    ck_err err = {0};
    sh_world *w;
    if (sh_init(&argc, &argv, &w, &err)) {
        fprintf(stderr, "skip: sh_init: %s\n", ck_err_msg(&err));
        return 77;
    }
    tr_config cfg = {.vocab = 11, .seq = 5, .layers = 2, .dim = 8, .heads = 2, .seed = 3};
    tr_model m;
    if (tr_model_build(w, &cfg, &m, &err) || tr_model_materialize(&m, NULL, NULL, &err)) {
        fprintf(stderr, "gradcheck: %s\n", ck_err_msg(&err));
        return 1;
    }
    sh_param *p[MAX_PARAMS];
    int np = 0;
    p[np++] = m.wte;
    p[np++] = m.wpe;
    for (int l = 0; l < cfg.layers; l++)
        for (int i = 0; i < TR_BLOCK_PARAMS; i++)
            p[np++] = m.bs[l].p[i];
    p[np++] = m.lnf_w;
    p[np++] = m.lnf_b;

    uint64_t rng = 42;
    for (int i = 0; i < np; i++) {
        sh_tensor *t;
        sh_param_value(p[i], &t, &err);
        float *v = t->data;
        for (size_t k = 0; k < t->numel; k++)
            v[k] += 0.3f * uniform(&rng);
    }
    int B = 3, N = B * cfg.seq, tok[15], tgt[15];
    for (int i = 0; i < N; i++) {
        tok[i] = (int)(next(&rng) % (uint64_t)cfg.vocab);
        tgt[i] = (int)(next(&rng) % (uint64_t)cfg.vocab);
    }
    sh_tensor logits = SH_TENSOR_INIT, dlogits = SH_TENSOR_INIT;
    double loss = loss_of(&m, tok, tgt, B, &logits, &dlogits, true, &err);
    if (isnan(loss)) {
        fprintf(stderr, "gradcheck: %s\n", ck_err_msg(&err));
        return 1;
    }
    printf("loss %.6f (log V = %.6f)\n", loss, log(cfg.vocab));
    int bad = 0;
    const float h = 1e-3f;
    for (int i = 0; i < np; i++) {
        sh_tensor *t;
        float *g;
        sh_param_value(p[i], &t, &err);
        sh_param_grad(p[i], &g, &err);
        float *v = t->data;
        double gmax = 0.0, worst = 0.0;
        for (size_t k = 0; k < t->numel; k++)
            gmax = fmax(gmax, fabs(g[k]));
        for (size_t k = 0; k < t->numel; k++) {
            float keep = v[k];
            v[k] = keep + h;
            double lp = loss_of(&m, tok, tgt, B, &logits, &dlogits, false, &err);
            v[k] = keep - h;
            double lm = loss_of(&m, tok, tgt, B, &logits, &dlogits, false, &err);
            v[k] = keep;
            double fd = (lp - lm) / (2.0 * h), diff = fabs(fd - g[k]);
            worst = fmax(worst, diff / (gmax + 1e-12));
            if (diff > 1e-3 * gmax + 1e-2 * fabs(fd)) {
                if (bad++ < 20)
                    fprintf(stderr, "%s[%zu]: backward %.8g, finite difference %.8g\n",
                            sh_param_name(p[i]), k, g[k], fd);
            }
        }
        printf("%-22s %6zu elements  max |grad| %.3e  worst |diff|/max %.2e\n",
               sh_param_name(p[i]), t->numel, gmax, worst);
        if (gmax == 0.0) {
            fprintf(stderr, "%s: gradient is all zero\n", sh_param_name(p[i]));
            bad++;
        }
    }
    /* A token outside the vocabulary is refused before it reaches the encoder. */
    tok[4] = cfg.vocab;
    ck_err e2 = {0};
    if (tr_model_forward(&m, tok, B, &logits, &e2) != -EINVAL ||
        !strstr(ck_err_msg(&e2), "token 11")) {
        fprintf(stderr, "token %d: forward gave '%s', not a refusal naming it\n", cfg.vocab,
                ck_err_msg(&e2));
        bad++;
    }
    sh_tensor_free(&logits);
    sh_tensor_free(&dlogits);
    tr_model_free(&m);
    sh_finalize(w);
    if (bad) {
        fprintf(stderr, "gradcheck: %d element(s) disagree\n", bad);
        return 1;
    }
    printf("gradcheck ok: %d tensors\n", np);
    return 0;
}
