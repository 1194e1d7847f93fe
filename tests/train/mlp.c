/* mlp.c - the test model's compute (shared), its libshard form, and its reference. */
#include "mlp.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "adamw.h"
#include "norm.h"

/* ---- compute, shared by both forms ---- */

/* y[B,O] = x[B,In] W[O,In]^T (+ b) */
static void linear_fwd(float *y, const float *x, const float *W, const float *b, int B, int In,
                       int O)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, O, In, 1.0f, x, In, W, In, 0.0f, y,
                O);
    for (int i = 0; b && i < B; i++)
        for (int o = 0; o < O; o++)
            y[i * O + o] += b[o];
}

/* dW += dy^T x; db += sum dy; dx = dy W (when dx). */
static void linear_bwd(float *dx, float *dW, float *db, const float *dy, const float *x,
                       const float *W, int B, int In, int O)
{
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, O, In, B, 1.0f, dy, O, x, In, 1.0f, dW,
                In);
    for (int i = 0; db && i < B; i++)
        for (int o = 0; o < O; o++)
            db[o] += dy[i * O + o];
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, In, O, 1.0f, dy, O, W, In, 0.0f,
                    dx, In);
}

/* y = x + W2 tanh(W1 x + b1) + b2; saves x and a = tanh(...) for backward. */
static void block_fwd(const tm_dims *d, const float *const w[4], const float *x, int B,
                      float *y, float *save_x, float *save_a)
{
    memcpy(save_x, x, sizeof(float) * (size_t)B * (size_t)d->d);
    linear_fwd(save_a, x, w[0], w[1], B, d->d, d->h);
    for (size_t i = 0; i < (size_t)B * (size_t)d->h; i++)
        save_a[i] = tanhf(save_a[i]);
    linear_fwd(y, save_a, w[2], w[3], B, d->h, d->d);
    for (size_t i = 0; i < (size_t)B * (size_t)d->d; i++)
        y[i] += x[i];
}

static void block_bwd(const tm_dims *d, const float *const w[4], float *const g[4],
                      const float *x, float *a, const float *dy, int B, float *dx)
{
    float *da = malloc(sizeof(float) * (size_t)B * (size_t)d->h);
    linear_bwd(da, g[2], g[3], dy, a, w[2], B, d->h, d->d);
    for (size_t i = 0; i < (size_t)B * (size_t)d->h; i++)
        da[i] *= 1.0f - a[i] * a[i];
    linear_bwd(dx, g[0], g[1], da, x, w[0], B, d->d, d->h);
    for (size_t i = 0; i < (size_t)B * (size_t)d->d; i++)
        dx[i] += dy[i];
    free(da);
}

/* Loss of y against t, and dy = d(loss)/dy / accum. */
static double loss_grad(const float *y, const float *t, float *dy, int B, int O, int accum)
{
    double loss = 0.0;
    float scale = 1.0f / ((float)B * (float)O * (float)accum);
    for (size_t i = 0; i < (size_t)B * (size_t)O; i++) {
        float e = y[i] - t[i];
        loss += 0.5 * (double)e * (double)e;
        dy[i] = e * scale;
    }
    return loss / ((double)B * O);
}

int tm_param_descs(const tm_dims *d, tm_param_desc *out)
{
    int n = 0;
    if (d->root_params)
        out[n++] = (tm_param_desc){"in_w", 2, {d->d, d->din}, false};
    for (int b = 0; b < d->nblocks; b++) {
        out[n] = (tm_param_desc){"", 2, {d->h, d->d}, false};
        snprintf(out[n++].name, 64, "blocks.%d.w1", b);
        out[n] = (tm_param_desc){"", 1, {d->h, 0}, true};
        snprintf(out[n++].name, 64, "blocks.%d.b1", b);
        out[n] = (tm_param_desc){"", 2, {d->d, d->h}, false};
        snprintf(out[n++].name, 64, "blocks.%d.w2", b);
        out[n] = (tm_param_desc){"", 1, {d->d, 0}, true};
        snprintf(out[n++].name, 64, "blocks.%d.b2", b);
    }
    if (d->root_params)
        out[n++] = (tm_param_desc){"out_w", 2, {d->dout, d->d}, false};
    return n;
}

static sh_init_spec init_of(const tm_dims *d, const tm_param_desc *p)
{
    return p->bias ? (sh_init_spec){SH_INIT_ZEROS, 0.0f}
                   : (sh_init_spec){SH_INIT_UNIFORM, d->init_bound};
}

void tm_data(const tm_dims *d, long mb, int B, float *x, float *t)
{
    sh_init_spec u = {SH_INIT_UNIFORM, 1.0f};
    sh_init_fill(&u, 7, "data.x", (uint64_t)mb * (uint64_t)B * (uint64_t)d->din, x,
                 (size_t)B * (size_t)d->din);
    float *teacher = malloc(sizeof(float) * (size_t)d->dout * (size_t)d->din);
    sh_init_fill(&u, 7, "data.teacher", 0, teacher, (size_t)d->dout * (size_t)d->din);
    linear_fwd(t, x, teacher, NULL, B, d->din, d->dout);
    for (size_t i = 0; i < (size_t)B * (size_t)d->dout; i++)
        t[i] = tanhf(t[i]);
    free(teacher);
}

/* ---- the libshard model ---- */

/* p's unsharded value as f32: the tensor itself, or a converted copy in *scratch. */
static int value_f32(sh_param *p, float **scratch, const float **out, ck_err *err)
{
    sh_tensor *t;
    int rc = sh_param_value(p, &t, err);
    if (rc)
        return rc;
    if (t->dtype == CK_F32) {
        *out = t->data;
        return 0;
    }
    float *s = realloc(*scratch, sizeof(float) * (t->numel ? t->numel : 1));
    if (!s)
        return ck_err_set(err, -ENOMEM, "out of memory");
    *scratch = s;
    *out = s;
    return sh_cast(s, CK_F32, t->data, t->dtype, t->numel, err);
}

/* An input of any float dtype, as f32 in *buf (grown to fit). */
static int input_f32(const sh_tensor *in, float **buf, ck_err *err)
{
    float *s = realloc(*buf, sizeof(float) * (in->numel ? in->numel : 1));
    if (!s)
        return ck_err_set(err, -ENOMEM, "out of memory");
    *buf = s;
    return sh_cast(s, CK_F32, in->data, in->dtype, in->numel, err);
}

static int grow_acts(float **a, float **b, int *cap, size_t na, size_t nb, int B)
{
    if (B <= *cap)
        return 0;
    free(*a);
    free(*b);
    *a = malloc(sizeof(float) * na);
    *b = malloc(sizeof(float) * nb);
    *cap = B;
    return *a && *b ? 0 : -ENOMEM;
}

int tm_block_forward(sh_module *m, const sh_tensor *in, sh_tensor *out, void *user,
                     ck_err *err)
{
    (void)m;
    tm_block *s = user;
    const tm_dims *d = s->dims;
    int B = (int)in->shape[0];
    const float *w[4];
    for (int i = 0; i < 4; i++) {
        int rc = value_f32(s->p[i], &s->scratch[i], &w[i], err);
        if (rc)
            return rc;
    }
    if (grow_acts(&s->x, &s->a, &s->cap, (size_t)B * (size_t)d->d, (size_t)B * (size_t)d->h, B))
        return ck_err_set(err, -ENOMEM, "out of memory");
    int rc = input_f32(in, &s->x, err);   /* x is saved for backward anyway */
    int64_t shape[2] = {B, d->d};
    if (!rc)
        rc = sh_tensor_resize(out, CK_F32, 2, shape, err);
    if (rc)
        return rc;
    float *xin = malloc(sizeof(float) * (size_t)B * (size_t)d->d);
    memcpy(xin, s->x, sizeof(float) * (size_t)B * (size_t)d->d);
    block_fwd(d, w, xin, B, out->data, s->x, s->a);
    free(xin);
    return 0;
}

static int block_backward_cb(sh_module *m, const sh_tensor *gout, sh_tensor *gin, void *user,
                             ck_err *err)
{
    (void)m;
    tm_block *s = user;
    const tm_dims *d = s->dims;
    int B = (int)gout->shape[0];
    const float *w[4];
    float *g[4];
    for (int i = 0; i < 4; i++) {
        int rc = value_f32(s->p[i], &s->scratch[i], &w[i], err);
        if (!rc)
            rc = sh_param_grad(s->p[i], &g[i], err);
        if (rc)
            return rc;
    }
    int64_t shape[2] = {B, d->d};
    int rc = sh_tensor_resize(gin, CK_F32, 2, shape, err);
    if (rc)
        return rc;
    block_bwd(d, w, g, s->x, s->a, gout->data, B, gin->data);
    return 0;
}

static int root_forward_cb(sh_module *mod, const sh_tensor *in, sh_tensor *out, void *user,
                           ck_err *err)
{
    (void)mod;
    tm_model *m = user;
    const tm_dims *d = &m->dims;
    int B = (int)in->shape[0];
    if (grow_acts(&m->x, &m->hlast, &m->cap, (size_t)B * (size_t)d->din,
                  (size_t)B * (size_t)d->d, B))
        return ck_err_set(err, -ENOMEM, "out of memory");
    int rc = input_f32(in, &m->x, err);
    int64_t hs[2] = {B, d->d};
    if (!rc)
        rc = sh_tensor_resize(&m->act[0], CK_F32, 2, hs, err);
    if (rc)
        return rc;
    if (d->root_params) {
        const float *w;
        rc = value_f32(m->in_w, &m->scratch_in, &w, err);
        if (rc)
            return rc;
        linear_fwd(m->act[0].data, m->x, w, NULL, B, d->din, d->d);
    } else {
        memcpy(m->act[0].data, m->x, sizeof(float) * (size_t)B * (size_t)d->d);
    }
    for (int b = 0; b < d->nblocks; b++) {
        rc = sh_module_forward(m->block[b], &m->act[b], &m->act[b + 1], err);
        if (rc)
            return rc;
    }
    const sh_tensor *h = &m->act[d->nblocks];
    float *hf = NULL;
    rc = input_f32(h, &hf, err);
    int64_t os[2] = {B, d->dout};
    if (!rc)
        rc = sh_tensor_resize(out, CK_F32, 2, os, err);
    if (!rc && d->root_params) {
        const float *w;
        rc = value_f32(m->out_w, &m->scratch_out, &w, err);
        if (!rc) {
            memcpy(m->hlast, hf, sizeof(float) * (size_t)B * (size_t)d->d);
            linear_fwd(out->data, hf, w, NULL, B, d->d, d->dout);
        }
    } else if (!rc) {
        memcpy(out->data, hf, sizeof(float) * (size_t)B * (size_t)d->d);
    }
    free(hf);
    return rc;
}

static int root_backward_cb(sh_module *mod, const sh_tensor *gout, sh_tensor *gin, void *user,
                            ck_err *err)
{
    (void)mod;
    (void)gin;
    tm_model *m = user;
    const tm_dims *d = &m->dims;
    int B = (int)gout->shape[0];
    int nb = d->nblocks;
    int64_t hs[2] = {B, d->d};
    int rc = sh_tensor_resize(&m->grad[nb], CK_F32, 2, hs, err);
    if (rc)
        return rc;
    if (d->root_params) {
        const float *w;
        float *g;
        rc = value_f32(m->out_w, &m->scratch_out, &w, err);
        if (!rc)
            rc = sh_param_grad(m->out_w, &g, err);
        if (rc)
            return rc;
        linear_bwd(m->grad[nb].data, g, NULL, gout->data, m->hlast, w, B, d->d, d->dout);
    } else {
        memcpy(m->grad[nb].data, gout->data, sizeof(float) * (size_t)B * (size_t)d->d);
    }
    for (int b = nb - 1; b >= 0; b--) {
        rc = sh_module_backward(m->block[b], &m->grad[b + 1], &m->grad[b], err);
        if (rc)
            return rc;
    }
    if (d->root_params) {
        const float *w;
        float *g;
        rc = value_f32(m->in_w, &m->scratch_in, &w, err);
        if (!rc)
            rc = sh_param_grad(m->in_w, &g, err);
        if (rc)
            return rc;
        linear_bwd(NULL, g, NULL, m->grad[0].data, m->x, w, B, d->din, d->d);
    }
    return 0;
}

int tm_build(sh_world *w, const tm_dims *dims, tm_model *m, ck_err *err)
{
    memset(m, 0, sizeof *m);
    m->dims = *dims;
    const tm_dims *d = &m->dims;
    int rc = sh_module_new(w, NULL, "model", root_forward_cb, root_backward_cb, m, &m->root, err);
    if (!rc)
        rc = sh_module_new(w, m->root, "blocks", NULL, NULL, NULL, &m->blocks, err);
    tm_param_desc desc[TM_MAX_PARAMS];
    tm_param_descs(d, desc);
    int k = 0;
    if (!rc && d->root_params)
        rc = sh_param_new(m->root, "in_w", 2, desc[k].shape, init_of(d, &desc[k]), &m->in_w, err),
        k++;
    for (int b = 0; !rc && b < d->nblocks; b++) {
        char name[16];
        snprintf(name, sizeof name, "%d", b);
        tm_block *s = &m->bstate[b];
        s->dims = d;
        rc = sh_module_new(w, m->blocks, name, tm_block_forward, block_backward_cb, s,
                           &m->block[b], err);
        static const char *const pn[4] = {"w1", "b1", "w2", "b2"};
        for (int i = 0; !rc && i < 4; i++, k++)
            rc = sh_param_new(m->block[b], pn[i], desc[k].ndim, desc[k].shape,
                              init_of(d, &desc[k]), &s->p[i], err);
    }
    if (!rc && d->root_params)
        rc = sh_param_new(m->root, "out_w", 2, desc[k].shape, init_of(d, &desc[k]), &m->out_w,
                          err);
    if (rc)
        tm_free(m);
    return rc;
}

void tm_free(tm_model *m)
{
    sh_module_free(m->root);
    for (int b = 0; b < TM_MAX_BLOCKS; b++) {
        free(m->bstate[b].x);
        free(m->bstate[b].a);
        for (int i = 0; i < 4; i++)
            free(m->bstate[b].scratch[i]);
    }
    for (int i = 0; i <= TM_MAX_BLOCKS; i++) {
        sh_tensor_free(&m->act[i]);
        sh_tensor_free(&m->grad[i]);
    }
    free(m->x);
    free(m->hlast);
    free(m->scratch_in);
    free(m->scratch_out);
    memset(m, 0, sizeof *m);
}

int tm_fwd_bwd(tm_model *m, const float *x, const float *t, int B, int accum, double *loss,
               ck_err *err)
{
    const tm_dims *d = &m->dims;
    sh_tensor in = SH_TENSOR_INIT, out = SH_TENSOR_INIT, dy = SH_TENSOR_INIT, dx = SH_TENSOR_INIT;
    int64_t is[2] = {B, d->din}, os[2] = {B, d->dout};
    int rc = sh_tensor_resize(&in, CK_F32, 2, is, err);
    if (!rc) {
        memcpy(in.data, x, sizeof(float) * (size_t)B * (size_t)d->din);
        rc = sh_module_forward(m->root, &in, &out, err);
    }
    if (!rc)
        rc = sh_tensor_cast(&out, CK_F32, err);
    if (!rc)
        rc = sh_tensor_resize(&dy, CK_F32, 2, os, err);
    if (!rc) {
        *loss = loss_grad(out.data, t, dy.data, B, d->dout, accum);
        rc = sh_module_backward(m->root, &dy, &dx, err);
    }
    sh_tensor_free(&in);
    sh_tensor_free(&out);
    sh_tensor_free(&dy);
    sh_tensor_free(&dx);
    return rc;
}

/* ---- the reference ---- */

int tm_ref_init(tm_ref *r, const tm_dims *dims, uint64_t seed)
{
    memset(r, 0, sizeof *r);
    r->dims = *dims;
    r->np = tm_param_descs(dims, r->desc);
    for (int i = 0; i < r->np; i++) {
        const tm_param_desc *p = &r->desc[i];
        r->n[i] = (size_t)p->shape[0] * (size_t)(p->ndim == 2 ? p->shape[1] : 1);
        r->p[i] = calloc(r->n[i], sizeof(float));
        r->g[i] = calloc(r->n[i], sizeof(float));
        r->m[i] = calloc(r->n[i], sizeof(float));
        r->v[i] = calloc(r->n[i], sizeof(float));
        if (!r->p[i] || !r->g[i] || !r->m[i] || !r->v[i])
            return -ENOMEM;
        sh_init_spec init = init_of(dims, p);
        sh_init_fill(&init, seed, p->name, 0, r->p[i], r->n[i]);
    }
    return 0;
}

void tm_ref_free(tm_ref *r)
{
    for (int i = 0; i < r->np; i++) {
        free(r->p[i]);
        free(r->g[i]);
        free(r->m[i]);
        free(r->v[i]);
    }
    memset(r, 0, sizeof *r);
}

double tm_ref_fwd_bwd(tm_ref *r, const float *x, const float *t, int B, int accum)
{
    const tm_dims *d = &r->dims;
    int nb = d->nblocks, k0 = d->root_params ? 1 : 0;
    size_t bd = (size_t)B * (size_t)d->d;
    float *h = malloc(sizeof(float) * bd * (size_t)(nb + 1));
    float *sx = malloc(sizeof(float) * bd * (size_t)nb);
    float *sa = malloc(sizeof(float) * (size_t)B * (size_t)d->h * (size_t)nb);
    float *y = malloc(sizeof(float) * (size_t)B * (size_t)d->dout);
    float *dy = malloc(sizeof(float) * (size_t)B * (size_t)d->dout);
    float *dh = malloc(sizeof(float) * bd * 2);
    if (d->root_params)
        linear_fwd(h, x, r->p[0], NULL, B, d->din, d->d);
    else
        memcpy(h, x, sizeof(float) * bd);
    for (int b = 0; b < nb; b++) {
        const float *w[4] = {r->p[k0 + 4 * b], r->p[k0 + 4 * b + 1], r->p[k0 + 4 * b + 2],
                             r->p[k0 + 4 * b + 3]};
        block_fwd(d, w, h + bd * (size_t)b, B, h + bd * (size_t)(b + 1), sx + bd * (size_t)b,
                  sa + (size_t)B * (size_t)d->h * (size_t)b);
    }
    const float *hl = h + bd * (size_t)nb;
    int last = r->np - 1;
    if (d->root_params)
        linear_fwd(y, hl, r->p[last], NULL, B, d->d, d->dout);
    else
        memcpy(y, hl, sizeof(float) * bd);
    double loss = loss_grad(y, t, dy, B, d->dout, accum);
    float *cur = dh, *nxt = dh + bd;
    if (d->root_params)
        linear_bwd(cur, r->g[last], NULL, dy, hl, r->p[last], B, d->d, d->dout);
    else
        memcpy(cur, dy, sizeof(float) * bd);
    for (int b = nb - 1; b >= 0; b--) {
        int k = k0 + 4 * b;
        const float *w[4] = {r->p[k], r->p[k + 1], r->p[k + 2], r->p[k + 3]};
        float *const g[4] = {r->g[k], r->g[k + 1], r->g[k + 2], r->g[k + 3]};
        block_bwd(d, w, g, sx + bd * (size_t)b, sa + (size_t)B * (size_t)d->h * (size_t)b, cur,
                  B, nxt);
        float *t2 = cur;
        cur = nxt;
        nxt = t2;
    }
    if (d->root_params)
        linear_bwd(NULL, r->g[0], NULL, cur, x, r->p[0], B, d->din, d->d);
    free(h);
    free(sx);
    free(sa);
    free(y);
    free(dy);
    free(dh);
    return loss;
}

double tm_ref_step(tm_ref *r, double max_norm, const sh_adamw_opts *o)
{
    double sumsq = 0.0;
    for (int i = 0; i < r->np; i++)
        sumsq += k_sumsq(r->g[i], r->n[i]);
    double norm = sqrt(sumsq);
    float coef = (float)(max_norm / (norm + 1e-6));
    if (max_norm > 0 && coef < 1.0f)
        for (int i = 0; i < r->np; i++)
            k_scale(r->g[i], coef, r->n[i]);
    k_adamw_hparams h;
    k_adamw_hparams_for_step(&h, o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, ++r->step);
    for (int i = 0; i < r->np; i++) {
        k_adamw_step(r->p[i], r->g[i], r->m[i], r->v[i], r->n[i], &h);
        memset(r->g[i], 0, r->n[i] * sizeof(float));
    }
    return norm;
}

int tm_build_sharded(sh_world *w, const tm_dims *dims, sh_mesh *mesh, uint64_t seed,
                     tm_model *m, ck_err *err)
{
    int rc = tm_build(w, dims, m, err);
    for (int b = 0; !rc && b < dims->nblocks; b++)
        rc = sh_fully_shard(m->block[b], mesh, NULL, err);
    if (!rc)
        rc = sh_fully_shard(m->root, mesh, NULL, err);
    if (!rc)
        rc = sh_module_to_empty(m->root, SH_CPU, err);
    return rc ? rc : sh_module_reset_parameters(m->root, seed, err);
}
