/* The CUDA twins against the CPU on random inputs of odd sizes, each printing its
 * maximum absolute and relative error: casts, AdamW, scale-add (bitwise: the same
 * *_elem.h arithmetic without fused multiply-adds), GELU (the device's tanhf: a few
 * ulps), flat copy-in / copy-out / chunk-cat through device memory (bitwise), and
 * cuBLAS GEMMs, f32 and bf16 inputs with every transpose, against a double-precision
 * reference (f32 accumulation: relative to sum |a||b|), and the GPT's layers (LayerNorm
 * forward, residual and backward and the bias gradient against the CPU replays of
 * their tiled sums, causal softmax forward and backward, the encoder and its
 * backward with a small and a large vocabulary, bias add: bitwise expected;
 * cross-entropy: the device's exp and log), and the tiled causal attention forward and
 * backward against its CPU replay. Exits 77 without a GPU. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "adamw.h"
#include "attention.h"
#include "bias.h"
#include "cast.h"
#include "cast_elem.h"
#include "check.h"
#include "embed.h"
#include "flat.h"
#include "gelu.h"
#include "kernels_cuda.h"
#include "layernorm.h"
#include "norm.h"
#include "softmax.h"
#include "xent.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float uniform(void)   /* [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 4503599627370496.0 - 1.0);
}

static void *dev(size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        fprintf(stderr, "cudaMalloc(%zu) failed\n", bytes);
        exit(1);
    }
    return p;
}
static void *up(const void *h, size_t b)
{
    void *d = dev(b);
    cudaMemcpy(d, h, b, cudaMemcpyHostToDevice);
    return d;
}
static void down(void *h, const void *d, size_t b) { cudaMemcpy(h, d, b, cudaMemcpyDeviceToHost); }

static float *rnd(size_t n, float scale, float shift)
{
    float *p = malloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++)
        p[i] = uniform() * scale + shift;
    return p;
}

/* Prints and returns the max abs and rel error of got against want. */
static double report(const char *what, size_t n, const float *want, const float *got,
                     double *max_rel)
{
    double ma = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        double a = fabs((double)got[i] - want[i]), r = a / (fabs(want[i]) + 1e-30);
        if (a > ma)
            ma = a;
        if (r > mr && a > 0)
            mr = r;
    }
    printf("%-34s n=%-8zu max abs err %.3g, max rel err %.3g%s\n", what, n, ma, mr,
           memcmp(want, got, n * sizeof(float)) ? "" : " (bitwise)");
    if (max_rel)
        *max_rel = mr;
    return ma;
}

static void elementwise(size_t n)
{
    float *x = malloc(n * 4 + 4), *g = malloc(n * 4 + 4), *cpu = malloc(n * 4 + 4),
          *gpu = malloc(n * 4 + 4), *m = calloc(n + 1, 4), *v = calloc(n + 1, 4);
    uint16_t *hc = malloc(n * 2 + 2), *hg = malloc(n * 2 + 2);
    for (size_t i = 0; i < n; i++) {
        x[i] = uniform() * 8.0f;
        g[i] = uniform() * 0.01f;
    }
    float *dx = up(x, n * 4), *dg = up(g, n * 4), *dm = up(m, n * 4), *dv = up(v, n * 4);
    float *dy = dev(n * 4);
    uint16_t *dh = dev(n * 2);

    k_cast_f32_to_bf16(hc, x, n);
    CHECK(k_cuda_cast_f32_to_bf16(dh, dx, n, NULL) == 0, "launch");
    down(hg, dh, n * 2);
    CHECK(memcmp(hc, hg, n * 2) == 0, "f32->bf16, n=%zu, differs from the CPU", n);
    k_cast_bf16_to_f32(cpu, hc, n);
    CHECK(k_cuda_cast_bf16_to_f32(dy, dh, n, NULL) == 0, "launch");
    down(gpu, dy, n * 4);
    report("cast bf16->f32", n, cpu, gpu, NULL);
    CHECK(memcmp(cpu, gpu, n * 4) == 0, "bf16->f32, n=%zu, differs from the CPU", n);

    k_gelu(cpu, x, n);
    CHECK(k_cuda_gelu(dy, dx, n, NULL) == 0, "launch");
    down(gpu, dy, n * 4);
    double rel;
    double abs_err = report("gelu", n, cpu, gpu, &rel);
    CHECK(abs_err <= 1e-5, "gelu, n=%zu: max abs err %g", n, abs_err);
    k_gelu_bwd(cpu, x, g, n);
    CHECK(k_cuda_gelu_bwd(dy, dx, dg, n, NULL) == 0, "launch");
    down(gpu, dy, n * 4);
    abs_err = report("gelu backward", n, cpu, gpu, &rel);
    CHECK(abs_err <= 1e-6, "gelu backward, n=%zu: max abs err %g", n, abs_err);

    float *p = malloc(n * 4 + 4);
    memcpy(p, x, n * 4);
    for (long t = 1; t <= 3; t++) {
        k_adamw_hparams hp;
        k_adamw_hparams_for_step(&hp, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
        k_adamw_step(p, g, m, v, n, &hp);
        k_adamw_tensor one = {dx, dm, dv, dg, n, hp.step_size, hp.bc2_sqrt};
        CHECK(k_cuda_adamw_multi(&one, 1, &hp, NULL) == 0, "launch");
    }
    down(gpu, dx, n * 4);
    report("adamw (3 steps)", n, p, gpu, NULL);
    CHECK(memcmp(p, gpu, n * 4) == 0, "AdamW, n=%zu, differs from the CPU", n);

    memcpy(cpu, p, n * 4);
    k_scale_add(cpu, g, -0.37f, n);
    CHECK(k_cuda_scale_add(dx, dg, -0.37f, n, NULL) == 0, "launch");
    down(gpu, dx, n * 4);
    report("scale-add", n, cpu, gpu, NULL);
    CHECK(memcmp(cpu, gpu, n * 4) == 0, "scale-add, n=%zu, differs from the CPU", n);

    cudaFree(dx); cudaFree(dg); cudaFree(dm); cudaFree(dv); cudaFree(dy); cudaFree(dh);
    free(x); free(g); free(cpu); free(gpu); free(m); free(v); free(hc); free(hg); free(p);
}

/* The fused AdamW over many tensors of odd sizes (empty ones, one past a chunk,
 * several chunks), each with its own step count, three steps: more tensors and chunks
 * than one launch carries. Bitwise the CPU's per-tensor loop. */
static void adamw_many(void)
{
    enum { NT = 61 };
    k_adamw_tensor h[NT], d[NT];
    size_t total = 0;
    for (int i = 0; i < NT; i++) {
        size_t n = i % 7 == 0 ? 0 : i % 11 == 0 ? 65537 + (size_t)i * 1000 : (size_t)i * 97 + 1;
        if (i == 5)
            n = 1000003;
        float *p = rnd(n, 4.0f, 0.0f), *g = rnd(n, 0.01f, 0.0f);
        float *m = calloc(n + 1, 4), *v = calloc(n + 1, 4);
        h[i] = (k_adamw_tensor){p, m, v, g, n, 0, 0};
        d[i] = (k_adamw_tensor){up(p, n * 4), up(m, n * 4), up(v, n * 4), up(g, n * 4), n, 0,
                                0};
        total += n;
    }
    k_adamw_hparams hp;
    for (long t = 1; t <= 3; t++) {
        for (int i = 0; i < NT; i++) {
            k_adamw_hparams_for_step(&hp, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t + i % 3);
            h[i].step_size = d[i].step_size = hp.step_size;
            h[i].bc2_sqrt = d[i].bc2_sqrt = hp.bc2_sqrt;
        }
        k_adamw_multi(h, NT, &hp);
        CHECK(k_cuda_adamw_multi(d, NT, &hp, NULL) == 0, "launch");
    }
    size_t differ = 0;
    for (int i = 0; i < NT; i++) {
        size_t n = h[i].n;
        float *got = malloc(n * 4 + 4);
        down(got, d[i].p, n * 4);
        differ += memcmp(got, h[i].p, n * 4) != 0;
        down(got, d[i].v, n * 4);
        differ += memcmp(got, h[i].v, n * 4) != 0;
        free(got);
        cudaFree(d[i].p); cudaFree(d[i].m); cudaFree(d[i].v); cudaFree((void *)d[i].g);
        free(h[i].p); free(h[i].m); free(h[i].v); free((void *)h[i].g);
    }
    printf("%-34s %d tensors, %zu elements, 3 steps: %s\n", "adamw fused", NT, total,
           differ ? "differs" : "bitwise");
    CHECK(!differ, "fused AdamW: %zu tensors differ from the CPU", differ);
}

/* Three tensors of odd row counts through copy-in, copy-out and chunk-cat on the
 * device, against the same loops on the host. */
static void flat(size_t world)
{
    k_seg seg[3] = {{7, 12, 0}, {1, 20, 0}, {13, 4, 0}};
    size_t slot = k_flat_layout(seg, 3, world), full = 0;
    for (int i = 0; i < 3; i++)
        full += seg[i].rows * seg[i].row_bytes;
    char *h = malloc(full), *hflat = malloc(world * slot), *dflat_h = malloc(world * slot);
    for (size_t i = 0; i < full; i++)
        h[i] = (char)(uniform() * 127.0f);
    char *d = up(h, full), *dflat = dev(world * slot);
    const void *hs[3], *ds[3];
    void *hd[3], *dd[3];
    char *hout = malloc(full), *dout = dev(full), *dout_h = malloc(full);
    for (size_t i = 0, off = 0; i < 3; off += seg[i].rows * seg[i].row_bytes, i++) {
        hs[i] = h + off;
        ds[i] = d + off;
        hd[i] = hout + off;
        dd[i] = dout + off;
    }
    k_mem dm = k_cuda_mem(NULL);
    k_rs_chunk_cat(hflat, slot, hs, seg, 3, world);
    CHECK(k_rs_chunk_cat_on(&dm, dflat, slot, ds, seg, 3, world) == 0, "device chunk-cat");
    down(dflat_h, dflat, world * slot);
    CHECK(memcmp(hflat, dflat_h, world * slot) == 0, "chunk-cat, world %zu, differs", world);
    k_ag_copy_out(hd, hflat, slot, seg, 3, world);
    CHECK(k_ag_copy_out_on(&dm, dd, dflat, slot, seg, 3, world) == 0, "device copy-out");
    down(dout_h, dout, full);
    CHECK(memcmp(hout, dout_h, full) == 0 && memcmp(hout, h, full) == 0,
          "copy-out, world %zu, differs", world);
    k_ag_copy_in(hflat, hs, true, seg, 3, world, world - 1);
    CHECK(k_ag_copy_in_on(&dm, dflat, ds, true, seg, 3, world, world - 1) == 0, "copy-in");
    down(dflat_h, dflat, slot);
    CHECK(memcmp(hflat, dflat_h, slot) == 0, "copy-in, world %zu, differs", world);
    printf("%-34s world=%zu, slot %zu bytes: %s\n", "flat copy-in/out, chunk-cat", world,
           slot, check_failures ? "differs" : "bitwise");
    cudaFree(d); cudaFree(dflat); cudaFree(dout);
    free(h); free(hflat); free(dflat_h); free(hout); free(dout_h);
}

static void gemm(void *blas, k_gemm_type type, bool ta, bool tb, int m, int n, int k)
{
    size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
    float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4), *want = malloc(nc * 4);
    uint16_t *a16 = malloc(na * 2), *b16 = malloc(nb * 2);
    for (size_t i = 0; i < na; i++)
        a[i] = uniform();
    for (size_t i = 0; i < nb; i++)
        b[i] = uniform();
    for (size_t i = 0; i < nc; i++)
        c[i] = uniform();
    if (type == K_GEMM_BF16) {   /* the reference sees the rounded inputs */
        k_cast_f32_to_bf16(a16, a, na);
        k_cast_bf16_to_f32(a, a16, na);
        k_cast_f32_to_bf16(b16, b, nb);
        k_cast_bf16_to_f32(b, b16, nb);
    }
    int lda = ta ? m : k, ldb = tb ? k : n;
    float alpha = 0.75f, beta = 0.5f;
    double worst = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int l = 0; l < k; l++)
                s += (double)(ta ? a[(size_t)l * lda + i] : a[(size_t)i * lda + l]) *
                     (tb ? b[(size_t)j * ldb + l] : b[(size_t)l * ldb + j]);
            want[(size_t)i * n + j] = (float)(alpha * s + beta * c[(size_t)i * n + j]);
        }
    void *da = type == K_GEMM_F32 ? up(a, na * 4) : up(a16, na * 2);
    void *db = type == K_GEMM_F32 ? up(b, nb * 4) : up(b16, nb * 2);
    float *dc = up(c, nc * 4), *got = malloc(nc * 4);
    CHECK(k_cuda_gemm(blas, NULL, type, ta, tb, m, n, k, alpha, da, lda, db, ldb, beta, dc,
                      n) == 0, "cuBLAS");
    down(got, dc, nc * 4);
    /* f32 accumulation of k products: relative to the sum of magnitudes. */
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double mag = fabs(beta * c[(size_t)i * n + j]);
            for (int l = 0; l < k; l++)
                mag += fabs(alpha * (ta ? a[(size_t)l * lda + i] : a[(size_t)i * lda + l]) *
                            (tb ? b[(size_t)j * ldb + l] : b[(size_t)l * ldb + j]));
            double e = fabs((double)got[(size_t)i * n + j] - want[(size_t)i * n + j]) / mag;
            if (e > worst)
                worst = e;
        }
    char what[64];
    snprintf(what, sizeof what, "gemm %s %c%c %dx%dx%d", type == K_GEMM_F32 ? "f32" : "bf16",
             ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k);
    report(what, nc, want, got, NULL);
    printf("%-34s max err / sum|a||b| %.3g\n", "", worst);
    CHECK(worst <= 1e-5, "%s: error %g of the magnitude", what, worst);
    cudaFree(da); cudaFree(db); cudaFree(dc);
    free(a); free(b); free(c); free(want); free(got); free(a16); free(b16);
}

/* The device's result of n floats at d against the CPU's in h, within tol absolute. */
static void same(const char *what, int N, int C, const float *h, const float *d, size_t n,
                 double tol)
{
    float *got = malloc(n * 4 + 4);
    down(got, d, n * 4);
    char label[64];
    snprintf(label, sizeof label, "%s %dx%d", what, N, C);
    double e = report(label, n, h, got, NULL);
    CHECK(e <= tol, "%s: max abs err %g > %g", label, e, tol);
    free(got);
}

/* The GPT's layers on [N, C] rows (T: the sequence length, V: the vocabulary). */
static void layers(int N, int C, int T, int V)
{
    size_t NC = (size_t)N * C;
    float *x = rnd(NC, 3.0f, 0.5f), *dy = rnd(NC, 1.0f, 0.0f), *w = rnd(C, 0.5f, 1.0f),
          *b = rnd(C, 1.0f, 0.0f);
    float *y = malloc(NC * 4), *mean = malloc(N * 4 + 4), *rstd = malloc(N * 4 + 4);
    float *dx = rnd(NC, 1.0f, 0.0f), *dw = rnd(C, 1.0f, 0.0f), *db = rnd(C, 1.0f, 0.0f);
    float *gx = up(x, NC * 4), *gdy = up(dy, NC * 4), *gw = up(w, C * 4), *gb = up(b, C * 4);
    float *gy = dev(NC * 4), *gmean = dev(N * 4), *grstd = dev(N * 4);
    float *gdx = up(dx, NC * 4), *gdw = up(dw, C * 4), *gdb = up(db, C * 4);

    float *part = malloc(k_layernorm_part_floats(N, C) * 4 + 4);
    k_layernorm_tiled(y, mean, rstd, x, w, b, N, C);
    CHECK(k_cuda_layernorm(gy, gmean, grstd, gx, gw, gb, N, C, NULL) == 0, "launch");
    same("layernorm", N, C, y, gy, NC, 1e-6);
    same("layernorm rstd", N, 1, rstd, grstd, N, 1e-6);
    k_layernorm_bwd_tiled(dx, dw, db, dy, x, mean, rstd, w, N, C, part);
    CHECK(k_cuda_layernorm_bwd(gdx, gdw, gdb, gdy, gx, gmean, grstd, gw, N, C, NULL) == 0,
          "launch");
    same("layernorm backward dx", N, C, dx, gdx, NC, 1e-6);
    same("layernorm backward dw", 1, C, dw, gdw, C, 1e-5);
    same("layernorm backward db", 1, C, db, gdb, C, 1e-5);
    /* the residual form: x2 = dy + x, then its LayerNorm */
    float *x2 = malloc(NC * 4 + 4);
    memcpy(x2, dy, NC * 4);
    k_residual_layernorm_tiled(x2, y, mean, rstd, x, w, b, N, C);
    CHECK(k_cuda_residual_layernorm(gdy, gy, gmean, grstd, gx, gw, gb, N, C, NULL) == 0,
          "launch");
    same("residual layernorm sum", N, C, x2, gdy, NC, 0);
    same("residual layernorm", N, C, y, gy, NC, 1e-6);
    cudaMemcpy(gdy, dy, NC * 4, cudaMemcpyHostToDevice);
    free(x2);

    /* bias over [N, C] */
    memcpy(y, x, NC * 4);
    k_bias_add(y, b, N, C);
    cudaMemcpy(gy, gx, NC * 4, cudaMemcpyDeviceToDevice);
    CHECK(k_cuda_bias_add(gy, gb, N, C, NULL) == 0, "launch");
    same("bias add", N, C, y, gy, NC, 0);
    k_bias_grad_tiled(db, dy, N, C, part);
    CHECK(k_cuda_bias_grad(gdb, gdy, N, C, NULL) == 0, "launch");
    same("bias gradient", N, C, db, gdb, C, 1e-5);

    /* the encoder: N rows of positions mod T, tokens of V (repeating) */
    int *tok = malloc(N * sizeof(int) + 4);
    for (int n = 0; n < N; n++)
        tok[n] = (int)((uniform() + 1.0f) * 0.5f * (float)V) % V;
    float *wte = rnd((size_t)V * C, 1.0f, 0.0f), *wpe = rnd((size_t)T * C, 1.0f, 0.0f);
    float *dwte = rnd((size_t)V * C, 1.0f, 0.0f), *dwpe = rnd((size_t)T * C, 1.0f, 0.0f);
    int *gtok = up(tok, N * sizeof(int));
    float *gwte = up(wte, (size_t)V * C * 4), *gwpe = up(wpe, (size_t)T * C * 4);
    float *gdwte = up(dwte, (size_t)V * C * 4), *gdwpe = up(dwpe, (size_t)T * C * 4);
    k_embed(y, tok, wte, wpe, N, T, C);
    CHECK(k_cuda_embed(gy, gtok, gwte, gwpe, N, T, C, NULL) == 0, "launch");
    same("embedding", N, C, y, gy, NC, 0);
    k_embed_bwd(dwte, dwpe, dy, tok, N, T, C);
    CHECK(k_cuda_embed_bwd(gdwte, gdwpe, gdy, gtok, N, T, C, V, NULL) == 0, "launch");
    same("embedding backward wte", V, C, dwte, gdwte, (size_t)V * C, 0);
    same("embedding backward wpe", T, C, dwpe, gdwpe, (size_t)T * C, 0);

    /* causal softmax over N / T stacked T x T matrices (rows: a multiple of T) */
    size_t rows = (size_t)(N / T) * T, na = rows * T;
    if (rows) {
        float *a = rnd(na, 6.0f, 0.0f), *dp = rnd(na, 1.0f, 0.0f);
        float *ga = up(a, na * 4), *gdp = up(dp, na * 4);
        k_softmax_causal(a, rows, T);
        CHECK(k_cuda_softmax_causal(ga, rows, T, NULL) == 0, "launch");
        same("causal softmax", (int)rows, T, a, ga, na, 1e-6);
        /* the backward from the CPU's probabilities on both sides */
        cudaMemcpy(ga, a, na * 4, cudaMemcpyHostToDevice);
        k_softmax_causal_bwd(dp, a, rows, T, 0.125f);
        CHECK(k_cuda_softmax_causal_bwd(gdp, ga, rows, T, 0.125f, NULL) == 0, "launch");
        same("causal softmax backward", (int)rows, T, dp, gdp, na, 0);
        cudaFree(ga); cudaFree(gdp); free(a); free(dp);
    }

    /* cross-entropy of [N, V] logits */
    size_t nl = (size_t)N * V;
    float *l = rnd(nl, 8.0f, 0.0f), *dl = malloc(nl * 4 + 4);
    double *loss = malloc(N * 8 + 8), *gloss_h = malloc(N * 8 + 8), *gloss = dev(N * 8);
    float *gl = up(l, nl * 4), *gdl = dev(nl * 4);
    k_xent(dl, loss, l, tok, N, V, 0.01f);
    CHECK(k_cuda_xent(gdl, gloss, gl, gtok, N, V, 0.01f, NULL) == 0, "launch");
    same("cross-entropy gradient", N, V, dl, gdl, nl, 1e-8);
    down(gloss_h, gloss, N * 8);
    double worst = 0;
    for (int n = 0; n < N; n++)
        worst = fmax(worst, fabs(gloss_h[n] - loss[n]) / (fabs(loss[n]) + 1e-300));
    printf("%-34s n=%-8d max rel err %.3g\n", "cross-entropy loss", N, worst);
    CHECK(worst <= 1e-9, "cross-entropy loss, %dx%d: rel err %g", N, V, worst);

    cudaFree(gx); cudaFree(gdy); cudaFree(gw); cudaFree(gb); cudaFree(gy); cudaFree(gmean);
    cudaFree(grstd); cudaFree(gdx); cudaFree(gdw); cudaFree(gdb); cudaFree(gtok);
    cudaFree(gwte); cudaFree(gwpe); cudaFree(gdwte); cudaFree(gdwpe); cudaFree(gloss);
    cudaFree(gl); cudaFree(gdl);
    free(x); free(dy); free(w); free(b); free(y); free(mean); free(rstd); free(dx); free(dw);
    free(db); free(tok); free(wte); free(wpe); free(dwte); free(dwpe); free(l); free(dl);
    free(loss); free(gloss_h); free(part);
}

/* The tiled attention against its CPU replay (attention.c: the same tiles and lanes,
 * fmaf on both sides): equal but for the device's expf and logf. Every output element
 * is first filled with NaN, so one left unwritten fails. */
static void attention(int B, int T, int C, int H)
{
    size_t N = (size_t)B * T, n3 = N * 3 * C, nc = N * C, nl = N * H;
    float *qkv = rnd(n3, 2.0f, 0.0f), *dout = rnd(nc, 1.0f, 0.0f);
    float *out = malloc(nc * 4 + 4), *lse = malloc(nl * 4 + 4), *dqkv = malloc(n3 * 4 + 4),
          *D = malloc(nl * 4 + 4);
    k_attention_fwd(out, lse, qkv, B, T, C, H);
    k_attention_bwd(dqkv, D, dout, qkv, out, lse, B, T, C, H);
    float *gqkv = up(qkv, n3 * 4), *gdout = up(dout, nc * 4), *gout = dev(nc * 4),
          *glse = dev(nl * 4), *gdqkv = dev(n3 * 4), *gD = dev(nl * 4);
    cudaMemset(gout, 0xff, nc * 4);
    cudaMemset(glse, 0xff, nl * 4);
    cudaMemset(gdqkv, 0xff, n3 * 4);
    CHECK(k_cuda_attention_fwd(gout, glse, gqkv, B, T, C, H, NULL) == 0, "launch");
    CHECK(k_cuda_attention_bwd(gdqkv, gD, gdout, gqkv, gout, glse, B, T, C, H, NULL) == 0,
          "launch");
    char what[64];
    snprintf(what, sizeof what, "attention B%d H%d", B, H);
    same(what, T, C, out, gout, nc, 1e-5);
    snprintf(what, sizeof what, "attention lse B%d H%d", B, H);
    same(what, T, C, lse, glse, nl, 1e-5);
    snprintf(what, sizeof what, "attention backward B%d H%d", B, H);
    same(what, T, C, dqkv, gdqkv, n3, 1e-5);
    cudaFree(gqkv); cudaFree(gdout); cudaFree(gout); cudaFree(glse); cudaFree(gdqkv);
    cudaFree(gD);
    free(qkv); free(dout); free(out); free(lse); free(dqkv); free(D);
}

int main(void)
{
    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess || ndev == 0) {
        printf("skip: no CUDA device (%s)\n",
               ce != cudaSuccess ? cudaGetErrorString(ce) : "the driver sees none");
        return 77;
    }
    static const size_t sizes[] = {1, 7, 4097, 1000003};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        elementwise(sizes[i]);
    for (size_t world = 1; world <= 5; world += 2)
        flat(world);
    adamw_many();
    static const int lshapes[][4] = {{1, 1, 1, 2}, {7, 13, 7, 11}, {33, 65, 11, 257},
                                     {1023, 97, 31, 256}, {130, 33, 13, 1500}};
    for (size_t i = 0; i < sizeof lshapes / sizeof lshapes[0]; i++)
        layers(lshapes[i][0], lshapes[i][1], lshapes[i][2], lshapes[i][3]);
    static const int ashapes[][4] = {{1, 1, 1, 1}, {2, 7, 15, 3}, {3, 17, 12, 4},
                                     {2, 33, 128, 2}, {1, 40, 200, 2}, {1, 18, 256, 1},
                                     {2, 129, 64, 1}, {1, 300, 96, 3}, {4, 128, 512, 8}};
    for (size_t i = 0; i < sizeof ashapes / sizeof ashapes[0]; i++)
        attention(ashapes[i][0], ashapes[i][1], ashapes[i][2], ashapes[i][3]);
    void *blas;
    CHECK(k_cuda_blas_new(&blas) == 0, "cublasCreate");
    static const int shapes[][3] = {{1, 1, 1}, {37, 53, 129}, {64, 96, 768}, {5, 300, 17}};
    for (int t = 0; t < 2; t++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int tr = 0; tr < 4; tr++)
                gemm(blas, t ? K_GEMM_BF16 : K_GEMM_F32, tr & 1, tr & 2, shapes[s][0],
                     shapes[s][1], shapes[s][2]);
    k_cuda_blas_free(blas);
    CHECK_DONE();
}
