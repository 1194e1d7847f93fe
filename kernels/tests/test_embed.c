/* The encoder's CPU loops against the formula, with repeated tokens (the backward
 * adds every occurrence) and odd shapes; positions wrap every T rows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "embed.h"
#include "rand.h"

int main(void)
{
    enum { V = 11, T = 5, B = 3, N = B * T, C = 7 };
    float wte[V * C], wpe[T * C], out[N * C], dout[N * C], dwte[V * C], dwpe[T * C];
    double want_te[V * C] = {0}, want_pe[T * C] = {0};
    int tok[N];
    for (int i = 0; i < V * C; i++)
        wte[i] = test_uniform();
    for (int i = 0; i < T * C; i++)
        wpe[i] = test_uniform();
    for (int n = 0; n < N; n++)
        tok[n] = n % 4 == 0 ? 3 : (n * 7) % V;   /* token 3 repeats */
    for (int i = 0; i < N * C; i++)
        dout[i] = test_uniform();
    k_embed(out, tok, wte, wpe, N, T, C);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            CHECK(out[n * C + c] == wte[tok[n] * C + c] + wpe[(n % T) * C + c],
                  "row %d col %d: %g", n, c, out[n * C + c]);
    for (int i = 0; i < V * C; i++)
        dwte[i] = 0.5f;   /* the backward adds */
    memset(dwpe, 0, sizeof dwpe);
    k_embed_bwd(dwte, dwpe, dout, tok, N, T, C);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            want_te[tok[n] * C + c] += dout[n * C + c];
            want_pe[(n % T) * C + c] += dout[n * C + c];
        }
    double worst = 0;
    for (int i = 0; i < V * C; i++)
        worst = fmax(worst, fabs(dwte[i] - 0.5 - want_te[i]));
    for (int i = 0; i < T * C; i++)
        worst = fmax(worst, fabs(dwpe[i] - want_pe[i]));
    CHECK(worst <= 1e-6, "backward: max abs err %g", worst);
    printf("embedding %dx%d (V %d, T %d): forward exact, backward max abs err %.3g\n", N, C,
           V, T, worst);
    CHECK_DONE();
}
