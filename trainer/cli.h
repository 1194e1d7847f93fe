/* cli.h - shard-train's command line. */
#ifndef TR_CLI_H
#define TR_CLI_H

#include <stdbool.h>

#include "model.h"

typedef struct tr_args {
    const char *data, *mesh, *ckpt_root, *daemon;
    const char *commit_level;  /* --commit-level: local, replicated, durable; NULL: ckptd's */
    const char *safetensors;  /* --eval: the model's weights from this file */
    tr_config model;
    int batch;            /* sequences per step, all ranks together */
    int accum;            /* micro-batches per step */
    long steps;           /* the total step count to reach */
    long schedule_steps;  /* the LR schedule's length; 0: --steps (or the checkpoint's) */
    long warmup;
    float lr, min_lr, clip, wd;
    long ckpt_every;      /* 0: only after the last step */
    float ckpt_timeout;   /* embedded: seconds for every part of a save; 0: the default */
    const char *ckpt_mode;    /* "lazy" (the default) or "copy" */
    bool ckpt_copy;           /* --ckpt-mode copy: the save copies inside its stall */
    int keep_last;
    int max_failed_saves; /* stop after this many saves failed in a row; 0: never */
    bool resume;
    bool eval;            /* only the loss of the first --batch samples, no training */
    long log_every;
    long kill_at_step;    /* test hook: SIGKILL every rank after this step; 0: never */
    const char *device;   /* "cpu" (the default) or "cuda" */
    bool cuda;
    bool bf16;            /* MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=f32) */
    bool offload;         /* CPUOffloadPolicy */
    bool no_prefetch;     /* every all-gather starts when its block needs it */
} tr_args;

/* Fills a from argv. Returns 0, 1 when --help was printed, or -EINVAL with the
 * message in err. */
int tr_args_parse(int argc, char **argv, tr_args *a, ck_err *err);

#endif
