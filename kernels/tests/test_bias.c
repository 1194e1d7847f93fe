/* Bias add and bias gradient's CPU loops against the formula on odd shapes; the
 * replay of the GPU's chunked gradient against the formula across several chunks. */
#include <math.h>
#include <stdlib.h>

#include "bias.h"
#include "check.h"
#include "rand.h"

int main(void)
{
    enum { N = 9, O = 13 };
    float y[N * O], y0[N * O], b[O], db[O], dy[N * O];
    for (int i = 0; i < N * O; i++) {
        y0[i] = y[i] = test_uniform();
        dy[i] = test_uniform();
    }
    for (int o = 0; o < O; o++) {
        b[o] = test_uniform();
        db[o] = 0.125f;   /* the gradient adds */
    }
    k_bias_add(y, b, N, O);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++)
            CHECK(y[n * O + o] == y0[n * O + o] + b[o], "y[%d,%d] = %g", n, o, y[n * O + o]);
    k_bias_grad(db, dy, N, O);
    double worst = 0;
    for (int o = 0; o < O; o++) {
        double want = 0.125;
        for (int n = 0; n < N; n++)
            want += dy[n * O + o];
        worst = fmax(worst, fabs(db[o] - want));
    }
    CHECK(worst <= 1e-6, "bias gradient: max abs err %g", worst);
    printf("bias %dx%d: add exact, gradient max abs err %.3g\n", N, O, worst);

    enum { NT = 2 * K_COL_ROWS + 3, OT = 7 };
    float *dyt = malloc(sizeof(float) * NT * OT), dbt[OT];
    float *part = malloc(sizeof(float) * NT * OT);
    for (int i = 0; i < NT * OT; i++)
        dyt[i] = test_uniform();
    for (int o = 0; o < OT; o++)
        dbt[o] = 0.125f;
    k_bias_grad_tiled(dbt, dyt, NT, OT, part);
    worst = 0;
    for (int o = 0; o < OT; o++) {
        double want = 0.125;
        for (int n = 0; n < NT; n++)
            want += dyt[n * OT + o];
        worst = fmax(worst, fabs(dbt[o] - want));
    }
    CHECK(worst <= 1e-5, "chunked bias gradient: max abs err %g", worst);
    printf("bias gradient, %d chunks of rows, %dx%d: max abs err %.3g\n", k_col_chunks(NT), NT,
           OT, worst);
    free(dyt);
    free(part);
    CHECK_DONE();
}
