/* test_state_dict_roundtrip: state dicts round-trip. Sharded ones describe
 * torch.chunk shards (short and empty trailing shards, never padded) with placements
 * and coordinates and load back in place; the full tensor after reset_parameters is
 * the same for every world size; full state dicts gather to rank 0 and load by
 * broadcast; a partial full dict is refused on every rank. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "mlp.h"

static const tm_dims DIMS = {.din = 5, .d = 7, .h = 9, .dout = 2, .nblocks = 2,
                             .root_params = true, .init_bound = 0.5f};
static const uint64_t SEED = 99;

#define CHECK(cond, ...) TH_CHECK(w, cond, __VA_ARGS__)

static const tm_param_desc *desc_of(const tm_param_desc *d, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(d[i].name, name) == 0)
            return &d[i];
    return NULL;
}

static void full_value(const tm_param_desc *d, float *out, size_t n)
{
    sh_init_spec init = d->bias ? (sh_init_spec){SH_INIT_ZEROS, 0}
                                : (sh_init_spec){SH_INIT_UNIFORM, DIMS.init_bound};
    sh_init_fill(&init, SEED, d->name, 0, out, n);
}

int main(int argc, char **argv)
{
    sh_world *w = th_init(&argc, &argv);
    sh_mesh *mesh = th_mesh(w, argc, argv);
    ck_err err = {0};
    tm_model m;
    if (tm_build(w, &DIMS, &m, &err))
        th_die(w, "build", &err);
    for (int b = 0; b < DIMS.nblocks; b++)
        if (sh_fully_shard(m.block[b], mesh, NULL, &err))
            th_die(w, "fully_shard", &err);
    if (sh_fully_shard(m.root, mesh, NULL, &err) || sh_module_to_empty(m.root, SH_CPU, &err) ||
        sh_module_reset_parameters(m.root, SEED, &err))
        th_die(w, "setup", &err);
    sh_adamw *opt;
    if (sh_adamw_new(m.root, NULL, &opt, &err))
        th_die(w, "optimizer", &err);

    tm_param_desc desc[TM_MAX_PARAMS];
    int np = tm_param_descs(&DIMS, desc);
    int nd = sh_mesh_ndim(mesh);
    uint64_t W = (uint64_t)sh_mesh_size(mesh, nd - 1), r = (uint64_t)sh_mesh_coord(mesh, nd - 1);

    /* Sharded: boxes are torch.chunk's, computed here from scratch. */
    sh_state_dict sd;
    if (sh_model_state_dict(m.root, &sd, &err))
        th_die(w, "state dict", &err);
    CHECK(sd.n == (size_t)np, "%zu entries, want %d", sd.n, np);
    int empty = 0;
    for (size_t i = 0; i < sd.n; i++) {
        const sh_shard_entry *e = &sd.entry[i];
        const tm_param_desc *d = desc_of(desc, np, e->name);
        CHECK(d != NULL, "unknown entry %s", e->name);
        if (!d)
            continue;
        uint64_t n = e->shape[0], c = (n + W - 1) / W;
        uint64_t off = r * c < n ? r * c : n, end = (r + 1) * c < n ? (r + 1) * c : n;
        CHECK(e->box.off[0] == off && e->box.len[0] == end - off,
              "%s: box %llu+%llu, want %llu+%llu", e->name, (unsigned long long)e->box.off[0],
              (unsigned long long)e->box.len[0], (unsigned long long)off,
              (unsigned long long)(end - off));
        CHECK(e->mesh.ndim == nd && e->placement[nd - 1].kind == CK_SHARD &&
              e->placement[nd - 1].dim == 0 && (nd == 1 || e->placement[0].kind == CK_REPLICATE),
              "%s: placements", e->name);
        size_t full_n = (size_t)n * (d->ndim == 2 ? (size_t)d->shape[1] : 1);
        size_t row = d->ndim == 2 ? (size_t)d->shape[1] : 1;
        float *full = malloc(sizeof(float) * full_n);
        full_value(d, full, full_n);
        size_t len = (size_t)(end - off) * row;
        CHECK(len == 0 ? e->data == NULL
                       : memcmp(e->data, full + off * row, len * sizeof(float)) == 0,
              "%s: shard data differs from the full tensor's rows", e->name);
        empty += len == 0;
        free(full);
    }
    printf("rank %d: %zu shards, %d empty\n", sh_world_rank(w), sd.n, empty);

    sh_state_dict osd;
    if (sh_optim_state_dict(opt, &osd, &err))
        th_die(w, "optim state dict", &err);
    CHECK(osd.n == 2 * (size_t)np, "%zu optimizer entries", osd.n);
    for (size_t i = 0; i + 1 < osd.n; i += 2)
        CHECK(strstr(osd.entry[i].name, ".exp_avg") && strstr(osd.entry[i + 1].name, ".exp_avg_sq") &&
              ck_box_equal(&osd.entry[i].box, &sd.entry[i / 2].box),
              "optimizer entry %s", osd.entry[i].name);
    sh_state_dict_free(&osd);

    /* Full: on rank 0, equal to the formula (so equal for every world size). */
    sh_state_dict full;
    if (sh_model_full_state_dict(m.root, &full, &err))
        th_die(w, "full state dict", &err);
    if (sh_world_rank(w) == 0) {
        CHECK(full.n == (size_t)np, "%zu full entries", full.n);
        for (size_t i = 0; i < full.n; i++) {
            const tm_param_desc *d = desc_of(desc, np, full.entry[i].name);
            size_t n = ck_box_numel(&full.entry[i].box);
            float *want = malloc(sizeof(float) * n);
            full_value(d, want, n);
            CHECK(memcmp(want, full.entry[i].data, n * sizeof(float)) == 0,
                  "full %s differs from the initializer", full.entry[i].name);
            /* Prepare the load below: every element + 1. */
            for (size_t j = 0; j < n; j++)
                ((float *)full.entry[i].data)[j] = want[j] + 1.0f;
            free(want);
        }
    } else {
        CHECK(full.n == 0, "rank %d got %zu full entries", sh_world_rank(w), full.n);
    }

    /* Save the shards, load the full dict (+1), check, then load the shards back. */
    size_t total = 0;
    for (size_t i = 0; i < sd.n; i++)
        total += ck_box_numel(&sd.entry[i].box);
    float *saved = malloc(sizeof(float) * (total + 1)), *p = saved;
    for (size_t i = 0; i < sd.n; i++) {
        size_t n = ck_box_numel(&sd.entry[i].box);
        if (n)
            memcpy(p, sd.entry[i].data, n * sizeof(float));
        p += n;
    }
    if (sh_model_load_full_state_dict(m.root, sh_world_rank(w) == 0 ? &full : NULL, &err))
        th_die(w, "load full", &err);
    p = saved;
    for (size_t i = 0; i < sd.n; i++) {
        size_t n = ck_box_numel(&sd.entry[i].box);
        for (size_t j = 0; j < n; j++)
            CHECK(((float *)sd.entry[i].data)[j] == p[j] + 1.0f, "%s[%zu] not loaded",
                  sd.entry[i].name, j);
        p += n;
    }
    /* A sharded dict holding the saved values loads back in place. */
    sh_state_dict back = sd;
    back.entry = malloc(sizeof(sh_shard_entry) * sd.n);
    memcpy(back.entry, sd.entry, sizeof(sh_shard_entry) * sd.n);
    p = saved;
    for (size_t i = 0; i < sd.n; i++) {
        back.entry[i].data = ck_box_numel(&sd.entry[i].box) ? p : NULL;
        p += ck_box_numel(&sd.entry[i].box);
    }
    if (sh_model_load_state_dict(m.root, &back, &err))
        th_die(w, "load sharded", &err);
    p = saved;
    for (size_t i = 0; i < sd.n; i++) {
        size_t n = ck_box_numel(&sd.entry[i].box);
        CHECK(n == 0 || memcmp(sd.entry[i].data, p, n * sizeof(float)) == 0,
              "%s not restored", sd.entry[i].name);
        p += n;
    }
    /* A dict missing a tensor is refused on every rank, without a hang. */
    sh_state_dict partial = full;
    partial.n = full.n ? full.n - 1 : 0;
    ck_err_clear(&err);
    int rc = sh_model_load_full_state_dict(m.root, sh_world_rank(w) == 0 ? &partial : NULL, &err);
    CHECK(rc == -EINVAL, "loading a partial full dict gave %d: %s", rc, ck_err_msg(&err));

    free(back.entry);
    free(saved);
    sh_state_dict_free(&full);
    sh_state_dict_free(&sd);
    sh_adamw_free(opt);
    tm_free(&m);
    sh_mesh_free(mesh);
    if (sh_world_rank(w) == 0)
        printf("%d failure(s)\n", th_failures());
    return th_finish(w, th_failures() ? 1 : 0);
}
