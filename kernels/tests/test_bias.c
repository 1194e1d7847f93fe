/* Bias add and bias gradient's CPU loops against the formula on odd shapes. */
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
    CHECK_DONE();
}
