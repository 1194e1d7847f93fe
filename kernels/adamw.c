/* adamw.c - CPU loop of adamw_elem.h. */
#include "adamw.h"

#include <math.h>

void k_adamw_hparams_for_step(k_adamw_hparams *h, float lr, float beta1, float beta2,
                              float eps, float weight_decay, long step)
{
    /* Bias corrections in double: b^t for large t underflows gracefully and the two
     * derived factors are rounded to f32 once, as torch does with its Python floats. */
    double bc1 = 1.0 - pow((double)beta1, (double)step);
    double bc2 = 1.0 - pow((double)beta2, (double)step);
    h->lr = lr;
    h->beta1 = beta1;
    h->beta2 = beta2;
    h->eps = eps;
    h->weight_decay = weight_decay;
    h->step_size = (float)(lr / bc1);
    h->bc2_sqrt = (float)sqrt(bc2);
}

void k_adamw_step(float *p, const float *g, float *m, float *v, size_t n,
                  const k_adamw_hparams *h)
{
    for (size_t i = 0; i < n; i++)
        k_adamw_elem(&p[i], g[i], &m[i], &v[i], h);
}

void k_adamw_multi(const k_adamw_tensor *t, int nt, const k_adamw_hparams *h)
{
    for (int i = 0; i < nt; i++) {
        k_adamw_hparams hi = *h;
        hi.step_size = t[i].step_size;
        hi.bc2_sqrt = t[i].bc2_sqrt;
        k_adamw_step(t[i].p, t[i].g, t[i].m, t[i].v, t[i].n, &hi);
    }
}
