/* test_fsdp_device_parity: FSDP on the world's device matches another run of the
 * same model, step for step.
 *
 * The model computes only through sh/ops.h, so it runs unchanged on CPU ranks
 * (OpenBLAS, kernels/ loops, MPI) and CUDA ranks (cuBLAS, the CUDA twins, NCCL):
 *
 *   y = gelu(x W1^T) W2^T,  loss = 0.5 mean((y - t)^2)     fc1, fc2 and the root
 *                                                            each fully_shard-ed
 * 20 steps of AdamW with gradient clipping, f32. `--dump FILE` writes the per-step
 * losses and the final full parameters; `--against FILE` trains again and compares:
 * losses within 1e-5 relative, parameters within 1e-5 absolute (the bounds of
 * test_sharded_matches_unsharded). `--bf16`: mixed precision (bf16 parameters and
 * GEMM inputs, f32 gradients and reduction): losses within 1e-2 of the first step's,
 * parameters within 5e-2 (a few AdamW steps of lr 1e-2). `--offload`: CPUOffloadPolicy
 * (on CUDA: shards, gradients and optimizer state in pinned host memory). tests/gpu/parity runs it CPU-unsharded first, then
 * sharded and on CUDA against that. `--device cuda` without a GPU skips (77). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { STEPS = 20, B = 12, DIN = 33, H = 67, DOUT = 17 };
static const double MAX_NORM = 0.5;

typedef struct linear {
    sh_world *w;
    sh_param *weight;     /* [out, in] */
    int in, out;
    sh_tensor x;          /* the forward's input in f32, for the backward */
    sh_tensor w32;        /* bf16: the weight in f32, for the backward */
} linear;

/* t's elements as f32 in dst (a copy when t is f32 already). */
static int as_f32(sh_world *w, const sh_tensor *t, sh_tensor *dst, ck_err *err)
{
    int rc = sh_tensor_resize(dst, CK_F32, t->ndim, t->shape, err);
    return rc ? rc : sh_convert(w, dst->data, CK_F32, t->data, t->dtype, t->numel, err);
}

static int linear_fwd(sh_module *m, const sh_tensor *in, sh_tensor *out, void *user,
                      ck_err *err)
{
    (void)m;
    linear *l = user;
    sh_tensor *wt;
    int b = (int)in->shape[0];
    int rc = sh_param_value(l->weight, &wt, err);
    if (!rc && in->dtype != wt->dtype)
        rc = ck_err_set(err, -EINVAL, "input %s, weight %s", ck_dtype_name(in->dtype),
                        ck_dtype_name(wt->dtype));
    if (!rc)
        rc = as_f32(l->w, in, &l->x, err);
    out->device = in->device;
    if (!rc)
        rc = sh_tensor_resize(out, CK_F32, 2, (int64_t[]){b, l->out}, err);
    if (!rc)
        rc = sh_gemm(l->w, wt->dtype, false, true, b, l->out, l->in, 1.0f, in->data, l->in,
                     wt->data, l->in, 0.0f, out->data, l->out, err);
    return rc;
}

static int linear_bwd(sh_module *m, const sh_tensor *dy, sh_tensor *dx, void *user,
                      ck_err *err)
{
    (void)m;
    linear *l = user;
    sh_tensor *wt;
    float *gw;
    int b = (int)dy->shape[0];
    int rc = sh_param_value(l->weight, &wt, err);
    if (!rc)
        rc = sh_param_grad(l->weight, &gw, err);
    if (!rc)
        rc = as_f32(l->w, wt, &l->w32, err);
    if (!rc)   /* dW += dy^T x */
        rc = sh_gemm(l->w, CK_F32, true, false, l->out, l->in, b, 1.0f, dy->data, l->out,
                     l->x.data, l->in, 1.0f, gw, l->in, err);
    dx->device = dy->device;
    if (!rc)
        rc = sh_tensor_resize(dx, CK_F32, 2, (int64_t[]){b, l->in}, err);
    if (!rc)   /* dx = dy W */
        rc = sh_gemm(l->w, CK_F32, false, false, b, l->in, l->out, 1.0f, dy->data, l->out,
                     l->w32.data, l->in, 0.0f, dx->data, l->in, err);
    return rc;
}

typedef struct model {
    sh_world *w;
    sh_module *root, *fc[2];
    linear lin[2];
    sh_tensor pre, act, y, dact, dpre, dx;
} model;

static int root_fwd(sh_module *m, const sh_tensor *in, sh_tensor *out, void *user, ck_err *err)
{
    (void)m;
    model *md = user;
    int rc = sh_module_forward(md->fc[0], in, &md->pre, err);
    if (!rc)
        rc = sh_tensor_resize(&md->act, CK_F32, 2, md->pre.shape, err);
    if (!rc)
        rc = sh_gelu(md->w, md->act.data, md->pre.data, md->pre.numel, err);
    if (!rc)
        rc = sh_module_forward(md->fc[1], &md->act, out, err);
    return rc;
}

static int root_bwd(sh_module *m, const sh_tensor *dy, sh_tensor *dx, void *user, ck_err *err)
{
    (void)m;
    model *md = user;
    int rc = sh_module_backward(md->fc[1], dy, &md->dact, err);
    if (!rc)
        rc = sh_tensor_resize(&md->dpre, CK_F32, 2, md->dact.shape, err);
    if (!rc)
        rc = sh_gelu_bwd(md->w, md->dpre.data, md->pre.data, md->dact.data, md->dact.numel,
                         err);
    if (!rc)
        rc = sh_module_backward(md->fc[0], &md->dpre, dx, err);
    return rc;
}

static void build(sh_world *w, sh_mesh *mesh, model *md, bool bf16, bool offload)
{
    ck_err err = {0};
    sh_device dev = sh_world_device(w);
    memset(md, 0, sizeof *md);
    md->w = w;
    sh_tensor z = SH_TENSOR_INIT_ON(dev);
    md->pre = md->act = md->y = md->dact = md->dpre = md->dx = z;
    static const char *names[2] = {"fc1", "fc2"};
    const int dims[2][2] = {{DIN, H}, {H, DOUT}};
    if (sh_module_new(w, NULL, "model", root_fwd, root_bwd, md, &md->root, &err))
        th_die(w, "model", &err);
    for (int i = 0; i < 2; i++) {
        linear *l = &md->lin[i];
        l->w = w;
        l->in = dims[i][0];
        l->out = dims[i][1];
        l->x = l->w32 = z;
        if (sh_module_new(w, md->root, names[i], linear_fwd, linear_bwd, l, &md->fc[i], &err) ||
            sh_param_new(md->fc[i], "weight", 2, (int64_t[]){l->out, l->in},
                         (sh_init_spec){SH_INIT_UNIFORM, 1.0f / sqrtf((float)l->in)},
                         &l->weight, &err))
            th_die(w, names[i], &err);
    }
    sh_fsdp_opts o;
    sh_fsdp_opts_default(&o);
    if (bf16) {
        o.mp.param_dtype = CK_BF16;
        o.mp.reduce_dtype = CK_F32;
    }
    o.offload.enabled = o.offload.pin_memory = offload;
    for (int i = 0; i < 2; i++)
        if (sh_fully_shard(md->fc[i], mesh, &o, &err))
            th_die(w, "fully_shard", &err);
    if (sh_fully_shard(md->root, mesh, &o, &err) || sh_module_to_empty(md->root, dev, &err) ||
        sh_module_reset_parameters(md->root, 7, &err))
        th_die(w, "materializing", &err);
}

static void free_model(model *md)
{
    sh_tensor *t[] = {&md->pre, &md->act, &md->y, &md->dact, &md->dpre, &md->dx,
                      &md->lin[0].x, &md->lin[1].x, &md->lin[0].w32, &md->lin[1].w32};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        sh_tensor_free(t[i]);
    sh_module_free(md->root);
}

/* Sample i's input and target, the same for every world size and device. */
static float datum(long i, int j, int salt)
{
    uint64_t x = (uint64_t)i * 1000003u + (uint64_t)j * 7919u + (uint64_t)salt * 104729u;
    x = (x ^ (x >> 31)) * 0x9e3779b97f4a7c15ull;
    return (float)((x >> 40) & 0xffff) / 32768.0f - 1.0f;
}

int main(int argc, char **argv)
{
    sh_world *w = th_init(&argc, &argv);
    ck_err err = {0};
    const char *dump = NULL, *against = NULL, *device = "cpu";
    bool bf16 = false, offload = false;
    for (int i = 1; i < argc; i++) {
        bf16 |= !strcmp(argv[i], "--bf16");
        offload |= !strcmp(argv[i], "--offload");
    }
    /* bf16: AdamW moves a parameter by about lr (1e-2) a step whatever the gradient's
     * size, so where bf16 rounding flips a small gradient's sign the parameters part
     * by a few lr; the loss is the sharper measure there. */
    double tol = bf16 ? 1e-2 : 1e-5, ptol = bf16 ? 5e-2 : 1e-5;
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--dump"))
            dump = argv[i + 1];
        else if (!strcmp(argv[i], "--against"))
            against = argv[i + 1];
        else if (!strcmp(argv[i], "--device"))
            device = argv[i + 1];
    }
    if (!strcmp(device, "cuda") && sh_world_set_device(w, SH_CUDA, &err)) {
        if (sh_world_rank(w) == 0)
            printf("skip: %s\n", ck_err_msg(&err));
        return th_finish(w, 77);
    }
    int rank = sh_world_rank(w), ws = sh_world_size(w);
    if (B % ws) {
        ck_err_set(&err, -EINVAL, "the world size %d must divide the batch %d", ws, B);
        th_die(w, "world", &err);
    }
    sh_mesh *mesh = th_mesh(w, argc, argv);
    model md;
    build(w, mesh, &md, bf16, offload);
    sh_adamw_opts ao;
    sh_adamw_opts_default(&ao);
    ao.lr = 1e-2f;
    sh_adamw *opt;
    if (sh_adamw_new(md.root, &ao, &opt, &err))
        th_die(w, "optimizer", &err);

    int b = B / ws;
    float *hx = malloc(sizeof(float) * b * DIN), *ht = malloc(sizeof(float) * b * DOUT);
    sh_tensor x = SH_TENSOR_INIT_ON(sh_world_device(w)), t = x, d = x;
    double loss[STEPS];
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < b; i++) {
            long g = (long)s * B + (long)rank * b + i;
            for (int j = 0; j < DIN; j++)
                hx[i * DIN + j] = datum(g, j, 1);
            for (int j = 0; j < DOUT; j++)
                ht[i * DOUT + j] = 0.5f * datum(g, j, 2);
        }
        double ss = 0, norm;
        if (sh_tensor_resize(&x, CK_F32, 2, (int64_t[]){b, DIN}, &err) ||
            sh_tensor_resize(&t, CK_F32, 2, (int64_t[]){b, DOUT}, &err) ||
            sh_tensor_resize(&d, CK_F32, 2, (int64_t[]){b, DOUT}, &err) ||
            sh_copy(w, x.data, hx, sizeof(float) * b * DIN, &err) ||
            sh_copy(w, t.data, ht, sizeof(float) * b * DOUT, &err) ||
            sh_module_forward(md.root, &x, &md.y, &err) ||
            sh_copy(w, d.data, md.y.data, md.y.numel * sizeof(float), &err) ||
            sh_scale_add(w, d.data, t.data, -1.0f, d.numel, &err) ||
            sh_sumsq(w, d.data, d.numel, &ss, &err) ||
            sh_scale(w, d.data, 1.0f / (float)(b * DOUT), d.numel, &err) ||
            sh_module_backward(md.root, &d, &md.dx, &err) ||
            sh_clip_grad_norm(md.root, MAX_NORM, &norm, &err) || sh_adamw_step(opt, &err) ||
            sh_zero_grad(md.root, &err))
            th_die(w, "step", &err);
        double l = 0.5 * ss / (double)(b * DOUT) / ws;
        if (sh_all_reduce(sh_world_comm(w), &l, &loss[s], 1, CK_F64, SH_SUM, NULL, &err))
            th_die(w, "loss", &err);
    }
    sh_state_dict full;
    if (sh_model_full_state_dict(md.root, &full, &err))
        th_die(w, "full state dict", &err);

    int status = 0;
    if (rank == 0 && dump) {
        FILE *f = fopen(dump, "wb");
        for (size_t i = 0; f && i < full.n; i++)
            fwrite(full.entry[i].data, sizeof(float), ck_box_numel(&full.entry[i].box), f);
        if (!f || fwrite(loss, sizeof loss, 1, f) != 1 || fclose(f)) {
            printf("cannot write %s\n", dump);
            status = 1;
        } else {
            printf("ok: %s, world %d: loss %.6g -> %.6g, dumped to %s\n", device, ws, loss[0],
                   loss[STEPS - 1], dump);
        }
    }
    if (rank == 0 && against) {
        FILE *f = fopen(against, "rb");
        double lrel = 0, pabs = 0, ref[STEPS];
        for (size_t i = 0; f && i < full.n; i++) {
            size_t n = ck_box_numel(&full.entry[i].box);
            float *r = malloc(n * sizeof(float) + 1);
            const float *p = full.entry[i].data;
            if (!r || fread(r, sizeof(float), n, f) != n)
                pabs = INFINITY;
            for (size_t j = 0; r && j < n; j++)
                if (!(fabs((double)p[j] - r[j]) <= pabs))
                    pabs = fabs((double)p[j] - r[j]);
            free(r);
        }
        if (!f || fread(ref, sizeof ref, 1, f) != 1) {
            printf("cannot read the reference %s\n", against);
            status = 1;
        } else {
            /* bf16 adds a roughly constant error to the output, which a per-step ratio
             * would magnify as the loss falls: relative to the first step's. */
            for (int s = 0; s < STEPS; s++) {
                double diff = fabs(loss[s] - ref[s]) / fabs(ref[bf16 ? 0 : s]);
                if (!(diff <= lrel))
                    lrel = diff;
            }
            status = lrel <= tol && pabs <= ptol ? 0 : 1;
            printf("%s: %s%s%s, world %d, %d steps against %s: loss %.6g -> %.6g, max loss "
                   "rel diff %.3g (<= %g), max param abs diff %.3g (<= %g)\n",
                   status ? "FAIL" : "ok", device, bf16 ? " bf16" : "",
                   offload ? " offload" : "", ws, STEPS, against,
                   loss[0], loss[STEPS - 1], lrel, tol, pabs, ptol);
        }
        if (f)
            fclose(f);
    }
    sh_state_dict_free(&full);
    sh_tensor_free(&x);
    sh_tensor_free(&t);
    sh_tensor_free(&d);
    free(hx);
    free(ht);
    sh_adamw_free(opt);
    free_model(&md);
    sh_mesh_free(mesh);
    return th_finish(w, status);
}
