/* cli.c - see cli.h. */
#include "cli.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_DATA "/usr/share/common-licenses/GPL-3"

static const char usage[] =
    "usage: shardrun --nproc-per-node N shard-train [options]\n"
    "Trains a byte-level GPT with FSDP over the ranks, checkpointing asynchronously.\n"
    "  --data FILE          text corpus (default " DEFAULT_DATA ")\n"
    "  --mesh SPEC          N (1-D) or RxS (replicate x shard); default: the world, 1-D\n"
    "  --layers L --dim D --heads H --seq T     model (default 2, 64, 4, 64)\n"
    "  --batch B            sequences per step, all ranks together (default 16)\n"
    "  --accum A            micro-batches per step (default 1)\n"
    "  --steps S            total steps to reach (required)\n"
    "  --lr X --min-lr X --warmup N --schedule-steps N   cosine schedule (default\n"
    "                       3e-3, lr/10, 10, --steps or the checkpoint's)\n"
    "  --clip X             gradient norm clip (default 1.0; 0: off)\n"
    "  --wd X               AdamW weight decay (default 0)\n"
    "  --seed N             parameter init and data order (default 1)\n"
    "  --ckpt-root DIR      checkpoint root (none: no checkpoints)\n"
    "  --ckpt-every K       save every K steps (and after the last)\n"
    "  --ckpt-mode MODE     lazy (default): the save copies on a thread during the next\n"
    "                       forward and backward, and the optimizer step waits for it;\n"
    "                       copy: the save copies before training goes on\n"
    "  --keep-last M        keep the M newest checkpoints\n"
    "  --max-failed-saves K stop, every rank at the same step, once K saves in a row\n"
    "                       failed (default 0: never; a failed save is logged and\n"
    "                       counted, and training goes on)\n"
    "  --ckpt-timeout S     embedded saves: a save whose parts are not all written S s\n"
    "                       after it began fails on every rank, and so does every later\n"
    "                       save of the run (default 1800)\n"
    "  --resume             continue from the newest committed checkpoint in DIR\n"
    "  --daemon SOCKET      save through ckptd\n"
    "  --commit-level L     the level each save waits for (local, replicated, durable;\n"
    "                       default: the daemon's; without ckptd every save is durable)\n"
    "  --log-every N        log every N steps (default 1)\n"
    "  --kill-at-step N     test hook: after step N and its saves, SIGKILL every rank\n"
    "  --eval               print the loss of the first --batch samples of the data\n"
    "                       order and exit; weights from --resume or --safetensors\n"
    "  --safetensors FILE   with --eval: full f32 tensors (ckpt-consolidate's output)\n"
    "  --device DEV         cpu (default) or cuda: rank r drives GPU LOCAL_RANK, NCCL\n"
    "                       collectives, cuBLAS and the CUDA kernels\n"
    "  --bf16               mixed precision: bf16 parameters and GEMM inputs, f32\n"
    "                       gradients, reduction, optimizer state and everything else\n"
    "  --offload            CPU offload: sharded parameters, gradients and AdamW state\n"
    "                       in pinned host memory (on cuda; a no-op on cpu)\n"
    "  --no-prefetch        all-gather each block only when it runs (default: the next\n"
    "                       block's all-gather runs under the current one's compute)\n";

/* Options with a value: where it goes in tr_args, and its type and range. */
typedef enum { O_STR, O_INT, O_LONG, O_U64, O_FLOAT } opt_kind;
static const struct {
    const char *name;
    size_t off;
    opt_kind kind;
    double lo, hi;
} opts[] = {
    {"--data", offsetof(tr_args, data), O_STR, 0, 0},
    {"--mesh", offsetof(tr_args, mesh), O_STR, 0, 0},
    {"--ckpt-root", offsetof(tr_args, ckpt_root), O_STR, 0, 0},
    {"--daemon", offsetof(tr_args, daemon), O_STR, 0, 0},
    {"--commit-level", offsetof(tr_args, commit_level), O_STR, 0, 0},
    {"--ckpt-mode", offsetof(tr_args, ckpt_mode), O_STR, 0, 0},
    {"--safetensors", offsetof(tr_args, safetensors), O_STR, 0, 0},
    {"--device", offsetof(tr_args, device), O_STR, 0, 0},
    {"--layers", offsetof(tr_args, model.layers), O_INT, 1, 1024},
    {"--dim", offsetof(tr_args, model.dim), O_INT, 1, 65536},
    {"--heads", offsetof(tr_args, model.heads), O_INT, 1, 1024},
    {"--seq", offsetof(tr_args, model.seq), O_INT, 1, 65536},
    {"--seed", offsetof(tr_args, model.seed), O_U64, 0, 1e15},
    {"--batch", offsetof(tr_args, batch), O_INT, 1, 1 << 24},
    {"--accum", offsetof(tr_args, accum), O_INT, 1, 1 << 20},
    {"--steps", offsetof(tr_args, steps), O_LONG, 1, 1e12},
    {"--schedule-steps", offsetof(tr_args, schedule_steps), O_LONG, 1, 1e12},
    {"--warmup", offsetof(tr_args, warmup), O_LONG, 0, 1e12},
    {"--lr", offsetof(tr_args, lr), O_FLOAT, 0, 10},
    {"--min-lr", offsetof(tr_args, min_lr), O_FLOAT, 0, 10},
    {"--clip", offsetof(tr_args, clip), O_FLOAT, 0, 1e9},
    {"--wd", offsetof(tr_args, wd), O_FLOAT, 0, 10},
    {"--ckpt-every", offsetof(tr_args, ckpt_every), O_LONG, 0, 1e12},
    {"--ckpt-timeout", offsetof(tr_args, ckpt_timeout), O_FLOAT, 0.001, 1e7},
    {"--keep-last", offsetof(tr_args, keep_last), O_INT, 0, 1 << 30},
    {"--max-failed-saves", offsetof(tr_args, max_failed_saves), O_INT, 0, 1 << 30},
    {"--log-every", offsetof(tr_args, log_every), O_LONG, 1, 1e12},
    {"--kill-at-step", offsetof(tr_args, kill_at_step), O_LONG, 1, 1e12},
};

static int set_opt(tr_args *a, int k, const char *v, ck_err *err)
{
    char *field = (char *)a + opts[k].off;
    if (!v)
        return ck_err_set(err, -EINVAL, "%s needs a value", opts[k].name);
    if (opts[k].kind == O_STR) {
        *(const char **)field = v;
        return 0;
    }
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || x < opts[k].lo || x > opts[k].hi)
        return ck_err_set(err, -EINVAL, "%s: '%s' is not a number in [%g, %g]", opts[k].name,
                          v, opts[k].lo, opts[k].hi);
    bool integral = opts[k].kind != O_FLOAT;
    if (integral && x != (double)(long long)x)
        return ck_err_set(err, -EINVAL, "%s: '%s' is not a whole number", opts[k].name, v);
    switch (opts[k].kind) {
    case O_INT: *(int *)field = (int)x; break;
    case O_LONG: *(long *)field = (long)x; break;
    case O_U64: *(uint64_t *)field = (uint64_t)x; break;
    default: *(float *)field = (float)x; break;
    }
    return 0;
}

int tr_args_parse(int argc, char **argv, tr_args *a, ck_err *err)
{
    *a = (tr_args){
        .data = DEFAULT_DATA,
        .model = {.vocab = 256, .seq = 64, .layers = 2, .dim = 64, .heads = 4, .seed = 1},
        .batch = 16, .accum = 1, .warmup = 10, .lr = 3e-3f, .min_lr = -1.0f, .clip = 1.0f,
        .log_every = 1, .ckpt_mode = "lazy", .device = "cpu",
    };
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (strcmp(o, "--help") == 0 || strcmp(o, "-h") == 0) {
            fputs(usage, stdout);
            return 1;
        }
        bool *flag = !strcmp(o, "--resume") ? &a->resume : !strcmp(o, "--eval") ? &a->eval
                   : !strcmp(o, "--bf16") ? &a->bf16 : !strcmp(o, "--offload") ? &a->offload
                   : !strcmp(o, "--no-prefetch") ? &a->no_prefetch : NULL;
        if (flag) {
            *flag = true;
            continue;
        }
        int k = 0, n = (int)(sizeof opts / sizeof *opts);
        while (k < n && strcmp(o, opts[k].name) != 0)
            k++;
        if (k == n)
            return ck_err_set(err, -EINVAL, "unknown option '%s' (see --help)", o);
        int rc = set_opt(a, k, i + 1 < argc ? argv[i + 1] : NULL, err);
        if (rc)
            return rc;
        i++;
    }
    if (!a->steps && !a->eval)
        return ck_err_set(err, -EINVAL, "--steps is required (see --help)");
    if (a->eval && !a->resume == !a->safetensors)
        return ck_err_set(err, -EINVAL, "--eval needs the weights: --resume (with "
                          "--ckpt-root) or --safetensors FILE, one of them");
    if (a->safetensors && !a->eval)
        return ck_err_set(err, -EINVAL, "--safetensors is for --eval");
    if (strcmp(a->ckpt_mode, "lazy") && strcmp(a->ckpt_mode, "copy"))
        return ck_err_set(err, -EINVAL, "--ckpt-mode: '%s' is neither lazy nor copy",
                          a->ckpt_mode);
    a->ckpt_copy = !strcmp(a->ckpt_mode, "copy");
    if (strcmp(a->device, "cpu") && strcmp(a->device, "cuda"))
        return ck_err_set(err, -EINVAL, "--device: '%s' is neither cpu nor cuda", a->device);
    a->cuda = !strcmp(a->device, "cuda");
    if (a->cuda && a->safetensors)
        return ck_err_set(err, -EINVAL, "--safetensors reads into host memory: evaluate it "
                          "with --device cpu");
    if (a->min_lr < 0)
        a->min_lr = a->lr / 10;
    ck_level level;
    if (a->commit_level && ck_level_parse(a->commit_level, &level, err) < 0)
        return ck_err_set(err, -EINVAL, "--commit-level");
    if ((a->ckpt_every || a->keep_last || a->resume || a->daemon || a->ckpt_timeout ||
         a->max_failed_saves) && !a->ckpt_root)
        return ck_err_set(err, -EINVAL, "--ckpt-every, --keep-last, --max-failed-saves, "
                          "--ckpt-timeout, --resume and --daemon need --ckpt-root");
    return tr_config_check(&a->model, err);
}
