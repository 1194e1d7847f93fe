/* Sum of squares (widened to double), scale and scale-add. */
#include <float.h>
#include <math.h>

#include "check.h"
#include "norm.h"

int main(void)
{
    float x[4] = {3.0f, -4.0f, 0.0f, 1e-4f};
    double s = k_sumsq(x, 4);
    CHECK(fabs(s - (25.0 + 1e-8)) < 1e-12, "sumsq = %.17g", s);
    CHECK(k_sumsq(x, 0) == 0.0, "empty sumsq");
    /* Squares past FLT_MAX stay finite in double. */
    float big[2] = {FLT_MAX, FLT_MAX};
    CHECK(isfinite(k_sumsq(big, 2)), "sumsq of FLT_MAX overflowed");

    k_scale(x, 0.5f, 4);
    CHECK(x[0] == 1.5f && x[1] == -2.0f && x[2] == 0.0f, "scale: %g %g %g", x[0], x[1], x[2]);

    float d[3] = {1.0f, 2.0f, 3.0f}, src[3] = {4.0f, -2.0f, 0.5f};
    k_scale_add(d, src, 0.25f, 3);
    CHECK(d[0] == 2.0f && d[1] == 1.5f && d[2] == 3.125f, "scale_add: %g %g %g", d[0], d[1],
          d[2]);
    CHECK_DONE();
}
