/* mlp.h - the test model: an MLP of residual blocks, written once and run two ways.
 *
 *   h = x W_in^T                         (root parameter, when root_params)
 *   h = h + W2 tanh(W1 h + b1) + b2      (blocks.i, i < nblocks)
 *   y = h W_out^T                        (root parameter, when root_params)
 *   loss = 0.5 * mean((y - t)^2),  t = tanh(x T^T) for a fixed teacher T
 *
 * The same compute functions serve the libshard model (module callbacks that read
 * unsharded parameters and write gradients through the FSDP hooks) and the reference
 * (plain arrays on one process), so any difference between the two comes from
 * sharding, communication and the optimizer, which is what the tests measure.
 */
#ifndef TM_MLP_H
#define TM_MLP_H

#include <stdbool.h>

#include "sh/sh.h"

#define TM_MAX_BLOCKS 8
#define TM_MAX_PARAMS (4 * TM_MAX_BLOCKS + 2)

typedef struct tm_dims {
    int din, d, h, dout, nblocks;
    bool root_params;    /* false: no W_in / W_out; din == dout == d */
    float init_bound;
} tm_dims;

/* The parameters in a fixed order: [in_w], blocks.i.{w1,b1,w2,b2}..., [out_w]. */
typedef struct tm_param_desc {
    char name[64];
    int ndim;
    int64_t shape[2];
    bool bias;           /* initialized to zero */
} tm_param_desc;
int tm_param_descs(const tm_dims *dims, tm_param_desc *out);

/* ---- the libshard model ---- */

typedef struct tm_block {
    const tm_dims *dims;
    sh_param *p[4];      /* w1 b1 w2 b2 */
    float *x, *a;        /* saved activations */
    int cap;
    float *scratch[4];   /* f32 copies of low-precision parameters */
} tm_block;

typedef struct tm_model {
    tm_dims dims;
    sh_module *root, *blocks, *block[TM_MAX_BLOCKS];
    tm_block bstate[TM_MAX_BLOCKS];
    sh_param *in_w, *out_w;
    sh_tensor act[TM_MAX_BLOCKS + 1], grad[TM_MAX_BLOCKS + 1];
    float *x, *hlast, *scratch_in, *scratch_out;   /* root's saved tensors */
    int cap;
} tm_model;

/* Builds the model on META (nothing allocated for parameters yet). */
int tm_build(sh_world *w, const tm_dims *dims, tm_model *m, ck_err *err);
/* tm_build, then fully_shard every block and the root on mesh (default options),
 * to_empty on the CPU and reset_parameters(seed): the sharded model, materialized. */
int tm_build_sharded(sh_world *w, const tm_dims *dims, sh_mesh *mesh, uint64_t seed,
                     tm_model *m, ck_err *err);
void tm_free(tm_model *m);

/* A block's forward callback (the misuse test calls it directly, bypassing the hooks). */
int tm_block_forward(sh_module *m, const sh_tensor *in, sh_tensor *out, void *user,
                     ck_err *err);

/* One micro-batch through sh_module_forward / sh_module_backward of the root: x is
 * [B, din], t is [B, dout]. The loss gradient is divided by `accum`. *loss is this
 * micro-batch's local mean loss. */
int tm_fwd_bwd(tm_model *m, const float *x, const float *t, int B, int accum, double *loss,
               ck_err *err);

/* ---- the single-process reference ---- */

typedef struct tm_ref {
    tm_dims dims;
    int np;
    tm_param_desc desc[TM_MAX_PARAMS];
    float *p[TM_MAX_PARAMS], *g[TM_MAX_PARAMS], *m[TM_MAX_PARAMS], *v[TM_MAX_PARAMS];
    size_t n[TM_MAX_PARAMS];
    long step;
} tm_ref;

int tm_ref_init(tm_ref *r, const tm_dims *dims, uint64_t seed);
void tm_ref_free(tm_ref *r);
/* Forward and backward of one micro-batch, accumulating into r->g. */
double tm_ref_fwd_bwd(tm_ref *r, const float *x, const float *t, int B, int accum);
/* Clip (when max_norm > 0) then AdamW, then zero the gradients. Returns the norm. */
double tm_ref_step(tm_ref *r, double max_norm, const sh_adamw_opts *o);

/* The training data: micro-batch `mb` of B samples (global sample index order). */
void tm_data(const tm_dims *dims, long mb, int B, float *x, float *t);

#endif
