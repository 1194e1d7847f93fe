/* model.h - a GPT-style decoder as a libshard module tree.
 *
 *   h0 = wte[tok] + wpe[pos]                        root ("model")
 *   h  = h + proj(attn(ln1(h)))                     blocks.i, pre-norm
 *   h  = h + mlp.proj(gelu(mlp.fc(ln2(h))))
 *   logits = ln_f(h) wte^T                          root: the head is tied to wte
 *
 * Tied head (GPT-2's choice): one V x C matrix serves the input embedding and the
 * output projection, so both gradients land in wte inside the root's group. Every
 * block is its own module and FSDP group; the root group holds wte, wpe and ln_f.
 * Parameters are f32; the trainer runs without mixed precision.
 *
 * Token ids enter the root's forward as an f32 tensor [B, T] (sh_tensor carries
 * floating dtypes; ids < 2^24 are exact) and the forward returns logits [B, T, V].
 */
#ifndef TR_MODEL_H
#define TR_MODEL_H

#include <stdint.h>

#include "sh/sh.h"

typedef struct tr_config {
    int vocab;          /* 256: byte-level */
    int seq;            /* T: the context, also the number of positions */
    int layers, dim, heads;
    uint64_t seed;      /* parameter init */
} tr_config;

/* -EINVAL with a message when the configuration cannot be built. */
int tr_config_check(const tr_config *c, ck_err *err);

enum {
    TR_LN1_W, TR_LN1_B, TR_QKV_W, TR_QKV_B, TR_PROJ_W, TR_PROJ_B,
    TR_LN2_W, TR_LN2_B, TR_FC_W, TR_FC_B, TR_FCP_W, TR_FCP_B, TR_BLOCK_PARAMS
};

/* A block's parameters and what its forward saves for its backward. */
typedef struct tr_block {
    const tr_config *cfg;
    sh_param *p[TR_BLOCK_PARAMS];
    int rows, B;                            /* N = B * T rows allocated */
    float *x, *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *x2, *ln2, *ln2_mean,
          *ln2_rstd, *fc, *gelu;            /* saved activations */
    float *dx2, *dwide, *dnarrow, *dqkv, *dp;   /* backward scratch */
} tr_block;

typedef struct tr_model {
    tr_config cfg;
    sh_module *root, *blocks, **block;
    tr_block *bs;
    sh_param *wte, *wpe, *lnf_w, *lnf_b;
    int rows, B;
    int *tok;
    float *lnf, *lnf_mean, *lnf_rstd, *dlnf;
    sh_tensor *h, *dh;                      /* between blocks: layers + 1 each */
} tr_model;

/* Builds the model on META: modules and parameter shapes, no storage. */
int tr_model_build(sh_world *w, const tr_config *cfg, tr_model *m, ck_err *err);
/* fully_shard every block (bottom-up), then the root, over mesh; then to_empty and
 * reset_parameters (the full tensors do not depend on the mesh). mesh NULL: no FSDP
 * (plain one-process model: the gradient check reads parameters and gradients). */
int tr_model_materialize(tr_model *m, sh_mesh *mesh, ck_err *err);
void tr_model_free(tr_model *m);

/* The forward of a batch tok[B * T] through the hooks: logits [B, T, V]. */
int tr_model_forward(tr_model *m, const int *tok, int B, sh_tensor *logits, ck_err *err);
/* The backward of the last forward from dlogits [B, T, V]: gradients added. */
int tr_model_backward(tr_model *m, const sh_tensor *dlogits, ck_err *err);

/* Parameter count of the full model. */
int64_t tr_model_numel(const tr_config *c);

#endif
