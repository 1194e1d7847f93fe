/* model.c - the GPT's module tree, its callbacks, and sharding (see model.h). */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gelu.h"
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

/* Resizes each (buffer, elements-per-row) pair to rows rows. */
typedef struct buf_spec {
    float **p;
    size_t per_row;
} buf_spec;

static int grow(buf_spec *b, int n, size_t rows, ck_err *err)
{
    for (int i = 0; i < n; i++) {
        float *q = realloc(*b[i].p, sizeof(float) * (b[i].per_row * rows + 1));
        if (!q)
            return ck_err_set(err, -ENOMEM, "model: out of memory for activations");
        *b[i].p = q;
    }
    return 0;
}

static int block_grow(tr_block *s, int B, ck_err *err)
{
    const tr_config *c = s->cfg;
    int T = c->seq;
    size_t C = (size_t)c->dim, rows = (size_t)B * (size_t)T;
    if ((int)rows <= s->rows) {
        s->B = B;
        return 0;
    }
    buf_spec b[] = {
        {&s->x, C}, {&s->ln1, C}, {&s->ln1_mean, 1}, {&s->ln1_rstd, 1}, {&s->qkv, 3 * C},
        {&s->att, (size_t)c->heads * (size_t)T}, {&s->atty, C}, {&s->x2, C}, {&s->ln2, C},
        {&s->ln2_mean, 1}, {&s->ln2_rstd, 1}, {&s->fc, 4 * C}, {&s->gelu, 4 * C},
        {&s->dx2, C}, {&s->dwide, 4 * C}, {&s->dnarrow, C}, {&s->dqkv, 3 * C},
        {&s->dp, (size_t)T},
    };
    int rc = grow(b, (int)(sizeof b / sizeof *b), rows, err);
    if (!rc) {
        s->rows = (int)rows;
        s->B = B;
    }
    return rc;
}

/* The unsharded f32 value of a parameter (only inside the hooks, see sh_param_value). */
static int pval(sh_param *p, const float **out, ck_err *err)
{
    sh_tensor *t;
    int rc = sh_param_value(p, &t, err);
    if (rc)
        return rc;
    if (t->dtype != CK_F32)
        return ck_err_set(err, -ENOTSUP, "parameter '%s' is %s: the GPT runs in f32",
                          sh_param_name(p), ck_dtype_name(t->dtype));
    *out = t->data;
    return 0;
}

/* Values (and, when g, gradient buffers) of n parameters. */
static int param_values(sh_param *const *p, int n, const float **w, float **g, ck_err *err)
{
    for (int i = 0; i < n; i++) {
        int rc = pval(p[i], &w[i], err);
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
    (void)mod;
    tr_block *s = user;
    const tr_config *c = s->cfg;
    int B = (int)in->shape[0], T = c->seq, C = c->dim, N = B * T;
    const float *w[TR_BLOCK_PARAMS];
    int rc = param_values(s->p, TR_BLOCK_PARAMS, w, NULL, err);
    if (!rc)
        rc = block_grow(s, B, err);
    if (!rc)
        rc = sh_tensor_resize(out, CK_F32, 3, (int64_t[]){B, T, C}, err);
    if (rc)
        return rc;
    float *y = out->data;
    memcpy(s->x, in->data, sizeof(float) * (size_t)N * (size_t)C);
    /* attention: x2 = x + proj(attn(ln1(x))) */
    tr_layernorm_fwd(s->ln1, s->ln1_mean, s->ln1_rstd, s->x, w[TR_LN1_W], w[TR_LN1_B], N, C);
    tr_linear_fwd(s->qkv, s->ln1, w[TR_QKV_W], w[TR_QKV_B], N, C, 3 * C);
    tr_attention_fwd(s->atty, s->att, s->qkv, B, T, C, c->heads);
    tr_linear_fwd(s->x2, s->atty, w[TR_PROJ_W], w[TR_PROJ_B], N, C, C);
    for (size_t i = 0; i < (size_t)N * (size_t)C; i++)
        s->x2[i] += s->x[i];
    /* MLP: y = x2 + fcp(gelu(fc(ln2(x2)))) */
    tr_layernorm_fwd(s->ln2, s->ln2_mean, s->ln2_rstd, s->x2, w[TR_LN2_W], w[TR_LN2_B], N, C);
    tr_linear_fwd(s->fc, s->ln2, w[TR_FC_W], w[TR_FC_B], N, C, 4 * C);
    k_gelu(s->gelu, s->fc, (size_t)N * 4 * (size_t)C);
    tr_linear_fwd(y, s->gelu, w[TR_FCP_W], w[TR_FCP_B], N, 4 * C, C);
    for (size_t i = 0; i < (size_t)N * (size_t)C; i++)
        y[i] += s->x2[i];
    return 0;
}

static int block_backward(sh_module *mod, const sh_tensor *gout, sh_tensor *gin, void *user,
                          ck_err *err)
{
    (void)mod;
    tr_block *s = user;
    const tr_config *c = s->cfg;
    int B = s->B, T = c->seq, C = c->dim, N = B * T;
    size_t NC = (size_t)N * (size_t)C;
    const float *w[TR_BLOCK_PARAMS];
    float *g[TR_BLOCK_PARAMS];
    int rc = param_values(s->p, TR_BLOCK_PARAMS, w, g, err);
    if (!rc)
        rc = sh_tensor_resize(gin, CK_F32, 3, (int64_t[]){B, T, C}, err);
    if (rc)
        return rc;
    const float *dy = gout->data;
    float *dx = gin->data;
    /* MLP: the residual passes dy to x2, the branch adds through ln2. */
    memcpy(s->dx2, dy, sizeof(float) * NC);
    tr_linear_bwd(s->dwide, g[TR_FCP_W], g[TR_FCP_B], dy, s->gelu, w[TR_FCP_W], N, 4 * C, C, 0);
    k_gelu_bwd(s->dwide, s->fc, s->dwide, (size_t)N * 4 * (size_t)C);
    tr_linear_bwd(s->dnarrow, g[TR_FC_W], g[TR_FC_B], s->dwide, s->ln2, w[TR_FC_W], N, C, 4 * C,
                  0);
    tr_layernorm_bwd(s->dx2, g[TR_LN2_W], g[TR_LN2_B], s->dnarrow, s->x2, s->ln2_mean,
                     s->ln2_rstd, w[TR_LN2_W], N, C);
    /* attention: the residual passes dx2 to x, the branch adds through ln1. */
    memcpy(dx, s->dx2, sizeof(float) * NC);
    tr_linear_bwd(s->dnarrow, g[TR_PROJ_W], g[TR_PROJ_B], s->dx2, s->atty, w[TR_PROJ_W], N, C,
                  C, 0);
    tr_attention_bwd(s->dqkv, s->dp, s->dnarrow, s->qkv, s->att, B, T, C, c->heads);
    tr_linear_bwd(s->dnarrow, g[TR_QKV_W], g[TR_QKV_B], s->dqkv, s->ln1, w[TR_QKV_W], N, C,
                  3 * C, 0);
    tr_layernorm_bwd(dx, g[TR_LN1_W], g[TR_LN1_B], s->dnarrow, s->x, s->ln1_mean, s->ln1_rstd,
                     w[TR_LN1_W], N, C);
    return 0;
}

static int root_grow(tr_model *m, int B, ck_err *err)
{
    size_t C = (size_t)m->cfg.dim, rows = (size_t)B * (size_t)m->cfg.seq;
    m->B = B;
    if ((int)rows <= m->rows)
        return 0;
    int *t = realloc(m->tok, sizeof(int) * rows);
    if (!t)
        return ck_err_set(err, -ENOMEM, "model: out of memory for tokens");
    m->tok = t;
    buf_spec b[] = {{&m->lnf, C}, {&m->lnf_mean, 1}, {&m->lnf_rstd, 1}, {&m->dlnf, C}};
    int rc = grow(b, 4, rows, err);
    if (!rc)
        m->rows = (int)rows;
    return rc;
}

static int root_forward(sh_module *mod, const sh_tensor *in, sh_tensor *out, void *user,
                        ck_err *err)
{
    (void)mod;
    tr_model *m = user;
    const tr_config *c = &m->cfg;
    int B = (int)in->shape[0], T = c->seq, C = c->dim, V = c->vocab, L = c->layers, N = B * T;
    sh_param *p[4] = {m->wte, m->wpe, m->lnf_w, m->lnf_b};
    const float *w[4];
    int rc = root_grow(m, B, err);
    if (!rc)
        rc = param_values(p, 4, w, NULL, err);
    if (rc)
        return rc;
    const float *ids = in->data;
    for (int i = 0; i < N; i++)
        m->tok[i] = (int)ids[i];
    rc = sh_tensor_resize(&m->h[0], CK_F32, 3, (int64_t[]){B, T, C}, err);
    if (rc)
        return rc;
    tr_embed_fwd(m->h[0].data, m->tok, w[0], w[1], B, T, C);
    for (int l = 0; l < L; l++) {
        rc = sh_module_forward(m->block[l], &m->h[l], &m->h[l + 1], err);
        if (rc)
            return rc;
    }
    tr_layernorm_fwd(m->lnf, m->lnf_mean, m->lnf_rstd, m->h[L].data, w[2], w[3], N, C);
    rc = sh_tensor_resize(out, CK_F32, 3, (int64_t[]){B, T, V}, err);
    if (!rc)
        tr_linear_fwd(out->data, m->lnf, w[0], NULL, N, C, V);
    return rc;
}

static int root_backward(sh_module *mod, const sh_tensor *gout, sh_tensor *gin, void *user,
                         ck_err *err)
{
    (void)mod;
    (void)gin;
    tr_model *m = user;
    const tr_config *c = &m->cfg;
    int B = m->B, T = c->seq, C = c->dim, V = c->vocab, L = c->layers, N = B * T;
    sh_param *p[4] = {m->wte, m->wpe, m->lnf_w, m->lnf_b};
    const float *w[4];
    float *g[4];
    int rc = param_values(p, 4, w, g, err);
    if (!rc)
        rc = sh_tensor_resize(&m->dh[L], CK_F32, 3, (int64_t[]){B, T, C}, err);
    if (rc)
        return rc;
    /* head (tied): dwte += dlogits^T lnf, dlnf = dlogits wte */
    tr_linear_bwd(m->dlnf, g[0], NULL, gout->data, m->lnf, w[0], N, C, V, 0);
    memset(m->dh[L].data, 0, sizeof(float) * (size_t)N * (size_t)C);
    tr_layernorm_bwd(m->dh[L].data, g[2], g[3], m->dlnf, m->h[L].data, m->lnf_mean,
                     m->lnf_rstd, w[2], N, C);
    for (int l = L - 1; l >= 0; l--) {
        rc = sh_module_backward(m->block[l], &m->dh[l + 1], &m->dh[l], err);
        if (rc)
            return rc;
    }
    tr_embed_bwd(g[0], g[1], m->dh[0].data, m->tok, B, T, C);
    return 0;
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
    for (int l = 0; l <= L; l++)
        m->h[l] = m->dh[l] = (sh_tensor)SH_TENSOR_INIT;
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

int tr_model_materialize(tr_model *m, sh_mesh *mesh, ck_err *err)
{
    int rc = 0;
    if (mesh) {
        sh_fsdp_opts o;
        sh_fsdp_opts_default(&o);
        for (int l = 0; !rc && l < m->cfg.layers; l++)
            rc = sh_fully_shard(m->block[l], mesh, &o, err);
        if (!rc)
            rc = sh_fully_shard(m->root, mesh, &o, err);
    }
    if (!rc)
        rc = sh_module_to_empty(m->root, SH_CPU, err);
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
                         s->dwide, s->dnarrow, s->dqkv, s->dp};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
            free(bufs[i]);
    }
    for (int l = 0; m->h && l <= m->cfg.layers; l++) {
        sh_tensor_free(&m->h[l]);
        sh_tensor_free(&m->dh[l]);
    }
    free(m->block);
    free(m->bs);
    free(m->h);
    free(m->dh);
    free(m->tok);
    free(m->lnf);
    free(m->lnf_mean);
    free(m->lnf_rstd);
    free(m->dlnf);
    memset(m, 0, sizeof *m);
}

int tr_model_forward(tr_model *m, const int *tok, int B, sh_tensor *logits, ck_err *err)
{
    int T = m->cfg.seq;
    sh_tensor in = SH_TENSOR_INIT;
    int rc = sh_tensor_resize(&in, CK_F32, 2, (int64_t[]){B, T}, err);
    if (!rc) {
        float *ids = in.data;
        for (int i = 0; i < B * T; i++)
            ids[i] = (float)tok[i];
        rc = sh_module_forward(m->root, &in, logits, err);
    }
    sh_tensor_free(&in);
    return rc;
}

int tr_model_backward(tr_model *m, const sh_tensor *dlogits, ck_err *err)
{
    sh_tensor dx = SH_TENSOR_INIT;
    int rc = sh_module_backward(m->root, dlogits, &dx, err);
    sh_tensor_free(&dx);
    return rc;
}
