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
 *
 * The model computes through sh/ops.h only, on the world's device (sh_world_set_device
 * before tr_model_build): activations are device buffers (sh_buffer_alloc). Parameters
 * are f32; with bf16, FSDP's MixedPrecisionPolicy holds them unsharded in bf16 and the
 * linear layers' GEMMs, forward and backward, take bf16 inputs (f32 accumulation, as
 * torch's autocast), while LayerNorm, attention, GELU, the residual stream, the
 * gradients and their reduction stay f32.
 *
 * tr_model_forward uploads the batch's token ids (ints) to the device; the root's
 * forward input carries only the batch's shape [B, T] (a META tensor), and the forward
 * returns logits [B, T, V].
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
    float *x16;                             /* bf16 GEMM inputs (2 per float) */
    sh_tensor w32[TR_BLOCK_PARAMS];         /* bf16 parameters' f32 values */
} tr_block;

typedef struct tr_model {
    sh_world *w;
    tr_config cfg;
    sh_module *root, *blocks, **block;
    tr_block *bs;
    sh_param *wte, *wpe, *lnf_w, *lnf_b;
    int rows, B;
    int *tok;                               /* the batch's ids, on the device */
    float *lnf, *lnf_mean, *lnf_rstd, *dlnf, *x16;
    sh_tensor w32[4];
    sh_tensor *h, *dh;                      /* between blocks: layers + 1 each */
} tr_model;

/* Builds the model on META: modules and parameter shapes, no storage. */
int tr_model_build(sh_world *w, const tr_config *cfg, tr_model *m, ck_err *err);
/* FSDP's options for the model: bf16, its MixedPrecisionPolicy(param_dtype=bf16,
 * reduce_dtype=f32); offload, its CPUOffloadPolicy (on CUDA ranks the shards,
 * gradients and AdamW state live in pinned host memory); no_prefetch, an empty
 * prefetch list on every block both ways, so that each all-gather starts only when
 * its block needs it (the baseline against which prefetching's overlap is timed).
 * All need a mesh. */
typedef struct tr_fsdp {
    bool bf16, offload, no_prefetch;
} tr_fsdp;

/* fully_shard every block (bottom-up), then the root, over mesh; then to_empty on the
 * world's device and reset_parameters (the full tensors do not depend on the mesh or
 * the device). mesh NULL: no FSDP (plain one-process model: the gradient check reads
 * parameters and gradients); fsdp NULL: f32, no offload, implicit prefetching. */
int tr_model_materialize(tr_model *m, sh_mesh *mesh, const tr_fsdp *fsdp, ck_err *err);
void tr_model_free(tr_model *m);

/* The forward of a batch tok[B * T] (host memory, ids in [0, vocab)) through the
 * hooks: logits [B, T, V] on the device (a tensor made with SH_TENSOR_INIT_ON). */
int tr_model_forward(tr_model *m, const int *tok, int B, sh_tensor *logits, ck_err *err);
/* The backward of the last forward from dlogits [B, T, V]: gradients added. */
int tr_model_backward(tr_model *m, const sh_tensor *dlogits, ck_err *err);

/* Parameter count of the full model. */
int64_t tr_model_numel(const tr_config *c);

#endif
