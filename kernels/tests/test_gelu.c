/* GELU: known values, and the derivative against a central difference in double. */
#include <math.h>

#include "check.h"
#include "gelu.h"

static double gelu_d(double x)
{
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

int main(void)
{
    float x[7] = {-6.0f, -1.5f, -0.3f, 0.0f, 0.2f, 1.0f, 5.0f}, y[7], dx[7], ones[7];
    k_gelu(y, x, 7);
    for (int i = 0; i < 7; i++) {
        CHECK(fabs(y[i] - gelu_d(x[i])) < 1e-6, "gelu(%g) = %.9g, want %.9g", x[i], y[i],
              gelu_d(x[i]));
        ones[i] = 1.0f;
    }
    CHECK(y[3] == 0.0f, "gelu(0) = %g", y[3]);
    k_gelu_bwd(dx, x, ones, 7);
    for (int i = 0; i < 7; i++) {
        double h = 1e-5, fd = (gelu_d(x[i] + h) - gelu_d(x[i] - h)) / (2 * h);
        CHECK(fabs(dx[i] - fd) < 1e-5, "gelu'(%g) = %.9g, finite difference %.9g", x[i],
              dx[i], fd);
    }
    /* In place, scaled by dy. */
    float d2[2] = {2.0f, -3.0f}, x2[2] = {1.0f, 1.0f};
    k_gelu_bwd(d2, x2, d2, 2);
    CHECK(fabs(d2[0] / -d2[1] - 2.0f / 3.0f) < 1e-6, "in-place backward: %g %g", d2[0], d2[1]);
    CHECK_DONE();
}
