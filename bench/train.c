/* bench/train - training throughput, and what an asynchronous checkpoint costs the
 * training thread beside a memcpy of the same bytes, measured in the same run.
 *
 *   shardrun --nproc-per-node 4 build/bench/train [--mesh 2x2] [--daemon SOCKET]
 *            [--params 50M|200M] [shard-train's model and batch options]
 *            [--steps S] [--ckpt-every K] [--ckpt-mode lazy|copy]
 *            [--device cpu|cuda] [--bf16] [--offload]
 *
 * --params picks a model of about that many parameters, with a few steps (run it on
 * 2 ranks); later options still win. Phase 1 trains S steps without saving
 * (tokens/s). Phase 2 trains S steps with a save every K steps (not after the last,
 * so that every save's fence is measured) through the trainer's checkpoint path
 * (ckptd with --daemon, or the embedded engine; staging reserved at start as
 * shard-train does) and records, per save, on the slowest rank: the stall (the time
 * save_async or save_lazy blocked) and the fence (the time the next optimizer step
 * waited for the lazy copy). The reference is a copy of one rank's shard bytes
 * (model and AdamW moments, the largest rank's) into host memory already touched: a
 * memcpy on CPU ranks; on CUDA ranks the device-to-host copy (cudaMemcpy through the
 * device table) of the shards in device memory into pinned memory (sh_host_buffer_alloc),
 * the DMA the save's staging copy is. --ckpt-every 0 runs phase 1 alone (throughput,
 * no checkpoint). Phase 1 also prints the host's waits for the device per step (none
 * expected: tr_step queues and returns), the model's FLOPs (bench/peer-train.py's
 * count) and, on CUDA, the MFU against a bf16 GEMM timed in the same run (cuBLAS,
 * 8192^3). --device cuda without a usable GPU prints why and exits 77.
 * Checkpoints go to a fresh directory under /var/tmp (or --ckpt-root), removed at
 * the end.
 */
#include <cblas.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "data.h"
#include "model.h"
#include "saves.h"
#include "step.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Rank 0: the saves that finished since the last call, their times to commit summed. */
static void take_reports(sh_checkpoint *ck, double *seconds, int *n)
{
    sh_checkpoint_done d;
    ck_err err = {0};
    while (sh_checkpoint_poll(ck, &d, &err) == 1) {
        if (d.rc)
            fprintf(stderr, "bench/train: save %s failed: %s\n", d.name, d.msg);
        *seconds += d.seconds;
        (*n)++;
    }
}

static void die(sh_world *w, const char *what, const ck_err *err)
{
    fprintf(stderr, "bench/train: rank %d: %s: %s\n", sh_world_rank(w), what, ck_err_msg(err));
    exit(1);
}

/* Model FLOPs of a token's training step, PaLM's count (bench/peer-train.py's): 6 x
 * the linear layers' parameters, the tied head included, plus 12 L C T for attention. */
static double flops_per_token(const tr_config *c)
{
    double L = c->layers, C = c->dim, T = c->seq, V = c->vocab;
    return 6.0 * (L * 12.0 * C * C + V * C) + 12.0 * L * C * T;
}

/* TFLOP/s of a bf16 GEMM of 8192^3 (f32 out, as the trainer's) through sh_gemm: cuBLAS
 * on a CUDA rank, the denominator of MFU. */
static double gemm_rate(sh_world *w)
{
    const int n = 8192, reps = 10;
    size_t nn = (size_t)n * n;
    void *x = NULL, *y = NULL, *z = NULL;
    ck_err err = {0};
    if (sh_buffer_alloc(w, nn * 2, &x, &err) || sh_buffer_alloc(w, nn * 2, &y, &err) ||
        sh_buffer_alloc(w, nn * 4, &z, &err) || sh_zero(w, x, nn * 2, &err) ||
        sh_zero(w, y, nn * 2, &err) ||
        sh_gemm(w, CK_BF16, false, true, n, n, n, 1.0f, x, n, y, n, 0.0f, z, n, &err) ||
        sh_device_sync(w, &err))
        die(w, "bf16 GEMM rate", &err);
    double t0 = now_s();
    for (int r = 0; r < reps; r++)
        if (sh_gemm(w, CK_BF16, false, true, n, n, n, 1.0f, x, n, y, n, 0.0f, z, n, &err))
            die(w, "bf16 GEMM rate", &err);
    if (sh_device_sync(w, &err))
        die(w, "bf16 GEMM rate", &err);
    double dt = now_s() - t0;
    sh_buffer_free(w, x);
    sh_buffer_free(w, y);
    sh_buffer_free(w, z);
    return 2.0 * (double)n * n * n * reps / dt / 1e12;
}

/* --params presets: a model of about that many parameters, a batch and a step count
 * that keep a run on 2 ranks of 2 cores to a few minutes. */
static const struct {
    const char *name;
    const char *args[14];
} presets[] = {
    {"50M", {"--layers", "8", "--dim", "720", "--heads", "8", "--seq", "64", "--batch", "4",
             "--steps", "6", "--ckpt-every", "2"}},
    {"200M", {"--layers", "16", "--dim", "1024", "--heads", "16", "--seq", "64", "--batch",
              "2", "--steps", "6", "--ckpt-every", "2"}},
};

/* The defaults, then a --params preset, then the user's other options (later ones
 * win). NULL, with *n 0, for an unknown preset. */
static char **with_defaults(int argc, char **argv, int *n)
{
    static const char *const def[] = {"--layers", "4", "--dim", "256", "--heads", "8",
                                      "--seq", "128", "--batch", "24", "--steps", "20",
                                      "--ckpt-every", "4", "--ckpt-root", ""};
    size_t nd = sizeof def / sizeof *def, np = 14;
    char **v = calloc(nd + np + (size_t)argc + 1, sizeof *v);
    if (!v)
        return NULL;
    v[0] = argv[0];
    memcpy(v + 1, def, sizeof def);
    *n = (int)nd + 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--params") || i + 1 == argc) {
            v[(*n)++] = argv[i];
            continue;
        }
        size_t k = 0;
        while (k < sizeof presets / sizeof *presets && strcmp(presets[k].name, argv[i + 1]))
            k++;
        if (k == sizeof presets / sizeof *presets) {
            fprintf(stderr, "bench/train: --params %s: the presets are 50M and 200M\n",
                    argv[i + 1]);
            free(v);
            *n = 0;
            return NULL;
        }
        for (size_t j = 0; j < np; j++)
            v[(*n)++] = (char *)presets[k].args[j];
        i++;
    }
    return v;
}

int main(int argc, char **argv)
{
    ck_err err = {0};
    sh_world *w;
    openblas_set_num_threads(1);    /* one BLAS thread per rank, as shard-train */
    if (sh_init(&argc, &argv, &w, &err)) {
        fprintf(stderr, "bench/train: %s\n", ck_err_msg(&err));
        return 1;
    }
    int rank = sh_world_rank(w), W = sh_world_size(w), n;
    char **args = with_defaults(argc, argv, &n);
    if (!args && !n)
        return 2;
    tr_args a;
    int rc = args ? tr_args_parse(n, args, &a, &err) : -ENOMEM;
    free(args);
    if (rc)
        return rc == 1 ? 0 : (fprintf(stderr, "bench/train: %s\n", ck_err_msg(&err)), 2);

    if (a.cuda && sh_world_set_device(w, SH_CUDA, &err)) {
        if (rank == 0)
            printf("skip: bench/train --device cuda: %s\n", ck_err_msg(&err));
        sh_finalize(w);
        return 77;
    }

    /* A fresh root, named by rank 0. */
    int32_t root_msg[PATH_MAX / 4] = {0};
    char *root = (char *)root_msg;
    if (rank == 0) {
        snprintf(root, PATH_MAX, "%s", a.ckpt_root[0] ? a.ckpt_root : "/var/tmp/bench-train.XXXXXX");
        if (!a.ckpt_root[0] && !mkdtemp(root))
            root[0] = '\0';
    }
    if (sh_broadcast(sh_world_comm(w), root_msg, PATH_MAX / 4, CK_I32, 0, NULL, &err))
        die(w, "broadcast", &err);
    if (!root[0]) {
        fprintf(stderr, "bench/train: cannot create a directory under /var/tmp\n");
        return 1;
    }

    ck_mesh md;
    char spec[32];
    snprintf(spec, sizeof spec, "%d", W);
    if (ck_mesh_parse(a.mesh ? a.mesh : spec, NULL, &md, &err))
        die(w, "--mesh", &err);
    int shape[2] = {(int)md.size[0], md.ndim == 2 ? (int)md.size[1] : 0};
    const char *n1[] = {"shard"}, *n2[] = {"replicate", "shard"};
    sh_mesh *mesh;
    tr_model m;
    tr_data data;
    sh_adamw *opt;
    sh_state_dict msd, osd;
    sh_adamw_opts ao = {a.lr, 0.9f, 0.95f, 1e-8f, a.wd};
    if (sh_mesh_new(w, md.ndim, shape, md.ndim == 1 ? n1 : n2, &mesh, &err) ||
        tr_data_open(&data, a.data, a.model.seq, a.model.seed, &err) ||
        tr_model_build(w, &a.model, &m, &err) ||
        tr_model_materialize(&m, mesh, &(tr_fsdp){a.bf16, a.offload, a.no_prefetch}, &err) ||
        sh_adamw_new(m.root, &ao, &opt, &err) || sh_model_state_dict(m.root, &msd, &err) ||
        sh_optim_state_dict(opt, &osd, &err))
        die(w, "setup", &err);
    const sh_state_dict *sd[] = {&msd, &osd};
    const char blob[] = "bench";
    const sh_blob blobs[] = {{"bench", blob, sizeof blob - 1}};
    sh_checkpoint *ck = NULL;
    bool saving = a.ckpt_every > 0;
    if (saving &&
        (sh_checkpoint_new(w, &(sh_checkpoint_opts){.root = root, .daemon = a.daemon,
                                                    .optim = opt}, &ck, &err) ||
         sh_checkpoint_reserve(ck, sd, 2, blobs, 1, &err)))
        die(w, "checkpoints", &err);

    tr_step_buf buf = {0};
    tr_step_cfg sc = {a.batch, a.accum, a.lr, a.clip};
    for (int i = 0; i < 2; i++)      /* warm-up: first-touch of buffers, lazy init */
        if (tr_step(&m, opt, &data, &sc, &buf, &err))
            die(w, "step", &err);

    /* The device runs behind the host: time from and to an idle device. */
    if (sh_device_sync(w, &err))
        die(w, "sync", &err);
    double t0 = now_s();
    long waits = sh_world_host_waits(w);
    for (long s = 0; s < a.steps; s++)
        if (tr_step(&m, opt, &data, &sc, &buf, &err))
            die(w, "step", &err);
    waits = sh_world_host_waits(w) - waits;
    if (sh_device_sync(w, &err))
        die(w, "sync", &err);
    double plain = now_s() - t0;
    double tok = (double)a.batch * a.model.seq * (double)a.steps;
    double peak = a.cuda ? gemm_rate(w) : 0.0;
    if (rank == 0) {
        printf("bench/train: %d layers, dim %d, seq %d, %lld parameters; mesh %s, %d ranks "
               "on %s%s%s; %s\n", a.model.layers, a.model.dim, a.model.seq,
               (long long)tr_model_numel(&a.model), a.mesh ? a.mesh : spec, W, a.device,
               a.bf16 ? " bf16" : "", a.offload ? " offload" : "",
               !saving ? "no saves (--ckpt-every 0)"
               : a.daemon || getenv("CKPTD_SOCKET") ? "saves through ckptd"
                                                   : "saves through the embedded engine");
        printf("  train only        %10.0f tokens/s  (%ld steps of %d x %d tokens; the host "
               "waited for the device %.2f times a step)\n", tok / plain, a.steps, a.batch,
               a.model.seq, (double)waits / (double)a.steps);
        double tf = tok / plain * flops_per_token(&a.model) / 1e12;
        printf("  model FLOPs       %10.2f TFLOP/s (6 x matmul parameters + 12 L C T a token)",
               tf);
        if (peak > 0)
            printf("; MFU %.1f%% of a bf16 GEMM at %.1f TFLOP/s (cuBLAS, 8192^3, timed here)",
                   100.0 * tf / peak, peak);
        printf("\n");
        fflush(stdout);
    }
    /* Phase 2 (saves), when there are any. */
    if (saving) {
        /* Per save, this rank's stall and fence; the slowest rank's after the run. */
        int max_saves = (int)(a.steps / a.ckpt_every) + 1;
        double *stall = calloc((size_t)max_saves * 2, sizeof *stall);
        double *fence = stall + max_saves;
        double drain_sum = 0.0;
        int saves = 0, done_n = 0;
        if (!stall)
            die(w, "setup", &(ck_err){-ENOMEM, "out of memory"});
        t0 = now_s();
        for (long s = 1; s <= a.steps; s++) {
            if (tr_step(&m, opt, &data, &sc, &buf, &err))
                die(w, "step", &err);
            if (saves && s - 1 == (long)saves * a.ckpt_every)
                fence[saves - 1] = sh_checkpoint_fence_ms(ck);
            /* As the trainer does: move the save in flight on once per step, and take the
             * reports of the finished ones, so that the next save does not wait for it and
             * its time to commit is measured when it commits. */
            if (sh_checkpoint_progress(ck, &err))
                die(w, "checkpoint progress", &err);
            take_reports(ck, &drain_sum, &done_n);
            if (s % a.ckpt_every || s == a.steps)
                continue;
            char name[CK_NAME_MAX];
            tr_save_name((uint64_t)s, name);
            if ((a.ckpt_copy ? sh_checkpoint_save_async : sh_checkpoint_save_lazy)(
                    ck, name, (uint64_t)s, sd, 2, blobs, 1, &stall[saves], &err))
                die(w, "save", &err);
            saves++;
        }
        if (sh_device_sync(w, &err))
            die(w, "sync", &err);
        double with_saves = now_s() - t0;
        if (sh_checkpoint_wait(ck, &err))
            die(w, "wait", &err);
        take_reports(ck, &drain_sum, &done_n);
        if (rank == 0 && tr_prune_saves(root, 2, &err))
            die(w, "removing old saves", &err);

        /* The reference: this rank's shard bytes, copied into touched memory. */
        size_t bytes = 0;
        for (int k = 0; k < 2; k++)
            for (size_t i = 0; i < sd[k]->n; i++)
                bytes += ck_box_numel(&sd[k]->entry[i].box) * sizeof(float);
        char *dst;
        if (sh_host_buffer_alloc(w, bytes + 1, (void **)&dst, &err))
            die(w, "reference buffer", &err);
        memset(dst, 1, bytes + 1);
        double best = 1e30;
        for (int r = 0; r < 5; r++) {
            double c0 = now_s();
            size_t off = 0;
            for (int k = 0; k < 2; k++)
                for (size_t i = 0; i < sd[k]->n; i++) {
                    const sh_shard_entry *e = &sd[k]->entry[i];
                    size_t nb = ck_box_numel(&e->box) * sizeof(float);
                    if (nb && e->device == SH_CUDA) {
                        if (sh_copy_to_host(w, dst + off, e->data, nb, &err))
                            die(w, "reference copy", &err);
                    } else if (nb) {
                        memcpy(dst + off, e->data, nb);
                    }
                    off += nb;
                }
            double c = (now_s() - c0) * 1e3;
            best = c < best ? c : best;
        }
        sh_host_buffer_free(w, dst);
        double memcpy_ms = best;
        uint64_t most = bytes;
        /* The slowest rank's stall and fence are the step's. */
        if (sh_all_reduce(sh_world_comm(w), &memcpy_ms, &memcpy_ms, 1, CK_F64, SH_MAX, NULL,
                          &err) ||
            sh_all_reduce(sh_world_comm(w), &most, &most, 1, CK_I64, SH_MAX, NULL, &err) ||
            sh_all_reduce(sh_world_comm(w), stall, stall, (size_t)max_saves * 2, CK_F64, SH_MAX,
                          NULL, &err))
            die(w, "all-reduce", &err);

        if (rank == 0) {
            printf("  train + saves     %10.0f tokens/s  (a save every %ld steps, %d saves, "
                   "%s mode)\n", tok / with_saves, a.ckpt_every, saves, a.ckpt_mode);
            printf("  %-17s %10.3f ms  (%.2f MB on the largest rank)\n",
                   a.cuda ? "D2H copy same bytes" : "memcpy same bytes", memcpy_ms,
                   (double)most / 1e6);
            double sum = 0.0, worst = 0.0;
            for (int k = 0; k < saves; k++) {
                double waited = stall[k] + fence[k];
                sum += waited;
                worst = waited > worst ? waited : worst;
                printf("  save %d            stall %8.2f ms  fence %8.2f ms  (stall + fence) / "
                       "memcpy = %.2fx\n", k + 1, stall[k], fence[k],
                       memcpy_ms > 0 ? waited / memcpy_ms : 0.0);
            }
            printf("  training waited   %10.2f ms mean, %.2f ms max per save -> %.2fx memcpy "
                   "(mean)\n", saves ? sum / saves : 0.0, worst,
                   saves && memcpy_ms > 0 ? sum / saves / memcpy_ms : 0.0);
            printf("  save to commit    %10.0f ms mean (drained while training)\n",
                   done_n ? drain_sum / done_n * 1e3 : 0.0);
        }
        sh_checkpoint_free(ck);
        free(stall);
    }
    if (rank == 0 && !a.ckpt_root[0])
        nftw(root, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    tr_step_buf_free(&buf);
    sh_state_dict_free(&msd);
    sh_state_dict_free(&osd);
    sh_adamw_free(opt);
    tr_model_free(&m);
    sh_mesh_free(mesh);
    tr_data_close(&data);
    sh_finalize(w);
    return 0;
}
