/* The CUDA twins against the CPU loops: bitwise for casts, AdamW, scale and scale-add
 * (both sides run the same *_elem.h arithmetic, the GPU side without fused
 * multiply-adds), to a relative 1e-12 for the sum of squares (summation order).
 * Exits 77 (skip) when no GPU is present: the build still compiles and links it. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "adamw.h"
#include "cast.h"
#include "cast_elem.h"
#include "check.h"
#include "kernels_cuda.h"
#include "norm.h"
#include "norm_elem.h"

enum { N = 1 << 20 };

static void *dev(size_t bytes)
{
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        fprintf(stderr, "cudaMalloc(%zu) failed\n", bytes);
        exit(1);
    }
    return p;
}

static void put(void *d, const void *h, size_t b) { cudaMemcpy(d, h, b, cudaMemcpyHostToDevice); }
static void get(void *h, const void *d, size_t b) { cudaMemcpy(h, d, b, cudaMemcpyDeviceToHost); }

int main(void)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("skip: no CUDA device\n");
        return 77;
    }
    /* Inputs: a sweep over f32 bit patterns (specials included) and 16-bit patterns. */
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    float *cpu = malloc(sizeof(float) * N), *gpu = malloc(sizeof(float) * N);
    uint16_t *h = malloc(sizeof(uint16_t) * N), *hc = malloc(sizeof(uint16_t) * N),
             *hg = malloc(sizeof(uint16_t) * N);
    for (uint32_t i = 0; i < N; i++) {
        x[i] = k_bits_f32(i * 4099u ^ (i << 13));
        h[i] = (uint16_t)i;
        y[i] = (float)sin((double)i) * 0.1f;
    }
    static const uint32_t specials[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000,
                                        0x7fc00000, 0x7f800001, 0x00000001, 0x7f7fffff,
                                        0x477ff000, 0x33000000, 0x3f808000};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
        x[i] = k_bits_f32(specials[i]);

    float *dx = dev(sizeof(float) * N), *dy = dev(sizeof(float) * N), *df = dev(sizeof(float) * N);
    float *dm = dev(sizeof(float) * N), *dv = dev(sizeof(float) * N);
    uint16_t *dh = dev(sizeof(uint16_t) * N);
    put(dx, x, sizeof(float) * N);
    put(dy, y, sizeof(float) * N);

    /* Narrowing casts. */
    k_cast_f32_to_bf16(hc, x, N);
    CHECK(k_cuda_cast_f32_to_bf16(dh, dx, N, NULL) == 0, "launch");
    get(hg, dh, sizeof(uint16_t) * N);
    CHECK(memcmp(hc, hg, sizeof(uint16_t) * N) == 0, "f32->bf16 differs from the CPU");
    k_cast_f32_to_f16(hc, x, N);
    CHECK(k_cuda_cast_f32_to_f16(dh, dx, N, NULL) == 0, "launch");
    get(hg, dh, sizeof(uint16_t) * N);
    CHECK(memcmp(hc, hg, sizeof(uint16_t) * N) == 0, "f32->f16 differs from the CPU");
    /* Widening casts of every 16-bit pattern (N covers them 16 times). */
    put(dh, h, sizeof(uint16_t) * N);
    k_cast_bf16_to_f32(cpu, h, N);
    CHECK(k_cuda_cast_bf16_to_f32(df, dh, N, NULL) == 0, "launch");
    get(gpu, df, sizeof(float) * N);
    CHECK(memcmp(cpu, gpu, sizeof(float) * N) == 0, "bf16->f32 differs from the CPU");
    k_cast_f16_to_f32(cpu, h, N);
    CHECK(k_cuda_cast_f16_to_f32(df, dh, N, NULL) == 0, "launch");
    get(gpu, df, sizeof(float) * N);
    CHECK(memcmp(cpu, gpu, sizeof(float) * N) == 0, "f16->f32 differs from the CPU");

    /* AdamW: three steps from the same state. */
    float *p = malloc(sizeof(float) * N), *m = calloc(N, sizeof(float)), *v = calloc(N, sizeof(float));
    for (size_t i = 0; i < N; i++)
        p[i] = y[i] * 3.0f;
    put(df, p, sizeof(float) * N);
    cudaMemset(dm, 0, sizeof(float) * N);
    cudaMemset(dv, 0, sizeof(float) * N);
    for (long t = 1; t <= 3; t++) {
        k_adamw_hparams hp;
        k_adamw_hparams_for_step(&hp, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, t);
        k_adamw_step(p, y, m, v, N, &hp);
        k_adamw_tensor one = {df, dm, dv, dy, N, hp.step_size, hp.bc2_sqrt};
        CHECK(k_cuda_adamw_multi(&one, 1, &hp, NULL) == 0, "launch");
    }
    get(gpu, df, sizeof(float) * N);
    CHECK(memcmp(p, gpu, sizeof(float) * N) == 0, "AdamW parameters differ from the CPU");

    /* scale, scale-add, sum of squares. */
    memcpy(cpu, y, sizeof(float) * N);
    k_scale(cpu, 0.37f, N);
    k_scale_add(cpu, y, -1.25f, N);
    CHECK(k_cuda_scale(dy, 0.37f, N, NULL) == 0 && k_cuda_scale_add(dy, df, 0.0f, N, NULL) == 0,
          "launch");
    put(df, y, sizeof(float) * N);
    CHECK(k_cuda_scale_add(dy, df, -1.25f, N, NULL) == 0, "launch");
    get(gpu, dy, sizeof(float) * N);
    CHECK(memcmp(cpu, gpu, sizeof(float) * N) == 0, "scale / scale-add differ from the CPU");
    /* The sum of squares adds into what the device double holds. */
    double *dsum = dev(sizeof(double)), gs = 1.5;
    put(dsum, &gs, sizeof gs);
    CHECK(k_cuda_sumsq(df, N, dsum, NULL) == 0, "launch");
    get(&gs, dsum, sizeof gs);
    double cs = 1.5 + k_sumsq(y, N);
    CHECK(fabs(gs - cs) <= 1e-12 * cs, "sumsq %.17g vs CPU %.17g", gs, cs);
    /* Clipping from that device sum: a max norm below the norm scales as the CPU
     * would, one above it leaves the values alone. */
    for (int k = 0; k < 2; k++) {
        double max_norm = k ? 2.0 * sqrt(cs) : 0.5 * sqrt(cs);
        memcpy(cpu, y, sizeof(float) * N);
        float coef = k_clip_coef(cs, max_norm);
        if (coef < 1.0f)
            k_scale(cpu, coef, N);
        put(df, y, sizeof(float) * N);
        CHECK(k_cuda_clip_scale(df, N, dsum, max_norm, NULL) == 0, "launch");
        get(gpu, df, sizeof(float) * N);
        CHECK(memcmp(cpu, gpu, sizeof(float) * N) == 0, "clip (max norm %g) differs", max_norm);
    }

    cudaFree(dx); cudaFree(dy); cudaFree(df); cudaFree(dm); cudaFree(dv); cudaFree(dh);
    cudaFree(dsum);
    free(x); free(y); free(cpu); free(gpu); free(h); free(hc); free(hg); free(p); free(m); free(v);
    CHECK_DONE();
}
