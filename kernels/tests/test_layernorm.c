/* LayerNorm's CPU loops against the formula in double on odd shapes: the forward
 * directly, the backward (dx, dw, db) against central differences of sum(dy * y).
 * Then the replays of the GPU's LayerNorm (warp lanes, chunked column sums; the
 * residual form) against those loops: equal up to the order of the sums. */
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

static double max_abs(const float *a, const float *b, size_t n)
{
    double e = 0;
    for (size_t i = 0; i < n; i++)
        e = fmax(e, fabs((double)a[i] - b[i]));
    return e;
}

static void tiled(int N, int C)
{
    size_t NC = (size_t)N * C;
    float *x = malloc(NC * 4), *x2 = malloc(NC * 4), *dy = malloc(NC * 4), *w = malloc(C * 4),
          *b = malloc(C * 4);
    float *y = malloc(NC * 4), *yt = malloc(NC * 4), *mean = malloc(N * 4),
          *rstd = malloc(N * 4), *mt = malloc(N * 4), *rt = malloc(N * 4);
    float *dx = malloc(NC * 4), *dxt = malloc(NC * 4), *dw = malloc(C * 4);
    float *dwt = malloc(C * 4), *db = malloc(C * 4), *dbt = malloc(C * 4);
    float *part = malloc(k_layernorm_part_floats(N, C) * 4);
    for (size_t i = 0; i < NC; i++) {
        x[i] = 3.0f * test_uniform() + 0.5f;
        x2[i] = test_uniform();
        dy[i] = test_uniform();
        dx[i] = dxt[i] = 0.25f;
    }
    for (int c = 0; c < C; c++) {
        w[c] = 1.0f + 0.5f * test_uniform();
        b[c] = test_uniform();
        dw[c] = dwt[c] = db[c] = dbt[c] = 0.5f;
    }
    k_layernorm(y, mean, rstd, x, w, b, N, C);
    k_layernorm_tiled(yt, mt, rt, x, w, b, N, C);
    double ey = max_abs(y, yt, NC), em = max_abs(mean, mt, N), er = max_abs(rstd, rt, N);
    CHECK(ey <= 1e-5 && em <= 1e-6 && er <= 1e-5, "%dx%d tiled forward: y %g mean %g rstd %g",
          N, C, ey, em, er);
    k_layernorm_bwd(dx, dw, db, dy, x, mean, rstd, w, N, C);
    k_layernorm_bwd_tiled(dxt, dwt, dbt, dy, x, mean, rstd, w, N, C, part);
    double edx = max_abs(dx, dxt, NC), edw = max_abs(dw, dwt, C), edb = max_abs(db, dbt, C);
    CHECK(edx <= 1e-5 && edw <= 1e-4 && edb <= 1e-4,
          "%dx%d tiled backward: dx %g dw %g db %g", N, C, edx, edw, edb);
    /* The residual form: x2 + x exactly as k_scale_add makes it, then the same rows. */
    float *sum = malloc(NC * 4);
    for (size_t i = 0; i < NC; i++)
        sum[i] = x2[i] + 1.0f * x[i];
    k_residual_layernorm_tiled(x2, yt, mt, rt, x, w, b, N, C);
    CHECK(memcmp(sum, x2, NC * 4) == 0, "%dx%d residual: x2 + x differs", N, C);
    k_layernorm_tiled(y, mean, rstd, sum, w, b, N, C);
    CHECK(memcmp(y, yt, NC * 4) == 0 && memcmp(mean, mt, N * 4) == 0 &&
          memcmp(rstd, rt, N * 4) == 0, "%dx%d residual: not the tiled LayerNorm of x2 + x",
          N, C);
    printf("layernorm tiled %dx%d: against the loops y %.3g rstd %.3g dx %.3g dw %.3g "
           "db %.3g\n", N, C, ey, er, edx, edw, edb);
    free(x); free(x2); free(dy); free(w); free(b); free(y); free(yt); free(mean); free(rstd);
    free(mt); free(rt); free(dx); free(dxt); free(dw); free(dwt); free(db); free(dbt);
    free(part); free(sum);
}

int main(void)
{
    static const int shapes[][2] = {{1, 1}, {1, 7}, {5, 13}, {3, 64}, {17, 33}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        shape(shapes[i][0], shapes[i][1]);
    static const int tshapes[][2] = {{1, 1}, {5, 13}, {64, 32}, {65, 33}, {130, 97}, {3, 768}};
    for (size_t i = 0; i < sizeof tshapes / sizeof *tshapes; i++)
        tiled(tshapes[i][0], tshapes[i][1]);
    CHECK_DONE();
}
