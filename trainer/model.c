/* model.c - the GPT's module tree, its callbacks, and sharding (see model.h). */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"

/* GPT-2 initializes weights from N(0, 0.02); the library's initializers are uniform,
 * so the bound gives the same standard deviation (0.02 * sqrt(3)). */
#define INIT_BOUND 0.034641016f

int tr_config_check(const tr_config *c, ck_err *err)
{
    if (c->vocab < 2 || c->seq < 1 || c->layers < 1 || c->dim < 1 || c->heads < 1)
        return ck_err_set(err, -EINVAL, "model: vocab %d, seq %d, layers %d, dim %d and "
                          "heads %d must all be positive (vocab >= 2)", c->vocab, c->seq,
                          c->layers, c->dim, c->heads);
    if (c->dim % c->heads)
        return ck_err_set(err, -EINVAL, "model: dim %d is not a multiple of heads %d",
                          c->dim, c->heads);
    return 0;
}

int64_t tr_model_numel(const tr_config *c)
{
    int64_t C = c->dim;
    return (int64_t)c->vocab * C + (int64_t)c->seq * C + 2 * C +
           (int64_t)c->layers * (12 * C * C + 13 * C);
}

/* Resizes each (buffer, floats-per-row) pair to rows rows of device memory. The old
 * contents are not kept: buffers grow before a forward, which rewrites them. */
typedef struct buf_spec {
    float **p;
    size_t per_row;
} buf_spec;

static int grow(sh_world *w, buf_spec *b, int n, size_t rows, ck_err *err)
{
    for (int i = 0; i < n; i++) {
        sh_buffer_free(w, *b[i].p);
        *b[i].p = NULL;
        int rc = sh_buffer_alloc(w, sizeof(float) * (b[i].per_row * rows + 1),
                                 (void **)b[i].p, err);
        if (rc)
            return ck_err_set(err, rc, "model: activations for %zu rows", rows);
    }
    return 0;
}

static int block_grow(sh_world *w, tr_block *s, int B, ck_err *err)
{
    const tr_config *c = s->cfg;
    int T = c->seq;
    size_t C = (size_t)c->dim, rows = (size_t)B * (size_t)T, att, dp;
    if ((int)rows <= s->rows) {
        s->B = B;
        return 0;
    }
    sh_attention_sizes(w, T, c->dim, c->heads, &att, &dp);
    buf_spec b[] = {
        {&s->x, C}, {&s->ln1, C}, {&s->ln1_mean, 1}, {&s->ln1_rstd, 1}, {&s->qkv, 3 * C},
        {&s->att, att}, {&s->atty, C}, {&s->x2, C}, {&s->ln2, C},
        {&s->ln2_mean, 1}, {&s->ln2_rstd, 1}, {&s->fc, 4 * C}, {&s->gelu, 4 * C},
        {&s->dx2, C}, {&s->dwide, 4 * C}, {&s->dnarrow, C}, {&s->dqkv, 3 * C},
        {&s->dp, dp}, {&s->x16, TR_X16_PER_ROW(4 * C, C)},
    };
    int rc = grow(w, b, (int)(sizeof b / sizeof *b), rows, err);
    if (!rc) {
        s->rows = (int)rows;
        s->B = B;
    }
    return rc;
}

/* The unsharded value of p (only inside the hooks, see sh_param_value); a bf16 value's
 * f32 copy goes to conv (a tensor on the device). */
static int weight_of(sh_world *w, sh_param *p, sh_tensor *conv, tr_weight *out, ck_err *err)
{
    sh_tensor *t;
    int rc = sh_param_value(p, &t, err);
    if (rc)
        return rc;
    *out = (tr_weight){t->dtype, t->data, t->data};
    if (t->dtype == CK_F32)
        return 0;
    rc = sh_tensor_resize(conv, CK_F32, t->ndim, t->shape, err);
    if (!rc)
        rc = sh_convert(w, conv->data, CK_F32, t->data, t->dtype, t->numel, err);
    out->f32 = conv->data;
    return rc;
}

/* Values (and, when g, gradient buffers) of n parameters. */
static int weights(sh_world *w, sh_param *const *p, sh_tensor *conv, int n, tr_weight *v,
                   float **g, ck_err *err)
{
    for (int i = 0; i < n; i++) {
        int rc = weight_of(w, p[i], &conv[i], &v[i], err);
        if (!rc && g)
            rc = sh_param_grad(p[i], &g[i], err);
        if (rc)
            return rc;
    }
    return 0;
}

static int block_forward(sh_module *mod, const sh_tensor *in, sh_tensor *out, void *user,
                         ck_err *err)
{
    tr_block *s = user;
    sh_world *w = sh_module_world(mod);
    const tr_config *c = s->cfg;
    int B = (int)in->shape[0], T = c->seq, C = c->dim, N = B * T;
    size_t NC = (size_t)N * (size_t)C;
    tr_weight W[TR_BLOCK_PARAMS];
    int rc = weights(w, s->p, s->w32, TR_BLOCK_PARAMS, W, NULL, err);
    if (!rc)
        rc = block_grow(w, s, B, err);
    if (!rc)
        rc = sh_tensor_resize(out, CK_F32, 3, (int64_t[]){B, T, C}, err);
    if (rc)
        return rc;
    float *y = out->data;
    /* attention: x2 = x + proj(attn(ln1(x))) */
    rc = sh_copy(w, s->x, in->data, sizeof(float) * NC, err);
    if (!rc)
        rc = sh_layernorm(w, s->ln1, s->ln1_mean, s->ln1_rstd, s->x, W[TR_LN1_W].f32,
                          W[TR_LN1_B].f32, N, C, err);
    if (!rc)
        rc = tr_linear_fwd(w, s->qkv, s->ln1, s->x16, &W[TR_QKV_W], W[TR_QKV_B].f32, N, C,
                           3 * C, err);
    if (!rc)
        rc = sh_attention(w, s->atty, s->att, s->qkv, B, T, C, c->heads, err);
    if (!rc)
        rc = tr_linear_fwd(w, s->x2, s->atty, s->x16, &W[TR_PROJ_W], W[TR_PROJ_B].f32, N, C,
                           C, err);
    /* MLP: y = x2 + fcp(gelu(fc(ln2(x2)))), the residual added as ln2 reads it */
    if (!rc)
        rc = sh_residual_layernorm(w, s->x2, s->ln2, s->ln2_mean, s->ln2_rstd, s->x,
                                   W[TR_LN2_W].f32, W[TR_LN2_B].f32, N, C, err);
    if (!rc)
        rc = tr_linear_fwd(w, s->fc, s->ln2, s->x16, &W[TR_FC_W], W[TR_FC_B].f32, N, C, 4 * C,
                           err);
    if (!rc)
        rc = sh_gelu(w, s->gelu, s->fc, NC * 4, err);
    if (!rc)
        rc = tr_linear_fwd(w, y, s->gelu, s->x16, &W[TR_FCP_W], W[TR_FCP_B].f32, N, 4 * C, C,
                           err);
    if (!rc)
        rc = sh_scale_add(w, y, s->x2, 1.0f, NC, err);
    return rc;
}

static int block_backward(sh_module *mod, const sh_tensor *gout, sh_tensor *gin, void *user,
                          ck_err *err)
{
    tr_block *s = user;
    sh_world *w = sh_module_world(mod);
    const tr_config *c = s->cfg;
    int B = s->B, T = c->seq, C = c->dim, N = B * T;
    size_t NC = (size_t)N * (size_t)C;
    tr_weight W[TR_BLOCK_PARAMS];
    float *g[TR_BLOCK_PARAMS];
    int rc = weights(w, s->p, s->w32, TR_BLOCK_PARAMS, W, g, err);
    if (!rc)
        rc = sh_tensor_resize(gin, CK_F32, 3, (int64_t[]){B, T, C}, err);
    if (rc)
        return rc;
    const float *dy = gout->data;
    float *dx = gin->data;
    /* MLP: the residual passes dy to x2, the branch adds through ln2. */
    rc = sh_copy(w, s->dx2, dy, sizeof(float) * NC, err);
    if (!rc)
        rc = tr_linear_bwd(w, s->dwide, g[TR_FCP_W], g[TR_FCP_B], dy, s->gelu, s->x16,
                           &W[TR_FCP_W], N, 4 * C, C, false, err);
    if (!rc)
        rc = sh_gelu_bwd(w, s->dwide, s->fc, s->dwide, NC * 4, err);
    if (!rc)
        rc = tr_linear_bwd(w, s->dnarrow, g[TR_FC_W], g[TR_FC_B], s->dwide, s->ln2, s->x16,
                           &W[TR_FC_W], N, C, 4 * C, false, err);
    if (!rc)
        rc = sh_layernorm_bwd(w, s->dx2, g[TR_LN2_W], g[TR_LN2_B], s->dnarrow, s->x2,
                              s->ln2_mean, s->ln2_rstd, W[TR_LN2_W].f32, N, C, err);
    /* attention: the residual passes dx2 to x, the branch adds through ln1. */
    if (!rc)
        rc = sh_copy(w, dx, s->dx2, sizeof(float) * NC, err);
    if (!rc)
        rc = tr_linear_bwd(w, s->dnarrow, g[TR_PROJ_W], g[TR_PROJ_B], s->dx2, s->atty, s->x16,
                           &W[TR_PROJ_W], N, C, C, false, err);
    if (!rc)
        rc = sh_attention_bwd(w, s->dqkv, s->dp, s->dnarrow, s->qkv, s->atty, s->att, B, T,
                              C, c->heads, err);
    if (!rc)
        rc = tr_linear_bwd(w, s->dnarrow, g[TR_QKV_W], g[TR_QKV_B], s->dqkv, s->ln1, s->x16,
                           &W[TR_QKV_W], N, C, 3 * C, false, err);
    if (!rc)
        rc = sh_layernorm_bwd(w, dx, g[TR_LN1_W], g[TR_LN1_B], s->dnarrow, s->x, s->ln1_mean,
                              s->ln1_rstd, W[TR_LN1_W].f32, N, C, err);
    return rc;
}

static int root_grow(tr_model *m, int B, ck_err *err)
{
    size_t C = (size_t)m->cfg.dim, rows = (size_t)B * (size_t)m->cfg.seq;
    m->B = B;
    if ((int)rows <= m->rows)
        return 0;
    sh_buffer_free(m->w, m->tok);
    m->tok = NULL;
    int rc = sh_buffer_alloc(m->w, sizeof(int) * rows, (void **)&m->tok, err);
    buf_spec b[] = {{&m->lnf, C}, {&m->lnf_mean, 1}, {&m->lnf_rstd, 1}, {&m->dlnf, C},
                    {&m->x16, TR_X16_PER_ROW(C, m->cfg.vocab)}};
    if (!rc)
        rc = grow(m->w, b, (int)(sizeof b / sizeof *b), rows, err);
    if (!rc)
        m->rows = (int)rows;
    return rc;
}

static int root_forward(sh_module *mod, const sh_tensor *in, sh_tensor *out, void *user,
                        ck_err *err)
{
    (void)mod;
    tr_model *m = user;
    sh_world *w = m->w;
    const tr_config *c = &m->cfg;
    int B = (int)in->shape[0], T = c->seq, C = c->dim, V = c->vocab, L = c->layers, N = B * T;
    sh_param *p[4] = {m->wte, m->wpe, m->lnf_w, m->lnf_b};
    tr_weight W[4];
    int rc = weights(w, p, m->w32, 4, W, NULL, err);
    if (!rc)
        rc = sh_tensor_resize(&m->h[0], CK_F32, 3, (int64_t[]){B, T, C}, err);
    if (!rc)
        rc = sh_embed(w, m->h[0].data, m->tok, W[0].f32, W[1].f32, N, T, C, err);
    for (int l = 0; !rc && l < L; l++)
        rc = sh_module_forward(m->block[l], &m->h[l], &m->h[l + 1], err);
    if (!rc)
        rc = sh_layernorm(w, m->lnf, m->lnf_mean, m->lnf_rstd, m->h[L].data, W[2].f32,
                          W[3].f32, N, C, err);
    if (!rc)
        rc = sh_tensor_resize(out, CK_F32, 3, (int64_t[]){B, T, V}, err);
    if (!rc)
        rc = tr_linear_fwd(w, out->data, m->lnf, m->x16, &W[0], NULL, N, C, V, err);
    return rc;
}

static int root_backward(sh_module *mod, const sh_tensor *gout, sh_tensor *gin, void *user,
                         ck_err *err)
{
    (void)mod;
    (void)gin;
    tr_model *m = user;
    sh_world *w = m->w;
    const tr_config *c = &m->cfg;
    int B = m->B, T = c->seq, C = c->dim, V = c->vocab, L = c->layers, N = B * T;
    sh_param *p[4] = {m->wte, m->wpe, m->lnf_w, m->lnf_b};
    tr_weight W[4];
    float *g[4];
    int rc = weights(w, p, m->w32, 4, W, g, err);
    if (!rc)
        rc = sh_tensor_resize(&m->dh[L], CK_F32, 3, (int64_t[]){B, T, C}, err);
    /* head (tied): dwte += dlogits^T lnf, dlnf = dlogits wte */
    if (!rc)
        rc = tr_linear_bwd(w, m->dlnf, g[0], NULL, gout->data, m->lnf, m->x16, &W[0], N, C, V,
                           false, err);
    if (!rc)
        rc = sh_zero(w, m->dh[L].data, sizeof(float) * (size_t)N * (size_t)C, err);
    if (!rc)
        rc = sh_layernorm_bwd(w, m->dh[L].data, g[2], g[3], m->dlnf, m->h[L].data,
                              m->lnf_mean, m->lnf_rstd, W[2].f32, N, C, err);
    for (int l = L - 1; !rc && l >= 0; l--)
        rc = sh_module_backward(m->block[l], &m->dh[l + 1], &m->dh[l], err);
    if (!rc)
        rc = sh_embed_bwd(w, g[0], g[1], m->dh[0].data, m->tok, N, T, C, V, err);
    return rc;
}

static const struct {
    const char *name;
    int rows, cols;          /* in units of C (0: 1), except as noted */
    sh_init_kind kind;
    bool residual;           /* scaled by 1/sqrt(2 L), GPT-2's residual projections */
} block_param_desc[TR_BLOCK_PARAMS] = {
    [TR_LN1_W] = {"ln1.w", 1, 0, SH_INIT_ONES, false},
    [TR_LN1_B] = {"ln1.b", 1, 0, SH_INIT_ZEROS, false},
    [TR_QKV_W] = {"attn.qkv.w", 3, 1, SH_INIT_UNIFORM, false},
    [TR_QKV_B] = {"attn.qkv.b", 3, 0, SH_INIT_ZEROS, false},
    [TR_PROJ_W] = {"attn.proj.w", 1, 1, SH_INIT_UNIFORM, true},
    [TR_PROJ_B] = {"attn.proj.b", 1, 0, SH_INIT_ZEROS, false},
    [TR_LN2_W] = {"ln2.w", 1, 0, SH_INIT_ONES, false},
    [TR_LN2_B] = {"ln2.b", 1, 0, SH_INIT_ZEROS, false},
    [TR_FC_W] = {"mlp.fc.w", 4, 1, SH_INIT_UNIFORM, false},
    [TR_FC_B] = {"mlp.fc.b", 4, 0, SH_INIT_ZEROS, false},
    [TR_FCP_W] = {"mlp.proj.w", 1, 4, SH_INIT_UNIFORM, true},
    [TR_FCP_B] = {"mlp.proj.b", 1, 0, SH_INIT_ZEROS, false},
};

static int build_block(tr_model *m, int l, ck_err *err)
{
    sh_world *w = sh_module_world(m->root);
    const tr_config *c = &m->cfg;
    tr_block *s = &m->bs[l];
    char name[16];
    snprintf(name, sizeof name, "%d", l);
    s->cfg = &m->cfg;
    int rc = sh_module_new(w, m->blocks, name, block_forward, block_backward, s, &m->block[l],
                           err);
    float resid = INIT_BOUND / sqrtf(2.0f * (float)c->layers);
    for (int i = 0; !rc && i < TR_BLOCK_PARAMS; i++) {
        int64_t shape[2] = {(int64_t)block_param_desc[i].rows * c->dim,
                            (int64_t)block_param_desc[i].cols * c->dim};
        sh_init_spec init = {block_param_desc[i].kind,
                             block_param_desc[i].residual ? resid : INIT_BOUND};
        rc = sh_param_new(m->block[l], block_param_desc[i].name, shape[1] ? 2 : 1, shape, init,
                          &s->p[i], err);
    }
    return rc;
}

int tr_model_build(sh_world *w, const tr_config *cfg, tr_model *m, ck_err *err)
{
    memset(m, 0, sizeof *m);
    int rc = tr_config_check(cfg, err);
    if (rc)
        return rc;
    m->cfg = *cfg;
    m->w = w;
    int L = cfg->layers;
    int64_t C = cfg->dim;
    m->block = calloc((size_t)L, sizeof *m->block);
    m->bs = calloc((size_t)L, sizeof *m->bs);
    m->h = calloc((size_t)L + 1, sizeof *m->h);
    m->dh = calloc((size_t)L + 1, sizeof *m->dh);
    if (!m->block || !m->bs || !m->h || !m->dh) {
        tr_model_free(m);
        return ck_err_set(err, -ENOMEM, "model: out of memory");
    }
    /* Activations between blocks and the bf16 parameters' f32 copies: device tensors. */
    const sh_tensor on_dev = SH_TENSOR_INIT_ON(sh_world_device(w));
    for (int l = 0; l <= L; l++)
        m->h[l] = m->dh[l] = on_dev;
    for (int l = 0; l < L; l++)
        for (int i = 0; i < TR_BLOCK_PARAMS; i++)
            m->bs[l].w32[i] = on_dev;
    for (int i = 0; i < 4; i++)
        m->w32[i] = on_dev;
    sh_init_spec u = {SH_INIT_UNIFORM, INIT_BOUND};
    rc = sh_module_new(w, NULL, "model", root_forward, root_backward, m, &m->root, err);
    if (!rc)
        rc = sh_param_new(m->root, "wte", 2, (int64_t[]){cfg->vocab, C}, u, &m->wte, err);
    if (!rc)
        rc = sh_param_new(m->root, "wpe", 2, (int64_t[]){cfg->seq, C}, u, &m->wpe, err);
    if (!rc)
        rc = sh_module_new(w, m->root, "blocks", NULL, NULL, NULL, &m->blocks, err);
    for (int l = 0; !rc && l < L; l++)
        rc = build_block(m, l, err);
    if (!rc)
        rc = sh_param_new(m->root, "ln_f.w", 1, (int64_t[]){C}, (sh_init_spec){SH_INIT_ONES, 0},
                          &m->lnf_w, err);
    if (!rc)
        rc = sh_param_new(m->root, "ln_f.b", 1, (int64_t[]){C},
                          (sh_init_spec){SH_INIT_ZEROS, 0}, &m->lnf_b, err);
    if (rc)
        tr_model_free(m);
    return rc;
}

int tr_model_materialize(tr_model *m, sh_mesh *mesh, const tr_fsdp *fsdp, ck_err *err)
{
    int rc = 0;
    tr_fsdp p = fsdp ? *fsdp : (tr_fsdp){0};
    if ((p.bf16 || p.offload || p.no_prefetch) && !mesh)
        return ck_err_set(err, -EINVAL, "model: bf16, offload and prefetching are FSDP's, "
                          "they need a mesh");
    if (mesh) {
        sh_fsdp_opts o;
        sh_fsdp_opts_default(&o);
        if (p.bf16) {
            o.mp.param_dtype = CK_BF16;
            o.mp.reduce_dtype = CK_F32;
        }
        /* The blocks take the f32 residual stream as it is and round only their GEMMs'
         * inputs; the root's input is the batch's shape, with no data to cast. */
        o.mp.cast_forward_inputs = false;
        o.offload.enabled = o.offload.pin_memory = p.offload;
        for (int l = 0; !rc && l < m->cfg.layers; l++)
            rc = sh_fully_shard(m->block[l], mesh, &o, err);
        if (!rc)
            rc = sh_fully_shard(m->root, mesh, &o, err);
        for (int l = -1; !rc && p.no_prefetch && l < m->cfg.layers; l++) {
            sh_module *mod = l < 0 ? m->root : m->block[l];
            rc = sh_set_modules_to_forward_prefetch(mod, NULL, 0, err);
            if (!rc)
                rc = sh_set_modules_to_backward_prefetch(mod, NULL, 0, err);
        }
    }
    if (!rc)
        rc = sh_module_to_empty(m->root, sh_world_device(m->w), err);
    if (!rc)
        rc = sh_module_reset_parameters(m->root, m->cfg.seed, err);
    return rc;
}

void tr_model_free(tr_model *m)
{
    sh_module_free(m->root);
    for (int l = 0; m->bs && l < m->cfg.layers; l++) {
        tr_block *s = &m->bs[l];
        float *bufs[] = {s->x, s->ln1, s->ln1_mean, s->ln1_rstd, s->qkv, s->att, s->atty,
                         s->x2, s->ln2, s->ln2_mean, s->ln2_rstd, s->fc, s->gelu, s->dx2,
                         s->dwide, s->dnarrow, s->dqkv, s->dp, s->x16};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
            sh_buffer_free(m->w, bufs[i]);
        for (int i = 0; i < TR_BLOCK_PARAMS; i++)
            sh_tensor_free(&s->w32[i]);
    }
    for (int l = 0; m->h && l <= m->cfg.layers; l++) {
        sh_tensor_free(&m->h[l]);
        sh_tensor_free(&m->dh[l]);
    }
    for (int i = 0; i < 4; i++)
        sh_tensor_free(&m->w32[i]);
    void *bufs[] = {m->tok, m->lnf, m->lnf_mean, m->lnf_rstd, m->dlnf, m->x16};
    for (size_t i = 0; m->w && i < sizeof bufs / sizeof *bufs; i++)
        sh_buffer_free(m->w, bufs[i]);
    free(m->block);
    free(m->bs);
    free(m->h);
    free(m->dh);
    memset(m, 0, sizeof *m);
}

int tr_model_forward(tr_model *m, const int *tok, int B, sh_tensor *logits, ck_err *err)
{
    int T = m->cfg.seq;
    int rc = root_grow(m, B, err);
    for (int i = 0; !rc && i < B * T; i++)
        if (tok[i] < 0 || tok[i] >= m->cfg.vocab)
            rc = ck_err_set(err, -EINVAL, "model: token %d at %d is not in [0, %d)", tok[i], i,
                            m->cfg.vocab);
    if (!rc)
        rc = sh_copy(m->w, m->tok, tok, sizeof(int) * (size_t)B * (size_t)T, err);
    /* The shape of the batch, no storage: the ids are in m->tok. */
    sh_tensor in = {CK_F32, SH_META, 2, {B, T}, (size_t)B * (size_t)T, NULL, 0};
    if (!rc)
        rc = sh_module_forward(m->root, &in, logits, err);
    return rc;
}

int tr_model_backward(tr_model *m, const sh_tensor *dlogits, ck_err *err)
{
    sh_tensor dx = SH_TENSOR_INIT_ON(sh_world_device(m->w));
    int rc = sh_module_backward(m->root, dlogits, &dx, err);
    sh_tensor_free(&dx);
    return rc;
}
