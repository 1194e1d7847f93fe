/* LayerNorm's CPU loops against the formula in double on odd shapes: the forward
 * directly, the backward (dx, dw, db) against central differences of sum(dy * y). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "layernorm.h"
#include "rand.h"

/* sum over the rows of dy * layernorm(x) in double. */
static double loss(const double *x, const double *w, const double *b, const float *dy, int N,
                   int C)
{
    double L = 0;
    for (int n = 0; n < N; n++) {
        const double *r = x + (size_t)n * C;
        double m = 0, v = 0;
        for (int c = 0; c < C; c++)
            m += r[c];
        m /= C;
        for (int c = 0; c < C; c++)
            v += (r[c] - m) * (r[c] - m);
        double s = 1.0 / sqrt(v / C + 1e-5);
        for (int c = 0; c < C; c++)
            L += dy[(size_t)n * C + c] * ((r[c] - m) * s * w[c] + b[c]);
    }
    return L;
}

static void shape(int N, int C)
{
    size_t NC = (size_t)N * C;
    float *x = malloc(NC * 4), *y = malloc(NC * 4), *dy = malloc(NC * 4), *dx = malloc(NC * 4);
    float *w = malloc(C * 4), *b = malloc(C * 4), *dw = malloc(C * 4), *db = malloc(C * 4);
    float *mean = malloc(N * 4), *rstd = malloc(N * 4);
    double *xd = malloc(NC * 8), *wd = malloc(C * 8), *bd = malloc(C * 8);
    for (size_t i = 0; i < NC; i++) {
        xd[i] = x[i] = 3.0f * test_uniform() + 0.5f;
        dy[i] = test_uniform();
        dx[i] = 0.25f;    /* the backward adds */
    }
    for (int c = 0; c < C; c++) {
        wd[c] = w[c] = 1.0f + 0.5f * test_uniform();
        bd[c] = b[c] = test_uniform();
        dw[c] = db[c] = 0.0f;
    }
    k_layernorm(y, mean, rstd, x, w, b, N, C);
    double worst = 0;
    for (int n = 0; n < N; n++) {
        double m = 0, v = 0;
        for (int c = 0; c < C; c++)
            m += xd[(size_t)n * C + c];
        m /= C;
        for (int c = 0; c < C; c++)
            v += (xd[(size_t)n * C + c] - m) * (xd[(size_t)n * C + c] - m);
        double s = 1.0 / sqrt(v / C + 1e-5);
        for (int c = 0; c < C; c++) {
            double want = (xd[(size_t)n * C + c] - m) * s * w[c] + b[c];
            worst = fmax(worst, fabs(y[(size_t)n * C + c] - want));
        }
        CHECK(fabs(mean[n] - m) <= 1e-6 * (1 + fabs(m)) && fabs(rstd[n] - s) <= 1e-5 * s,
              "%dx%d row %d: mean %g rstd %g, want %g %g", N, C, n, mean[n], rstd[n], m, s);
    }
    CHECK(worst <= 1e-5, "%dx%d forward: max abs err %g", N, C, worst);

    k_layernorm_bwd(dx, dw, db, dy, x, mean, rstd, w, N, C);
    double h = 1e-6, gworst = 0;
    for (size_t i = 0; i < NC; i++) {
        double keep = xd[i];
        xd[i] = keep + h;
        double up = loss(xd, wd, bd, dy, N, C);
        xd[i] = keep - h;
        double fd = (up - loss(xd, wd, bd, dy, N, C)) / (2 * h);
        xd[i] = keep;
        gworst = fmax(gworst, fabs(dx[i] - 0.25f - fd));
    }
    for (int c = 0; c < C; c++) {
        double keep = wd[c];
        wd[c] = keep + h;
        double up = loss(xd, wd, bd, dy, N, C);
        wd[c] = keep - h;
        double fdw = (up - loss(xd, wd, bd, dy, N, C)) / (2 * h);
        wd[c] = keep;
        double fdb = 0;
        for (int n = 0; n < N; n++)
            fdb += dy[(size_t)n * C + c];
        gworst = fmax(gworst, fmax(fabs(dw[c] - fdw), fabs(db[c] - fdb)));
    }
    CHECK(gworst <= 2e-4, "%dx%d backward: max abs err %g against finite differences", N, C,
          gworst);
    printf("layernorm %dx%d: forward max abs err %.3g, backward %.3g\n", N, C, worst, gworst);
    free(x); free(y); free(dy); free(dx); free(w); free(b); free(dw); free(db);
    free(mean); free(rstd); free(xd); free(wd); free(bd);
}

int main(void)
{
    static const int shapes[][2] = {{1, 1}, {1, 7}, {5, 13}, {3, 64}, {17, 33}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        shape(shapes[i][0], shapes[i][1]);
    CHECK_DONE();
}
