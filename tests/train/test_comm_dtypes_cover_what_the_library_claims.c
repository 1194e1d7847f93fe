/* test_comm_dtypes_cover_what_the_library_claims: the training library's one table of
 * how dtypes travel (libshard/train/comm/dtypes.h) against what the library claims:
 *   - every dtype a tensor may hold (sh_tensor_resize accepts it) has a row;
 *   - every dtype with a row sums, maxes, gathers and broadcasts over real MPI ranks
 *     to the closed-form result, bit for bit (values built from the core's dtype
 *     table, ck_dtype_info, so the test restates no encoding of its own);
 *   - every dtype without a row is refused by each collective with -EINVAL naming it,
 *     on every rank, without a hang. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/dtypes.h"
#include "harness.h"

#define CHECK(cond, ...) TH_CHECK(w, cond, __VA_ARGS__)

#define ROW(dt, type, sum, max, nccl) [dt] = true,
static const bool claimed[CK_DTYPE_MAX + 1] = { SH_COMM_DTYPES(ROW) };
#undef ROW

enum { K = 3, MAX_ITEM = 16 };

/* Element bytes of the small integer v in the dtype of i (floats from their layout:
 * exact for |v| < 2^man_bits). 0, or -1 for a kind this test has no values for. */
static int put(const ck_dtype_info *i, uint8_t *p, long v)
{
    uint64_t u = 0;
    if (i->kind == CK_KIND_INT || i->kind == CK_KIND_UINT) {
        u = (uint64_t)v;
    } else if (i->kind == CK_KIND_FLOAT) {
        uint64_t a = (uint64_t)(v < 0 ? -v : v), bias = (1ull << (i->exp_bits - 1)) - 1;
        if (a) {
            int e = 63 - __builtin_clzll(a);
            u = (bias + (uint64_t)e) << i->man_bits |
                ((a - (1ull << e)) << (i->man_bits - e) & ((1ull << i->man_bits) - 1));
        }
        if (v < 0)
            u |= 1ull << (i->exp_bits + i->man_bits);
    } else {
        return -1;
    }
    for (size_t k = 0; k < i->size; k++)
        p[k] = (uint8_t)(u >> (8 * (k % 8)));
    return 0;
}

static void fill(sh_world *w, const ck_dtype_info *i, uint8_t *p, long scale)
{
    for (int k = 0; k < K; k++)
        if (put(i, p + (size_t)k * i->size, scale * (k + 1)))
            CHECK(false, "%s: the test has no values of this kind; teach it", i->name);
}

static void carries(sh_world *w, sh_comm *c, const ck_dtype_info *i)
{
    int r = sh_comm_rank(c), n = sh_comm_size(c);
    size_t sz = i->size;
    uint8_t send[K * MAX_ITEM], got[K * MAX_ITEM], want[K * MAX_ITEM];
    uint8_t *all = malloc((size_t)n * K * MAX_ITEM), *wall = malloc((size_t)n * K * MAX_ITEM);
    ck_err err = {0};
    fill(w, i, send, r + 1);

    int rc = sh_all_reduce(c, send, got, K, i->code, SH_SUM, NULL, &err);
    fill(w, i, want, (long)n * (n + 1) / 2);
    CHECK(rc == 0 && !memcmp(got, want, K * sz), "%s: sum over %d ranks: %s", i->name, n,
          rc ? ck_err_msg(&err) : "wrong bits");
    rc = sh_all_reduce(c, send, got, K, i->code, SH_MAX, NULL, &err);
    fill(w, i, want, n);
    CHECK(rc == 0 && !memcmp(got, want, K * sz), "%s: max over %d ranks: %s", i->name, n,
          rc ? ck_err_msg(&err) : "wrong bits");
    rc = sh_all_gather(c, send, all, K, i->code, NULL, &err);
    for (int q = 0; q < n; q++)
        fill(w, i, wall + (size_t)q * K * sz, q + 1);
    CHECK(rc == 0 && !memcmp(all, wall, (size_t)n * K * sz), "%s: all-gather over %d ranks: "
          "%s", i->name, n, rc ? ck_err_msg(&err) : "wrong bits");
    if (r != 0)
        memset(send, 0xA5, sizeof send);
    rc = sh_broadcast(c, send, K, i->code, 0, NULL, &err);
    fill(w, i, want, 1);
    CHECK(rc == 0 && !memcmp(send, want, K * sz), "%s: broadcast from rank 0: %s", i->name,
          rc ? ck_err_msg(&err) : "wrong bits");
    free(all);
    free(wall);
}

static void refuses(sh_world *w, sh_comm *c, const ck_dtype_info *i)
{
    uint8_t buf[K * MAX_ITEM] = {0}, out[K * MAX_ITEM * 8];
    ck_err e1 = {0}, e2 = {0}, e3 = {0};
    int a = sh_all_reduce(c, buf, buf, K, i->code, SH_SUM, NULL, &e1);
    int g = sh_all_gather(c, buf, out, 1, i->code, NULL, &e2);
    int b = sh_broadcast(c, buf, K, i->code, 0, NULL, &e3);
    CHECK(a == -EINVAL && strstr(ck_err_msg(&e1), i->name), "%s: all-reduce: %d %s", i->name,
          a, ck_err_msg(&e1));
    CHECK(g == -EINVAL && strstr(ck_err_msg(&e2), i->name), "%s: all-gather: %d %s", i->name,
          g, ck_err_msg(&e2));
    CHECK(b == -EINVAL && strstr(ck_err_msg(&e3), i->name), "%s: broadcast: %d %s", i->name,
          b, ck_err_msg(&e3));
}

int main(int argc, char **argv)
{
    sh_world *w = th_init(&argc, &argv);
    sh_comm *c = sh_world_comm(w);
    int rows = 0;
    for (int d = 1; d <= CK_DTYPE_MAX; d++) {
        const ck_dtype_info *i = ck_dtype_info_of(d);
        sh_tensor t = SH_TENSOR_INIT;
        ck_err err = {0};
        if (sh_tensor_resize(&t, i->code, 1, (int64_t[]){4}, &err) == 0)
            CHECK(claimed[d], "%s: a tensor may hold it, but no collective carries it",
                  i->name);
        sh_tensor_free(&t);
        if (claimed[d]) {
            rows++;
            carries(w, c, i);
        } else {
            refuses(w, c, i);
        }
    }
    if (sh_world_rank(w) == 0)
        printf("%d of %d dtypes travel in collectives over %d ranks\n", rows, CK_DTYPE_MAX,
               sh_comm_size(c));
    return th_finish(w, th_failures() ? 1 : 0);
}
