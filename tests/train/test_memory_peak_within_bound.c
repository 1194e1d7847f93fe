/* test_memory_peak_within_bound: the library's own counters bound each rank's
 * parameters, gradients and optimizer state at its peak during training:
 *
 *   peak <= total / N + U + slack
 *
 * total: every parameter's f32 value, gradient and two AdamW moments, unsharded;
 * U: the largest group's unsharded parameters (param dtype) plus unsharded f32
 *    gradients, which coexist during that group's backward;
 * slack: torch.chunk's uneven split, at most one extra dim-0 row per tensor and kind.
 * Every group reshards after forward and prefetching is off (explicit empty lists):
 * prefetching holds one more group unsharded by design. The model's root has no
 * parameters of its own, so no group but the running block is ever unsharded.
 *
 * Collective buffers are bounded on their own:
 *
 *   comm peak <= 2 * (S * N + S)
 *
 * S: a block's slot, its shard padded to whole rows of the largest rank's part
 * (f32). One all-gather (this rank's slot in, N slots out) and one reduce-scatter
 * (N slots in, one out) may be alive together: a group's all-gather runs while the
 * previous group's reduce-scatter is in flight. A second reduce-scatter never is, as
 * each post-backward retires the one before it; holding every group's until the end
 * of backward, as this library once did, keeps the whole model's gradients unsharded
 * in collective buffers and breaks this bound.
 */
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "mlp.h"

static const tm_dims DIMS = {.din = 48, .d = 48, .h = 96, .dout = 48, .nblocks = 4,
                             .root_params = false, .init_bound = 0.1f};

int main(int argc, char **argv)
{
    sh_world *w = th_init(&argc, &argv);
    sh_mesh *mesh = th_mesh(w, argc, argv);
    ck_err err = {0};
    int N = sh_world_size(w), rank = sh_world_rank(w);
    tm_model m;
    sh_fsdp_opts o;
    sh_fsdp_opts_default(&o);
    o.reshard_after_forward.kind = SH_RESHARD_TRUE;
    if (tm_build(w, &DIMS, &m, &err))
        th_die(w, "build", &err);
    for (int b = 0; b < DIMS.nblocks; b++)
        if (sh_fully_shard(m.block[b], mesh, &o, &err))
            th_die(w, "fully_shard", &err);
    if (sh_fully_shard(m.root, mesh, &o, &err))
        th_die(w, "fully_shard root", &err);
    sh_module *all[TM_MAX_BLOCKS + 1] = {m.root};
    for (int b = 0; b < DIMS.nblocks; b++)
        all[b + 1] = m.block[b];
    for (int i = 0; i <= DIMS.nblocks; i++)
        if (sh_set_modules_to_forward_prefetch(all[i], NULL, 0, &err) ||
            sh_set_modules_to_backward_prefetch(all[i], NULL, 0, &err))
            th_die(w, "prefetch off", &err);
    if (sh_module_to_empty(m.root, SH_CPU, &err) || sh_module_reset_parameters(m.root, 5, &err))
        th_die(w, "materialize", &err);
    sh_adamw *opt;
    if (sh_adamw_new(m.root, NULL, &opt, &err))
        th_die(w, "optimizer", &err);

    /* The bound's terms, from the model's shapes. */
    tm_param_desc desc[TM_MAX_PARAMS];
    int np = tm_param_descs(&DIMS, desc);
    uint64_t total = 0, slack = 0, block = 0, slot = 0;
    for (int i = 0; i < np; i++) {
        uint64_t rows = (uint64_t)desc[i].shape[0];
        uint64_t row = desc[i].ndim == 2 ? (uint64_t)desc[i].shape[1] : 1;
        total += 4 * rows * row * sizeof(float);
        slack += 4 * row * sizeof(float);
        if (i < 4) {   /* every block has the same shapes */
            block += 2 * rows * row * sizeof(float);
            slot += (rows + (uint64_t)N - 1) / (uint64_t)N * row * sizeof(float);
        }
    }

    enum { B = 8 };
    int GB = B * N;
    float *x = malloc(sizeof(float) * (size_t)GB * DIMS.din);
    float *t = malloc(sizeof(float) * (size_t)GB * DIMS.dout);
    sh_mem_reset_peak(w);
    for (int s = 0; s < 3; s++) {
        double loss;
        tm_data(&DIMS, s, GB, x, t);
        if (tm_fwd_bwd(&m, x + (size_t)rank * B * DIMS.din, t + (size_t)rank * B * DIMS.dout, B,
                       1, &loss, &err) ||
            sh_clip_grad_norm(m.root, 1.0, NULL, &err) || sh_adamw_step(opt, &err) ||
            sh_zero_grad(m.root, &err))
            th_die(w, "train", &err);
    }
    sh_mem_stats st;
    sh_mem_get(w, &st);
    uint64_t bound = total / (uint64_t)N + block + slack;
    uint64_t comm_bound = 2 * (slot * (uint64_t)N + slot);
    int status = st.state_peak <= bound ? 0 : 1;
    printf("rank %d of %d: peak params+grads+optim %llu B <= bound %llu B (total/N %llu, "
           "largest group unsharded %llu, slack %llu): %s; peaks by kind: params %llu, grads "
           "%llu, optim %llu, comm buffers %llu\n",
           rank, N, (unsigned long long)st.state_peak, (unsigned long long)bound,
           (unsigned long long)(total / (uint64_t)N), (unsigned long long)block,
           (unsigned long long)slack, status ? "FAIL" : "ok",
           (unsigned long long)st.peak[SH_MEM_PARAM], (unsigned long long)st.peak[SH_MEM_GRAD],
           (unsigned long long)st.peak[SH_MEM_OPTIM], (unsigned long long)st.peak[SH_MEM_COMM]);
    if (st.peak[SH_MEM_COMM] > comm_bound) {
        printf("rank %d of %d: FAIL: collective buffers peaked at %llu B > %llu B, one "
               "all-gather and one reduce-scatter of a block (slot %llu B): more than one "
               "reduce-scatter was in flight\n", rank, N,
               (unsigned long long)st.peak[SH_MEM_COMM], (unsigned long long)comm_bound,
               (unsigned long long)slot);
        status = 1;
    } else {
        printf("rank %d of %d: collective buffers peak %llu B <= %llu B: ok\n", rank, N,
               (unsigned long long)st.peak[SH_MEM_COMM], (unsigned long long)comm_bound);
    }
    free(x);
    free(t);
    sh_adamw_free(opt);
    tm_free(&m);
    sh_mem_get(w, &st);
    if (st.state_cur || st.cur[SH_MEM_COMM]) {
        printf("rank %d: %llu bytes still counted after freeing everything\n", rank,
               (unsigned long long)(st.state_cur + st.cur[SH_MEM_COMM]));
        status = 1;
    }
    sh_mesh_free(mesh);
    return th_finish(w, status);
}
