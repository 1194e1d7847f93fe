/* Cross-entropy's CPU loop against the formula in double (odd V, large logits that
 * would overflow exp without the max subtracted): per-row losses, and the gradient
 * (softmax - onehot) * scale. */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "rand.h"
#include "xent.h"

static void shape(int N, int V, float spread)
{
    float *l = malloc((size_t)N * V * 4), *d = malloc((size_t)N * V * 4);
    double *loss = malloc((size_t)N * 8), lw = 0, dw = 0;
    int *tgt = malloc((size_t)N * sizeof(int));
    for (int i = 0; i < N * V; i++)
        l[i] = spread * test_uniform();
    for (int n = 0; n < N; n++)
        tgt[n] = (n * 5 + 2) % V;
    const float scale = 1.0f / 3.0f;
    k_xent(d, loss, l, tgt, N, V, scale);
    for (int n = 0; n < N; n++) {
        const float *r = l + (size_t)n * V;
        double mx = r[0], sum = 0;
        for (int v = 1; v < V; v++)
            mx = fmax(mx, r[v]);
        for (int v = 0; v < V; v++)
            sum += exp(r[v] - mx);
        double lse = mx + log(sum);
        lw = fmax(lw, fabs(loss[n] - (lse - r[tgt[n]])) / (lse - r[tgt[n]] + 1e-300));
        for (int v = 0; v < V; v++) {
            double want = (exp(r[v] - lse) - (v == tgt[n])) * scale;
            dw = fmax(dw, fabs(d[(size_t)n * V + v] - want));
        }
    }
    CHECK(isfinite(lw) && lw <= 1e-6, "%dx%d spread %g: loss rel err %g", N, V, spread, lw);
    CHECK(dw <= 1e-7, "%dx%d spread %g: gradient abs err %g", N, V, spread, dw);
    printf("cross-entropy %dx%d (logits in +-%g): loss max rel err %.3g, gradient max abs "
           "err %.3g\n", N, V, spread, lw, dw);
    free(l); free(d); free(loss); free(tgt);
}

int main(void)
{
    shape(1, 2, 1.0f);
    shape(7, 13, 4.0f);
    shape(9, 257, 500.0f);
    CHECK_DONE();
}
