/* The causal softmax's CPU loops against the formula in double on odd T, several
 * stacked matrices: rows sum to 1, zeros above the diagonal, and the backward against
 * the Jacobian written out (ds_u = a_u (dp_u - sum_v a_v dp_v)). */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "rand.h"
#include "softmax.h"

static void shape(int T, int mats)
{
    size_t rows = (size_t)T * mats, n = rows * T;
    float *s = malloc(n * 4), *a = malloc(n * 4), *dp = malloc(n * 4), *g = malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        a[i] = s[i] = 6.0f * test_uniform();
        g[i] = dp[i] = test_uniform();
    }
    k_softmax_causal(a, rows, T);
    double fw = 0, bw = 0;
    const float scale = 0.37f;
    for (size_t r = 0; r < rows; r++) {
        int t = (int)(r % (size_t)T);
        const float *sr = s + r * T, *ar = a + r * T;
        double mx = sr[0], sum = 0, dot = 0;
        for (int u = 1; u <= t; u++)
            mx = fmax(mx, sr[u]);
        for (int u = 0; u <= t; u++)
            sum += exp(sr[u] - mx);
        for (int u = 0; u < T; u++) {
            double want = u <= t ? exp(sr[u] - mx) / sum : 0.0;
            fw = fmax(fw, fabs(ar[u] - want));
            dot += want * g[r * T + u];
        }
        for (int u = t + 1; u < T; u++)
            CHECK(ar[u] == 0.0f, "T %d row %zu col %d above the diagonal: %g", T, r, u, ar[u]);
        for (int u = 0; u < T; u++) {
            double p = u <= t ? exp(sr[u] - mx) / sum : 0.0;
            double want = p * (g[r * T + u] - dot) * scale;
            g[r * T + u] = (float)want;   /* kept for the comparison below */
        }
    }
    k_softmax_causal_bwd(dp, a, rows, T, scale);
    for (size_t i = 0; i < n; i++)
        bw = fmax(bw, fabs(dp[i] - g[i]));
    CHECK(fw <= 1e-6, "T %d forward: max abs err %g", T, fw);
    CHECK(bw <= 1e-6, "T %d backward: max abs err %g", T, bw);
    printf("causal softmax T=%d x %d: forward max abs err %.3g, backward %.3g\n", T, mats, fw,
           bw);
    free(s); free(a); free(dp); free(g);
}

int main(void)
{
    shape(1, 3);
    shape(7, 5);
    shape(33, 2);
    CHECK_DONE();
}
