/* test_collectives_match_formula: every collective gives the closed-form result,
 * started asynchronously (several in flight at once) and synchronously, on the world
 * and on each mesh dim; bf16 sums; mesh dims and names. `--device cuda`: the same on
 * device buffers, through NCCL (77 without a GPU). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cast_elem.h"
#include "harness.h"

#define CHECK(cond, ...) TH_CHECK(w, cond, __VA_ARGS__)

/* On a CUDA world the collectives run on device copies of the buffers (NCCL); the
 * results come back to these host arrays for the checks. */
typedef struct bufs {
    sh_world *w;
    sh_tensor t[8];
    int n;
} bufs;

static void *on_device(bufs *b, void *host, size_t floats)
{
    if (sh_world_device(b->w) != SH_CUDA)
        return host;
    ck_err err = {0};
    sh_tensor *t = &b->t[b->n++];
    *t = (sh_tensor)SH_TENSOR_INIT_ON(SH_CUDA);
    if (sh_tensor_resize(t, CK_F32, 1, (int64_t[]){(int64_t)floats}, &err) ||
        sh_copy(b->w, t->data, host, floats * sizeof(float), &err))
        th_die(b->w, "device buffer", &err);
    return t->data;
}

static void back(bufs *b, void *host, const void *dev, size_t floats)
{
    ck_err err = {0};
    if (host != dev && sh_copy_to_host(b->w, host, dev, floats * sizeof(float), &err))
        th_die(b->w, "copying back", &err);
}

static void run(sh_world *w, sh_comm *c)
{
    ck_err err = {0};
    int r = sh_comm_rank(c), n = sh_comm_size(c);
    enum { K = 3 };
    size_t kn = (size_t)K * (size_t)n;
    float send[K], *ag = malloc(sizeof(float) * kn), *rs_in = malloc(sizeof(float) * kn);
    float rs_out[K], ar[K], bc[K], *ga = malloc(sizeof(float) * kn);
    for (int i = 0; i < K; i++)
        send[i] = bc[i] = (float)(100 * r + i);
    for (int i = 0; i < K * n; i++)
        rs_in[i] = (float)(r + i);
    memcpy(ar, send, sizeof ar);
    bufs db = {w, {{0}}, 0};
    float *d_send = on_device(&db, send, K), *d_ag = on_device(&db, ag, kn),
          *d_rs_in = on_device(&db, rs_in, kn), *d_rs_out = on_device(&db, rs_out, K),
          *d_ar = on_device(&db, ar, K), *d_bc = on_device(&db, bc, K),
          *d_ga = on_device(&db, ga, kn);
    sh_work *h[6];
    if (sh_all_gather(c, d_send, d_ag, K, CK_F32, &h[0], &err) ||
        sh_reduce_scatter(c, d_rs_in, d_rs_out, K, CK_F32, SH_SUM, &h[1], &err) ||
        sh_all_reduce(c, d_ar, d_ar, K, CK_F32, SH_SUM, &h[2], &err) ||
        sh_broadcast(c, d_bc, K, CK_F32, n - 1, &h[3], &err) ||
        sh_gather(c, d_send, d_ga, K, CK_F32, 0, &h[4], &err) || sh_barrier(c, &h[5], &err))
        th_die(w, sh_comm_name(c), &err);
    for (int i = 5; i >= 0; i--)   /* completion order need not be start order */
        if (sh_work_wait(h[i], &err))
            th_die(w, sh_comm_name(c), &err);
    back(&db, ag, d_ag, kn);
    back(&db, rs_out, d_rs_out, K);
    back(&db, ar, d_ar, K);
    back(&db, bc, d_bc, K);
    back(&db, ga, d_ga, kn);
    for (int i = 0; i < db.n; i++)
        sh_tensor_free(&db.t[i]);
    float sum_r = (float)(n * (n - 1) / 2);
    for (int q = 0; q < n; q++)
        for (int i = 0; i < K; i++) {
            CHECK(ag[q * K + i] == (float)(100 * q + i), "%s all-gather", sh_comm_name(c));
            if (r == 0)
                CHECK(ga[q * K + i] == (float)(100 * q + i), "%s gather", sh_comm_name(c));
        }
    for (int i = 0; i < K; i++) {
        CHECK(rs_out[i] == sum_r + (float)(n * (r * K + i)), "%s reduce-scatter [%d] = %g",
              sh_comm_name(c), i, rs_out[i]);
        CHECK(ar[i] == 100.0f * sum_r + (float)(n * i), "%s all-reduce", sh_comm_name(c));
        CHECK(bc[i] == (float)(100 * (n - 1) + i), "%s broadcast", sh_comm_name(c));
    }
    /* bf16 sum: each rank adds 1.5 (exact in bf16). */
    uint16_t b = k_f32_to_bf16_elem(1.5f), bs;
    if (sh_all_reduce(c, &b, &bs, 1, CK_BF16, SH_SUM, NULL, &err))
        th_die(w, "bf16 all-reduce", &err);
    CHECK(k_bf16_to_f32_elem(bs) == 1.5f * (float)n, "%s bf16 sum %g", sh_comm_name(c),
          k_bf16_to_f32_elem(bs));
    free(ag);
    free(rs_in);
    free(ga);
}

int main(int argc, char **argv)
{
    sh_world *w = th_init(&argc, &argv);
    int rank = sh_world_rank(w);
    ck_err err = {0};
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--device") && !strcmp(argv[i + 1], "cuda") &&
            sh_world_set_device(w, SH_CUDA, &err)) {
            if (rank == 0)
                printf("skip: %s\n", ck_err_msg(&err));
            return th_finish(w, 77);
        }
    printf("rank %d of %d, local %d of %d\n", rank, sh_world_size(w), sh_world_local_rank(w),
           sh_world_local_size(w));
    const char *env = getenv("RANK");
    CHECK(!env || atoi(env) == rank, "RANK=%s", env);
    run(w, sh_world_comm(w));
    sh_mesh *mesh = th_mesh(w, argc, argv);
    for (int d = 0; d < sh_mesh_ndim(mesh); d++) {
        sh_comm *c = sh_mesh_comm(mesh, d);
        CHECK(sh_comm_size(c) == sh_mesh_size(mesh, d) && sh_comm_rank(c) == sh_mesh_coord(mesh, d),
              "mesh dim %d comm", d);
        run(w, c);
    }
    CHECK(sh_mesh_dim(mesh, "shard") == sh_mesh_ndim(mesh) - 1, "dim names");
    sh_mesh_free(mesh);
    return th_finish(w, th_failures() ? 1 : 0);
}
