/* layers.c - see layers.h. GEMMs go through OpenBLAS (one thread per rank). */
#include "layers.h"

#include <cblas.h>
#include <math.h>

#define LN_EPS 1e-5f

void tr_linear_fwd(float *y, const float *x, const float *W, const float *b, int N, int K,
                   int O)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, O, K, 1.0f, x, K, W, K, 0.0f, y, O);
    for (int n = 0; b && n < N; n++)
        cblas_saxpy(O, 1.0f, b, 1, y + (size_t)n * O, 1);
}

void tr_linear_bwd(float *dx, float *dW, float *db, const float *dy, const float *x,
                   const float *W, int N, int K, int O, int accumulate)
{
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, O, K, N, 1.0f, dy, O, x, K, 1.0f, dW,
                K);
    for (int n = 0; db && n < N; n++)
        cblas_saxpy(O, 1.0f, dy + (size_t)n * O, 1, db, 1);
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, K, O, 1.0f, dy, O, W, K,
                    accumulate ? 1.0f : 0.0f, dx, K);
}

void tr_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *w,
                      const float *b, int N, int C)
{
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * C;
        float *yr = y + (size_t)n * C;
        float m = 0.0f, v = 0.0f;
        for (int c = 0; c < C; c++)
            m += xr[c];
        m /= (float)C;
        for (int c = 0; c < C; c++)
            v += (xr[c] - m) * (xr[c] - m);
        float s = 1.0f / sqrtf(v / (float)C + LN_EPS);
        for (int c = 0; c < C; c++)
            yr[c] = (xr[c] - m) * s * w[c] + b[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

void tr_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *x,
                      const float *mean, const float *rstd, const float *w, int N, int C)
{
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * C, *dyr = dy + (size_t)n * C;
        float *dxr = dx + (size_t)n * C;
        /* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w. */
        float gm = 0.0f, gxm = 0.0f;
        for (int c = 0; c < C; c++) {
            float xhat = (xr[c] - mean[n]) * rstd[n];
            float g = dyr[c] * w[c];
            gm += g;
            gxm += g * xhat;
            dw[c] += dyr[c] * xhat;
            db[c] += dyr[c];
        }
        gm /= (float)C;
        gxm /= (float)C;
        for (int c = 0; c < C; c++) {
            float xhat = (xr[c] - mean[n]) * rstd[n];
            dxr[c] += rstd[n] * (dyr[c] * w[c] - gm - xhat * gxm);
        }
    }
}

void tr_attention_fwd(float *out, float *att, const float *qkv, int B, int T, int C, int H)
{
    int hs = C / H, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const float *q = qkv + (size_t)b * T * C3 + h * hs;
            float *a = att + ((size_t)b * H + h) * T * T;
            /* Scores for every pair, then the mask: the upper triangle costs as much
             * again in the GEMM but keeps this a single BLAS call. */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, C3,
                        q + C, C3, 0.0f, a, T);
            for (int t = 0; t < T; t++) {
                float *r = a + (size_t)t * T, mx = r[0], sum = 0.0f;
                for (int u = 1; u <= t; u++)
                    mx = r[u] > mx ? r[u] : mx;
                for (int u = 0; u <= t; u++) {
                    r[u] = expf(r[u] - mx);
                    sum += r[u];
                }
                for (int u = 0; u <= t; u++)
                    r[u] /= sum;
                for (int u = t + 1; u < T; u++)
                    r[u] = 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, a, T,
                        q + 2 * C, C3, 0.0f, out + (size_t)b * T * C + h * hs, C);
        }
}

void tr_attention_bwd(float *dqkv, float *dp, const float *dout, const float *qkv,
                      const float *att, int B, int T, int C, int H)
{
    int hs = C / H, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const float *q = qkv + (size_t)b * T * C3 + h * hs;
            const float *a = att + ((size_t)b * H + h) * T * T;
            const float *dO = dout + (size_t)b * T * C + h * hs;
            float *dq = dqkv + (size_t)b * T * C3 + h * hs;
            /* dv = a^T dO;  dp = dO v^T */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, dO, C,
                        0.0f, dq + 2 * C, C3);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dO, C,
                        q + 2 * C, C3, 0.0f, dp, T);
            /* Softmax backward, row by row: ds = a * (dp - sum(a * dp)) * scale. The
             * masked entries have a = 0, so they get no gradient. */
            for (int t = 0; t < T; t++) {
                float *r = dp + (size_t)t * T;
                const float *ar = a + (size_t)t * T;
                float dot = 0.0f;
                for (int u = 0; u <= t; u++)
                    dot += ar[u] * r[u];
                for (int u = 0; u < T; u++)
                    r[u] = u <= t ? ar[u] * (r[u] - dot) * scale : 0.0f;
            }
            /* dq = ds k;  dk = ds^T q */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, dp, T,
                        q + C, C3, 0.0f, dq, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, dp, T, q, C3,
                        0.0f, dq + C, C3);
        }
}

void tr_embed_fwd(float *out, const int *tok, const float *wte, const float *wpe, int B,
                  int T, int C)
{
    for (int n = 0; n < B * T; n++) {
        const float *e = wte + (size_t)tok[n] * C, *p = wpe + (size_t)(n % T) * C;
        for (int c = 0; c < C; c++)
            out[(size_t)n * C + c] = e[c] + p[c];
    }
}

void tr_embed_bwd(float *dwte, float *dwpe, const float *dout, const int *tok, int B, int T,
                  int C)
{
    for (int n = 0; n < B * T; n++) {
        cblas_saxpy(C, 1.0f, dout + (size_t)n * C, 1, dwte + (size_t)tok[n] * C, 1);
        cblas_saxpy(C, 1.0f, dout + (size_t)n * C, 1, dwpe + (size_t)(n % T) * C, 1);
    }
}

double tr_cross_entropy(float *dlogits, const float *logits, const int *targets, int N, int V,
                        float scale)
{
    double total = 0.0;
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * V;
        float *d = dlogits + (size_t)n * V;
        float mx = l[0];
        for (int v = 1; v < V; v++)
            mx = l[v] > mx ? l[v] : mx;
        double sum = 0.0;
        for (int v = 0; v < V; v++)
            sum += exp((double)(l[v] - mx));
        double lse = (double)mx + log(sum);
        total += lse - (double)l[targets[n]];
        for (int v = 0; v < V; v++)
            d[v] = (float)exp((double)l[v] - lse) * scale;
        d[targets[n]] -= scale;
    }
    return total;
}
