/* train.c - shard-train: a byte-level GPT trained with FSDP over MPI ranks, with
 * asynchronous checkpoints and resume onto any mesh. See docs/gpt-trainer.md.
 *
 * --device cuda puts every rank on its GPU (sh_world_set_device) before anything is
 * built; the model computes through sh/ops.h, so the same code runs there.
 *
 * The loop: the step's learning rate from the schedule; one step (step.c: for each
 * micro-batch, this rank's slice of the step's samples, forward, cross-entropy,
 * backward; then clip, AdamW, zero the gradients, the loss averaged over ranks); an
 * asynchronous save every --ckpt-every steps; a log line.
 */
#include <cblas.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ck/ckpt.h"
#include "cli.h"
#include "data.h"
#include "lr.h"
#include "model.h"
#include "saves.h"
#include "step.h"

typedef struct trainer {
    tr_args a;
    sh_world *w;
    sh_mesh *mesh;
    tr_model model;
    sh_adamw *opt;
    sh_state_dict msd, osd;    /* aliases of the live shards: what a checkpoint holds */
    tr_data data;
    tr_lr sched;
    sh_checkpoint *ckpt;
    long step;                 /* steps done */
    double loss;               /* the last step's */
    char saved[512];           /* rank 0: saves finished since the last log line */
    int failed_in_a_row;       /* saves failed since the last one committed (every rank) */
    int failed_saves;          /* in all */
    bool failed_together;      /* the run stops on a verdict every rank got */
    char config[1024];         /* the config blob */
} trainer;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int make_mesh(trainer *t, ck_err *err)
{
    ck_mesh m;
    char spec[32];
    snprintf(spec, sizeof spec, "%d", sh_world_size(t->w));
    int rc = ck_mesh_parse(t->a.mesh ? t->a.mesh : spec, NULL, &m, err);
    if (!rc && m.ndim > 2)
        rc = ck_err_set(err, -EINVAL, "--mesh %s: 1-D (shard) or 2-D (replicate x shard) only",
                        t->a.mesh);
    if (rc)
        return rc;
    int shape[2] = {(int)m.size[0], m.ndim == 2 ? (int)m.size[1] : 0};
    const char *n1[] = {"shard"}, *n2[] = {"replicate", "shard"};
    return sh_mesh_new(t->w, m.ndim, shape, m.ndim == 1 ? n1 : n2, &t->mesh, err);
}

/* The model's shape and the run's hyper-parameters, as "key=value" lines. */
static void format_config(trainer *t)
{
    const tr_args *a = &t->a;
    snprintf(t->config, sizeof t->config,
             "vocab=%d\nseq=%d\nlayers=%d\ndim=%d\nheads=%d\nseed=%" PRIu64 "\n"
             "batch=%d\naccum=%d\nlr=%.9g\nmin_lr=%.9g\nwarmup=%ld\nschedule_steps=%ld\n"
             "clip=%.9g\nwd=%.9g\ndata_bytes=%zu\n",
             a->model.vocab, a->model.seq, a->model.layers, a->model.dim, a->model.heads,
             a->model.seed, a->batch, a->accum, (double)a->lr, (double)a->min_lr, a->warmup,
             t->sched.total, (double)a->clip, (double)a->wd, t->data.len);
}

/* The value of key in "key=value" lines, or NULL. */
static const char *kv(const char *text, const char *key, char *out, size_t len)
{
    size_t kl = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, key, kl) == 0 && p[kl] == '=') {
            size_t n = strcspn(p + kl + 1, "\n");
            snprintf(out, len, "%.*s", (int)(n < len ? n : len - 1), p + kl + 1);
            return out;
        }
    return NULL;
}

static int blob_text(ck_ckpt *ck, const char *name, char *out, size_t len, ck_err *err)
{
    void *data;
    size_t n;
    int rc = ck_blob_get(ck, name, &data, &n, err);
    if (rc)
        return ck_err_set(err, rc, "checkpoint %s: blob '%s'", ck_get_info(ck)->name, name);
    snprintf(out, len, "%.*s", (int)(n < len ? n : len - 1), (const char *)data);
    free(data);
    return 0;
}

/* Loads the newest checkpoint onto this run's mesh: shards of every tensor, AdamW's
 * step, the data position and generator; the schedule's length unless given. */
static int resume(trainer *t, ck_err *err)
{
    char name[CK_NAME_MAX], cfg[1024], buf[256], v1[64], v2[64];
    const sh_state_dict *sd[2] = { &t->msd, &t->osd };
    ck_ckpt *ck;
    int rc = sh_checkpoint_restore(t->w, t->a.ckpt_root, t->a.daemon, TR_SAVE_PREFIX, sd, 2,
                                   name, &ck, err);
    if (rc == -ENOENT && !t->a.eval) {
        if (sh_world_rank(t->w) == 0)
            printf("resume: no committed checkpoint in %s, starting from step 0\n",
                   t->a.ckpt_root);
        return 0;
    }
    if (rc)
        return rc;
    rc = blob_text(ck, "config", cfg, sizeof cfg, err);
    static const char *const arch[] = {"vocab", "seq", "layers", "dim", "heads"};
    for (size_t i = 0; !rc && i < sizeof arch / sizeof *arch; i++)
        if (!kv(cfg, arch[i], v1, sizeof v1) || !kv(t->config, arch[i], v2, sizeof v2) ||
            strcmp(v1, v2) != 0)
            rc = ck_err_set(err, -EINVAL, "checkpoint %s was trained with %s=%s, this run "
                            "has %s=%s", name, arch[i], v1, arch[i], v2);
    if (!rc)
        rc = sh_checkpoint_load_state_dict(ck, &t->msd, err);
    if (!rc)
        rc = sh_checkpoint_load_state_dict(ck, &t->osd, err);
    tr_data_state ds = {0};
    if (!rc)
        rc = blob_text(ck, "step", buf, sizeof buf, err);
    if (!rc)
        t->step = strtol(buf, NULL, 10);
    if (!rc)
        rc = blob_text(ck, "data", buf, sizeof buf, err);
    if (!rc && kv(buf, "pos", v1, sizeof v1))
        ds.pos = strtoull(v1, NULL, 10);
    if (!rc)
        rc = blob_text(ck, "rng", buf, sizeof buf, err);
    if (!rc && kv(buf, "epoch", v1, sizeof v1) && kv(buf, "state", v2, sizeof v2)) {
        ds.epoch = strtoull(v1, NULL, 10);
        ds.rng_epoch = strtoull(v2, NULL, 16);
    }
    if (!rc && !t->a.schedule_steps && kv(cfg, "schedule_steps", v1, sizeof v1))
        t->sched.total = strtol(v1, NULL, 10);
    char saved_mesh[32];
    ck_mesh_format(&ck_get_info(ck)->mesh, saved_mesh, sizeof saved_mesh);
    ck_close(ck);
    if (rc)
        return rc;
    tr_data_restore(&t->data, &ds);
    sh_adamw_set_step_count(t->opt, t->step);
    format_config(t);
    if (sh_world_rank(t->w) == 0) {
        char here[32];
        ck_mesh_format(sh_mesh_desc(t->mesh), here, sizeof here);
        printf("resumed from %s: step %ld, data position %" PRIu64 ", saved on mesh %s, "
               "loaded onto mesh %s (%d ranks)\n", name, t->step, ds.pos, saved_mesh, here,
               sh_world_size(t->w));
    }
    return 0;
}

/* What a checkpoint holds beside the tensors. */
typedef struct save_blobs {
    char step[32], data[64], rng[96];
    sh_blob b[4];
} save_blobs;

static void blobs_of(trainer *t, save_blobs *sb)
{
    snprintf(sb->step, sizeof sb->step, "%ld\n", t->step);
    snprintf(sb->data, sizeof sb->data, "pos=%" PRIu64 "\n", t->data.st.pos);
    snprintf(sb->rng, sizeof sb->rng, "epoch=%" PRIu64 "\nstate=%016" PRIx64 "\n",
             t->data.st.epoch, t->data.st.rng_epoch);
    sb->b[0] = (sh_blob){"step", sb->step, strlen(sb->step)};
    sb->b[1] = (sh_blob){"data", sb->data, strlen(sb->data)};
    sb->b[2] = (sh_blob){"rng", sb->rng, strlen(sb->rng)};
    sb->b[3] = (sh_blob){"config", t->config, strlen(t->config)};
}

/* Lazy (the default), the copy runs during the next step's forward and backward, and
 * its optimizer step waits at the fence for what is left. */
static int save(trainer *t, double *stall_ms, ck_err *err)
{
    char name[CK_NAME_MAX];
    save_blobs sb;
    blobs_of(t, &sb);
    const sh_state_dict *sd[] = {&t->msd, &t->osd};
    tr_save_name((uint64_t)t->step, name);
    return (t->a.ckpt_copy ? sh_checkpoint_save_async : sh_checkpoint_save_lazy)(
        t->ckpt, name, (uint64_t)t->step, sd, 2, sb.b, 4, stall_ms, err);
}

/* A save failed, as msg says (the same on every rank, so the count is too): logged
 * (by rank 0) and counted; the run goes on unless it is the --max-failed-saves'th in a
 * row. 0 to go on; else the save's error, with *stop set. */
static int save_failed(trainer *t, int code, const char *msg, bool *stop, ck_err *err)
{
    t->failed_saves++;
    t->failed_in_a_row++;
    int k = t->a.max_failed_saves;
    *stop = k > 0 && t->failed_in_a_row >= k;
    if (*stop && k > 1)
        return ck_err_set(err, code, "%s (%d saves in a row failed: --max-failed-saves %d)",
                          msg, t->failed_in_a_row, k);
    if (*stop)
        return ck_err_set(err, code, "%s", msg);
    if (sh_world_rank(t->w) == 0)
        fprintf(stderr, "shard-train: %s; training goes on (%d failed in a row, %d in all; "
                "--max-failed-saves %d)\n", msg, t->failed_in_a_row, t->failed_saves, k);
    return 0;
}

/* Rank 0's part of collect_saves: notes the saves that finished, for the next log line,
 * counts the failed ones, and after each commit keeps only the newest --keep-last. An
 * error is the run's end, for every rank. */
static int poll_saves(trainer *t, ck_err *err)
{
    sh_checkpoint_done d;
    int rc;
    while ((rc = sh_checkpoint_poll(t->ckpt, &d, err)) == 1) {
        size_t n = strlen(t->saved);
        if (d.rc) {
            char why[CK_ERR_MSG_MAX + CK_NAME_MAX + 32];
            snprintf(why, sizeof why, "checkpoint %s failed: %s", d.name, d.msg);
            bool stop;
            if ((rc = save_failed(t, d.rc, why, &stop, err)))
                return rc;
            continue;
        }
        t->failed_in_a_row = 0;
        snprintf(t->saved + n, sizeof t->saved - n, " saved %s (%.1f MB in %.0f ms)", d.name,
                 (double)d.bytes / 1e6, d.seconds * 1e3);
        if (t->a.keep_last > 0 && (rc = tr_prune_saves(t->a.ckpt_root, t->a.keep_last, err)))
            return rc;
    }
    return rc;
}

/* Collective. Moves the saves in flight on; rank 0 learns how they ended (poll) and
 * every rank gets its verdict and the failure counts, so that a run that stops (after
 * --max-failed-saves failed saves in a row) stops every rank at the same step:
 * stopping rank 0 alone left the others waiting in the next step's collectives and
 * rank 0 in MPI_Finalize, for good. */
static int collect_saves(trainer *t, ck_err *err)
{
    int rc = sh_checkpoint_progress(t->ckpt, err);
    if (rc)
        return rc;
    ck_err why = { 0 };
    int64_t v[3] = { sh_world_rank(t->w) == 0 ? poll_saves(t, &why) : 0, t->failed_in_a_row,
                     t->failed_saves };
    int64_t msg[CK_ERR_MSG_MAX / 8];
    rc = sh_broadcast(sh_world_comm(t->w), v, 3, CK_I64, 0, NULL, err);
    if (rc)
        return rc;
    int64_t code = v[0];
    t->failed_in_a_row = (int)v[1];
    t->failed_saves = (int)v[2];
    if (!code)
        return 0;
    snprintf((char *)msg, sizeof msg, "%s", ck_err_msg(&why));
    rc = sh_broadcast(sh_world_comm(t->w), msg, sizeof msg / 8, CK_I64, 0, NULL, err);
    if (rc)
        return rc;
    ((char *)msg)[sizeof msg - 1] = '\0';
    t->failed_together = true;
    return ck_err_set(err, (int)code, "%s", (char *)msg);
}

static int train(trainer *t, ck_err *err)
{
    const tr_args *a = &t->a;
    int rank = sh_world_rank(t->w), T = a->model.seq;
    tr_step_buf buf = {0};
    int rc = 0;
    bool saved_last = false;   /* the step before saved: this one's optimizer fenced it */
    double t_last = now_s();
    while (!rc && t->step < a->steps) {
        long step = t->step + 1;
        double loss = 0.0, norm = 0.0, stall = 0.0, fence = 0.0;
        tr_step_cfg sc = {a->batch, a->accum, tr_lr_at(&t->sched, step), a->clip};
        rc = tr_step(&t->model, t->opt, &t->data, &sc, &buf, err);
        if (rc)
            break;
        /* Only a logged step's results come to the host (and wait for the step). */
        bool logged = step % a->log_every == 0 || step == 1 || step == a->steps;
        if (rank == 0 && logged)
            rc = tr_step_result(&buf, &loss, &norm, err);
        if (rc)
            break;
        if (saved_last)
            fence = sh_checkpoint_fence_ms(t->ckpt);
        t->step = step;
        saved_last = t->ckpt && ((a->ckpt_every && step % a->ckpt_every == 0) ||
                                 step == a->steps);
        if (saved_last)
            rc = save(t, &stall, err);
        double t_now = now_s();
        if (!rc && t->ckpt)
            rc = collect_saves(t, err);   /* collective: it moves saves on */
        if (rank == 0 && (logged || rc)) {
            printf("step %ld loss %.9g lr %.3e norm %.4f tok/s %.0f stall_ms %.2f "
                   "fence_ms %.2f%s\n", step, loss, (double)tr_lr_at(&t->sched, step), norm,
                   (double)a->batch * T / (t_now - t_last), stall, fence, t->saved);
            t->saved[0] = '\0';
        }
        t_last = t_now;
        if (logged)
            t->loss = loss;
        if (!rc && step == a->kill_at_step) {
            /* The test hook of a crash: the saves so far are committed, then every
             * rank dies at once, as under kill -9. */
            if (t->ckpt)
                rc = sh_checkpoint_wait(t->ckpt, err);
            if (!rc && t->ckpt)
                rc = collect_saves(t, err);
            if (rank == 0)
                printf("kill-at-step %ld:%s\n", step, t->saved);
            fflush(stdout);
            if (!rc)
                rc = sh_barrier(sh_world_comm(t->w), NULL, err);
            raise(SIGKILL);
        }
        fflush(stdout);
    }
    if (!rc && t->ckpt)
        rc = sh_checkpoint_wait(t->ckpt, err);
    if (!rc && t->ckpt)
        rc = collect_saves(t, err);
    if (!rc && t->ckpt && rank == 0 && t->saved[0])
        printf("checkpoints:%s\n", t->saved);
    if (!rc && rank == 0 && t->failed_saves)
        fprintf(stderr, "shard-train: %d checkpoint save(s) failed, %d of them the last in a "
                "row; training went on\n", t->failed_saves, t->failed_in_a_row);
    tr_step_buf_free(&buf);
    return rc;
}

/* The mean loss of samples [0, batch) of the data order: a fixed batch, the same
 * for any mesh, to compare weights loaded from different places. */
static int eval(trainer *t, ck_err *err)
{
    const tr_args *a = &t->a;
    int W = sh_world_size(t->w), T = a->model.seq, mb = a->batch / W;
    tr_step_buf b = {0};
    tr_data_restore(&t->data, &(tr_data_state){0, 0, a->model.seed});
    double loss = 0.0;
    int rc = a->safetensors ? tr_load_safetensors(a->safetensors, &t->msd, err) : 0;
    if (!rc)
        rc = tr_step_buf_reserve(&b, t->w, mb * T, err);
    if (!rc)
        rc = sh_zero(t->w, b.stats, sizeof *b.stats, err);
    for (int i = 0; !rc && i < mb; i++)
        tr_data_sample(&t->data, (uint64_t)(sh_world_rank(t->w) * mb + i), b.tok + i * T,
                       b.tgt + i * T);
    if (!rc)
        rc = tr_batch_loss(&t->model, &b, mb, 1.0f, false, b.stats, err);
    if (!rc)
        rc = sh_all_reduce(sh_world_comm(t->w), b.stats, b.stats, 1, CK_F64, SH_SUM, NULL,
                           err);
    if (!rc)
        rc = sh_copy_to_host(t->w, &loss, b.stats, sizeof loss, err);
    if (!rc && sh_world_rank(t->w) == 0)
        printf("eval loss %.9g (samples 0..%d, weights from %s)\n", loss / ((double)mb * W * T),
               a->batch - 1, a->safetensors ? a->safetensors : "the checkpoint");
    tr_step_buf_free(&b);
    return rc;
}

static int setup(trainer *t, ck_err *err)
{
    const tr_args *a = &t->a;
    int W = sh_world_size(t->w);
    if (a->batch % (a->accum * W))
        return ck_err_set(err, -EINVAL, "--batch %d must be a multiple of --accum %d x %d "
                          "ranks, so every rank reads as many sequences", a->batch, a->accum, W);
    /* First: the device decides where every buffer made afterwards lives. */
    int rc = a->cuda ? sh_world_set_device(t->w, SH_CUDA, err) : 0;
    if (!rc)
        rc = make_mesh(t, err);
    if (!rc)
        rc = tr_data_open(&t->data, a->data, a->model.seq, a->model.seed, err);
    if (!rc)
        rc = tr_model_build(t->w, &a->model, &t->model, err);
    if (!rc)
        rc = tr_model_materialize(&t->model, t->mesh,
                                  &(tr_fsdp){a->bf16, a->offload, a->no_prefetch}, err);
    sh_adamw_opts ao = {.lr = a->lr, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                        .weight_decay = a->wd};
    if (!rc)
        rc = sh_adamw_new(t->model.root, &ao, &t->opt, err);
    if (!rc)
        rc = sh_model_state_dict(t->model.root, &t->msd, err);
    if (!rc)
        rc = sh_optim_state_dict(t->opt, &t->osd, err);
    t->sched = (tr_lr){a->lr, a->min_lr, a->warmup,
                       a->schedule_steps ? a->schedule_steps : a->steps};
    format_config(t);
    ck_level level = CK_LEVEL_DEFAULT;
    if (a->commit_level)
        ck_level_parse(a->commit_level, &level, NULL);      /* checked by tr_parse */
    if (!rc && a->resume)
        rc = resume(t, err);
    if (!rc && a->ckpt_root && !a->eval)
        rc = sh_checkpoint_new(t->w, &(sh_checkpoint_opts){a->ckpt_root, a->daemon, t->opt,
                                                       a->ckpt_timeout, level},
                               &t->ckpt, err);
    if (!rc && t->ckpt) {
        /* The saves' staging, faulted in now rather than in the first saves. */
        save_blobs sb;
        blobs_of(t, &sb);
        const sh_state_dict *sd[] = {&t->msd, &t->osd};
        rc = sh_checkpoint_reserve(t->ckpt, sd, 2, sb.b, 4, err);
    }
    if (!rc && sh_world_rank(t->w) == 0) {
        char mesh[32];
        ck_mesh_format(sh_mesh_desc(t->mesh), mesh, sizeof mesh);
        double h = tr_data_unigram_entropy(&t->data);
        printf("model: %d layers, dim %d, %d heads, seq %d, %" PRId64 " parameters; "
               "mesh %s (%d ranks); batch %d x %d tokens, accum %d; device %s%s%s\n",
               a->model.layers, a->model.dim, a->model.heads, a->model.seq,
               tr_model_numel(&a->model), mesh, W, a->batch, a->model.seq, a->accum,
               a->device, a->bf16 ? ", bf16" : "", a->offload ? ", offload" : "");
        printf("data: %s, %zu bytes; byte unigram entropy %.4f nats (%.4f bits)\n", a->data,
               t->data.len, h, h / log(2.0));
    }
    return rc;
}

static void teardown(trainer *t)
{
    sh_checkpoint_free(t->ckpt);
    sh_state_dict_free(&t->msd);
    sh_state_dict_free(&t->osd);
    sh_adamw_free(t->opt);
    tr_model_free(&t->model);
    sh_mesh_free(t->mesh);
    tr_data_close(&t->data);
}

int main(int argc, char **argv)
{
    ck_err err = {0};
    trainer t = {0};
    /* One BLAS thread per rank: the ranks already fill the cores. */
    openblas_set_num_threads(1);
    int rc = sh_init(&argc, &argv, &t.w, &err);
    if (rc) {
        fprintf(stderr, "shard-train: %s\n", ck_err_msg(&err));
        return 1;
    }
    rc = tr_args_parse(argc, argv, &t.a, &err);
    bool parsed = rc == 0;     /* an argument error is every rank's: all exit normally */
    if (rc == 0)
        rc = setup(&t, &err);
    if (rc == 0)
        rc = t.a.eval ? eval(&t, &err) : train(&t, &err);
    if (rc == 0 && sh_world_rank(t.w) == 0 && !t.a.eval && t.step > 0)
        printf("done: step %ld, loss %.4f nats/byte vs the corpus's byte unigram entropy "
               "%.4f\n", t.step, t.loss, tr_data_unigram_entropy(&t.data));
    int status = rc < 0 ? (rc == -EINVAL ? 2 : 1) : 0;
    if (rc < 0)
        fprintf(stderr, "shard-train: rank %d: %s\n", sh_world_rank(t.w), ck_err_msg(&err));
    /* A rank that failed past the arguments may leave the others waiting for it in a
     * collective (or, with a dead peer, itself wait in sh_finalize): end the job. A
     * failed save (rank 0's verdict) is every rank's at the same step, so each one
     * says it and they finalize together: aborting there cut the others' messages
     * short, and several ranks aborting at once have crashed OpenMPI 4.1.4's mpirun
     * (in pmix_server_log_fn). */
    if (rc < 0 && parsed && !t.failed_together && sh_world_size(t.w) > 1)
        sh_abort(t.w, status);
    teardown(&t);
    sh_finalize(t.w);
    return status;
}
