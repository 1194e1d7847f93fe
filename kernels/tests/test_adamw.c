/* AdamW step against a double-precision transcription of torch.optim.AdamW's update,
 * over several steps (bias correction changes every step) and with weight decay. */
#include <math.h>
#include <string.h>

#include "adamw.h"
#include "check.h"

int main(void)
{
    enum { N = 7, STEPS = 5 };
    float p[N], m[N] = {0}, v[N] = {0}, g[N];
    double pd[N], md[N] = {0}, vd[N] = {0};
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
    for (int i = 0; i < N; i++)
        pd[i] = p[i] = 0.5f - 0.15f * (float)i;
    for (long t = 1; t <= STEPS; t++) {
        for (int i = 0; i < N; i++)
            g[i] = (float)sin((double)(i + 1) * (double)t) * (i == 3 ? 0.0f : 1.0f);
        k_adamw_hparams h;
        k_adamw_hparams_for_step(&h, lr, b1, b2, eps, wd, t);
        k_adamw_step(p, g, m, v, N, &h);
        double bc1 = 1 - pow(b1, (double)t), bc2 = 1 - pow(b2, (double)t);
        for (int i = 0; i < N; i++) {
            pd[i] *= 1 - (double)lr * wd;
            md[i] = b1 * md[i] + (1 - (double)b1) * g[i];
            vd[i] = b2 * vd[i] + (1 - (double)b2) * g[i] * g[i];
            pd[i] -= lr / bc1 * md[i] / (sqrt(vd[i]) / sqrt(bc2) + eps);
        }
    }
    for (int i = 0; i < N; i++) {
        CHECK(fabs(p[i] - pd[i]) <= 1e-6 * (1 + fabs(pd[i])), "p[%d] = %.9g, want %.9g", i,
              p[i], pd[i]);
        CHECK(fabs(m[i] - md[i]) <= 1e-6, "m[%d] = %.9g, want %.9g", i, m[i], md[i]);
        CHECK(fabs(v[i] - vd[i]) <= 1e-6, "v[%d] = %.9g, want %.9g", i, v[i], vd[i]);
    }
    /* The fused step over several tensors, each with its own step count, is the
     * per-tensor step bit for bit. */
    float a[2][N], am[2][N] = {{0}}, av[2][N] = {{0}}, b[2][N], bm[2][N] = {{0}},
          bv[2][N] = {{0}};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < N; i++)
            a[k][i] = b[k][i] = 0.25f * (float)(i - k);
    for (long t = 1; t <= STEPS; t++) {
        k_adamw_hparams h0, h1;
        k_adamw_hparams_for_step(&h0, lr, b1, b2, eps, wd, t);
        k_adamw_hparams_for_step(&h1, lr, b1, b2, eps, wd, t + 3);
        k_adamw_step(a[0], g, am[0], av[0], N, &h0);
        k_adamw_step(a[1], g, am[1], av[1], N, &h1);
        k_adamw_tensor ts[2] = {{b[0], bm[0], bv[0], g, N, h0.step_size, h0.bc2_sqrt},
                                {b[1], bm[1], bv[1], g, N, h1.step_size, h1.bc2_sqrt}};
        k_adamw_multi(ts, 2, &h0);
    }
    CHECK(memcmp(a, b, sizeof a) == 0 && memcmp(am, bm, sizeof am) == 0 &&
          memcmp(av, bv, sizeof av) == 0, "the fused step differs from the per-tensor one");
    /* A zero gradient from the start still decays the parameter and keeps state 0. */
    CHECK(m[3] == 0.0f && v[3] == 0.0f, "zero-gradient state m=%g v=%g", m[3], v[3]);
    CHECK_DONE();
}
