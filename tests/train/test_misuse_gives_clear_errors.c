/* test_misuse_gives_clear_errors: each misuse of the API gets a negative code and a
 * message that names what went wrong, and the process carries on (no crash, no
 * abort, no hang). */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "mlp.h"

static int failures;

/* rc must be `want` and the message must contain `needle`. */
static void expect(sh_world *w, const char *what, int rc, int want, const ck_err *err,
                   const char *needle)
{
    bool ok = rc == want && strstr(ck_err_msg(err), needle) != NULL;
    if (sh_world_rank(w) == 0)
        printf("%s %s: rc %d, \"%s\"\n", ok ? "ok  " : "FAIL", what, rc, ck_err_msg(err));
    failures += !ok;
}

static void build(sh_world *w, tm_model *m)
{
    static const tm_dims dims = {.din = 4, .d = 6, .h = 8, .dout = 2, .nblocks = 2,
                                 .root_params = true, .init_bound = 0.3f};
    ck_err err = {0};
    if (tm_build(w, &dims, m, &err))
        th_die(w, "build", &err);
}

int main(int argc, char **argv)
{
    sh_world *w = th_init(&argc, &argv);
    sh_mesh *mesh = th_mesh(w, argc, argv);
    int N = sh_world_size(w);
    ck_err err = {0};
    tm_model m;
    int rc;

    /* A mesh that does not match the world. */
    int shape[1] = {N + 1};
    sh_mesh *bad;
    rc = sh_mesh_new(w, 1, shape, NULL, &bad, &err);
    expect(w, "mesh larger than the world", rc, -EINVAL, &err, "needs");

    /* The optimizer before fully_shard. */
    build(w, &m);
    ck_err_clear(&err);
    sh_adamw *opt = NULL;
    rc = sh_adamw_new(m.root, NULL, &opt, &err);
    expect(w, "optimizer before fully_shard", rc, -EINVAL, &err, "after fully_shard");

    /* fully_shard twice on one module. */
    ck_err_clear(&err);
    rc = sh_fully_shard(m.block[0], mesh, NULL, &err);
    if (rc)
        th_die(w, "first fully_shard", &err);
    rc = sh_fully_shard(m.block[0], mesh, NULL, &err);
    expect(w, "fully_shard twice", rc, -EALREADY, &err, "blocks.0");

    /* reshard_after_forward that does not divide the shard world. */
    ck_err_clear(&err);
    sh_fsdp_opts o;
    sh_fsdp_opts_default(&o);
    o.reshard_after_forward = (sh_reshard){SH_RESHARD_TO, N + 1};
    rc = sh_fully_shard(m.block[1], mesh, &o, &err);
    expect(w, "reshard_after_forward not a divisor", rc, -EINVAL, &err, "must divide");

    if (sh_fully_shard(m.block[1], mesh, NULL, &err) || sh_fully_shard(m.root, mesh, NULL, &err))
        th_die(w, "fully_shard", &err);

    /* A forward before materialization. */
    ck_err_clear(&err);
    sh_tensor in = SH_TENSOR_INIT, out = SH_TENSOR_INIT;
    int64_t is[2] = {2, 4};
    if (sh_tensor_resize(&in, CK_F32, 2, is, &err))
        th_die(w, "tensor", &err);
    memset(in.data, 0, in.numel * sizeof(float));
    rc = sh_module_forward(m.root, &in, &out, &err);
    expect(w, "forward before to_empty", rc, -EINVAL, &err, "sh_module_to_empty");

    ck_err_clear(&err);
    rc = sh_module_to_empty(m.root, SH_CUDA, &err);
    expect(w, "to_empty on CUDA while the world is on CPU", rc, -ENODEV, &err, "sh_world_set_device");
    if (sh_module_to_empty(m.root, SH_CPU, &err) || sh_module_reset_parameters(m.root, 1, &err))
        th_die(w, "materialize", &err);

    /* A block's callback run directly, outside sh_module_forward: its parameters are
     * sharded and it is told to go through the hooks. */
    ck_err_clear(&err);
    sh_tensor h = SH_TENSOR_INIT;
    int64_t hs[2] = {2, 6};
    if (sh_tensor_resize(&h, CK_F32, 2, hs, &err))
        th_die(w, "tensor", &err);
    memset(h.data, 0, h.numel * sizeof(float));
    sh_tensor hout = SH_TENSOR_INIT;
    rc = tm_block_forward(m.block[0], &h, &hout, &m.bstate[0], &err);
    expect(w, "block callback run outside the hooks", rc, -EPERM, &err, "sh_module_forward");
    sh_tensor_free(&hout);
    ck_err_clear(&err);
    float *grad;
    rc = sh_param_grad(m.bstate[0].p[0], &grad, &err);
    expect(w, "gradient outside backward", rc, -EPERM, &err, "sh_module_backward");

    /* Through the hooks the same block runs. */
    ck_err_clear(&err);
    rc = sh_module_forward(m.root, &in, &out, &err);
    expect(w, "forward through the hooks works", rc, 0, &err, "");

    /* Prefetching a module that was never sharded. */
    ck_err_clear(&err);
    rc = sh_set_modules_to_forward_prefetch(m.block[0], &m.blocks, 1, &err);
    expect(w, "prefetch of an unsharded module", rc, -EINVAL, &err, "not sharded");

    sh_tensor_free(&in);
    sh_tensor_free(&out);
    sh_tensor_free(&h);
    tm_free(&m);
    sh_mesh_free(mesh);
    if (sh_world_rank(w) == 0)
        printf("%d misuse check(s) failed\n", failures);
    return th_finish(w, failures ? 1 : 0);
}
