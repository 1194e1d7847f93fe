/* The tiled causal attention's CPU replay (attention.c, the GPU kernels' arithmetic)
 * against plain softmax(q k^T / sqrt(hs), causal) v written out in double, forward
 * and backward, on shapes that hit the tiling's edges: a single token, sequences
 * shorter than, equal to and one past a key tile, heads of 1, 5, 64 (two lanes), 100
 * (four lanes, padded to 128) and 256 (eight lanes) columns, several heads and
 * sequences. A head wider than K_ATTN_HS_MAX is reported as unsupported. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "check.h"
#include "rand.h"

/* The reference for one (sequence, head): P (T x T), out, lse, and the gradients. */
static void reference(const float *qkv, const float *dout, int T, int C, int hs, size_t off,
                      double *out, double *lse, double *dq, double *dk, double *dv)
{
    size_t C3 = 3 * (size_t)C;
    double scale = 1.0 / sqrt((double)hs);
    double *P = calloc((size_t)T * T, sizeof *P), *dP = calloc((size_t)T * T, sizeof *dP);
#define Q(i, c) ((double)qkv[(size_t)(i) * C3 + off + (c)])
#define K(j, c) ((double)qkv[(size_t)(j) * C3 + C + off + (c)])
#define V(j, c) ((double)qkv[(size_t)(j) * C3 + 2 * C + off + (c)])
#define DO(i, c) ((double)dout[(size_t)(i) * C + off + (c)])
    for (int i = 0; i < T; i++) {
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j <= i; j++) {
            double s = 0;
            for (int c = 0; c < hs; c++)
                s += Q(i, c) * K(j, c);
            P[(size_t)i * T + j] = s * scale;
            mx = fmax(mx, s * scale);
        }
        for (int j = 0; j <= i; j++)
            sum += exp(P[(size_t)i * T + j] - mx);
        lse[i] = mx + log(sum);
        for (int j = 0; j <= i; j++)
            P[(size_t)i * T + j] = exp(P[(size_t)i * T + j] - lse[i]);
        for (int c = 0; c < hs; c++) {
            double o = 0;
            for (int j = 0; j <= i; j++)
                o += P[(size_t)i * T + j] * V(j, c);
            out[(size_t)i * hs + c] = o;
        }
    }
    /* dP = dO V^T; dS = P (dP - rowsum(P dP)); dq = scale dS K; dk = scale dS^T Q;
     * dv = P^T dO. */
    for (int i = 0; i < T; i++) {
        double rs = 0;
        for (int j = 0; j <= i; j++) {
            double d = 0;
            for (int c = 0; c < hs; c++)
                d += DO(i, c) * V(j, c);
            dP[(size_t)i * T + j] = d;
            rs += P[(size_t)i * T + j] * d;
        }
        for (int j = 0; j <= i; j++)
            dP[(size_t)i * T + j] = P[(size_t)i * T + j] * (dP[(size_t)i * T + j] - rs);
    }
    for (int i = 0; i < T; i++)
        for (int c = 0; c < hs; c++) {
            double a = 0, b = 0, e = 0;
            for (int j = 0; j < T; j++) {
                if (j <= i)
                    a += dP[(size_t)i * T + j] * K(j, c);
                if (j >= i) {   /* i plays the key here */
                    b += dP[(size_t)j * T + i] * Q(j, c);
                    e += P[(size_t)j * T + i] * DO(j, c);
                }
            }
            dq[(size_t)i * hs + c] = a * scale;
            dk[(size_t)i * hs + c] = b * scale;
            dv[(size_t)i * hs + c] = e;
        }
#undef Q
#undef K
#undef V
#undef DO
    free(P);
    free(dP);
}

/* The largest |got - want| over the largest |want| (or over 1 when that is smaller). */
typedef struct err_acc {
    double diff, mag;
} err_acc;

static void acc(err_acc *e, float got, double want)
{
    e->diff = fmax(e->diff, fabs((double)got - want));
    e->mag = fmax(e->mag, fabs(want));
}

static double rel(const err_acc *e) { return e->diff / fmax(e->mag, 1.0); }

static void shape(int B, int T, int C, int H)
{
    int hs = C / H;
    size_t N = (size_t)B * T, C3 = 3 * (size_t)C;
    float *qkv = malloc(N * C3 * 4), *out = malloc(N * C * 4), *lse = malloc(N * H * 4);
    float *dout = malloc(N * C * 4), *dqkv = malloc(N * C3 * 4), *D = malloc(N * H * 4);
    for (size_t i = 0; i < N * C3; i++)
        qkv[i] = 2.0f * test_uniform();
    for (size_t i = 0; i < N * C; i++)
        dout[i] = test_uniform();
    memset(dqkv, 0xff, N * C3 * 4);   /* NaNs: every element must be written */
    k_attention_fwd(out, lse, qkv, B, T, C, H);
    k_attention_bwd(dqkv, D, dout, qkv, out, lse, B, T, C, H);

    double *ro = malloc((size_t)T * hs * 8), *rl = malloc((size_t)T * 8);
    double *rq = malloc((size_t)T * hs * 8), *rk = malloc((size_t)T * hs * 8),
           *rv = malloc((size_t)T * hs * 8);
    err_acc eo = {0}, el = {0}, eq = {0}, ek = {0}, ev = {0};
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            size_t off = (size_t)h * hs, row0 = (size_t)b * T;
            reference(qkv + row0 * C3, dout + row0 * C, T, C, hs, off, ro, rl, rq, rk, rv);
            for (int i = 0; i < T; i++) {
                acc(&el, lse[((size_t)b * H + h) * T + i], rl[i]);
                for (int c = 0; c < hs; c++) {
                    size_t r = row0 + i;
                    acc(&eo, out[r * C + off + c], ro[(size_t)i * hs + c]);
                    acc(&eq, dqkv[r * C3 + off + c], rq[(size_t)i * hs + c]);
                    acc(&ek, dqkv[r * C3 + C + off + c], rk[(size_t)i * hs + c]);
                    acc(&ev, dqkv[r * C3 + 2 * C + off + c], rv[(size_t)i * hs + c]);
                }
            }
        }
    printf("attention B=%d T=%-3d C=%-3d H=%d (hs %3d, %d lanes): out %.2g lse %.2g "
           "dq %.2g dk %.2g dv %.2g\n", B, T, C, H, hs, k_attn_lanes(k_attn_width(hs)),
           rel(&eo), rel(&el), rel(&eq), rel(&ek), rel(&ev));
    CHECK(rel(&eo) <= 2e-6 && rel(&el) <= 2e-6, "forward B=%d T=%d C=%d H=%d: out %g lse %g",
          B, T, C, H, rel(&eo), rel(&el));
    CHECK(rel(&eq) <= 1e-5 && rel(&ek) <= 1e-5 && rel(&ev) <= 1e-5,
          "backward B=%d T=%d C=%d H=%d: dq %g dk %g dv %g", B, T, C, H, rel(&eq), rel(&ek),
          rel(&ev));
    free(qkv); free(out); free(lse); free(dout); free(dqkv); free(D);
    free(ro); free(rl); free(rq); free(rk); free(rv);
}

int main(void)
{
    shape(1, 1, 1, 1);
    shape(2, 7, 15, 3);
    shape(1, 16, 10, 2);
    shape(3, 17, 12, 4);
    shape(2, 33, 128, 2);
    shape(1, 40, 200, 2);
    shape(1, 18, 256, 1);
    shape(2, 65, 64, 1);
    CHECK(k_attn_width(K_ATTN_HS_MAX) == K_ATTN_HS_MAX && k_attn_width(K_ATTN_HS_MAX + 1) == 0,
          "a head of %d columns is refused", K_ATTN_HS_MAX + 1);
    CHECK_DONE();
}
