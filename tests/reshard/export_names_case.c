/* export_names_case model_only|key_map
 *
 * model_only: a checkpoint shaped as DCP saves a Stateful app's state dict (the model
 * under "app.model.", AdamW's state under "app.optim.", a key that needs escapes)
 * exports, with the prefix ck_export_model_prefix finds, exactly the model's tensors
 * under the model's own keys (decoded, prefix cut off), floats in bf16 and the integer
 * tensor as it was; one saved as {"model": ..., "optim": ...} has the prefix
 * "model."; a checkpoint with both "model." and "app.model." or with neither is
 * refused, saying to give the prefix, and the prefix '' takes every tensor.
 *
 * key_map: rules rename exact keys and patterns (an exact rule winning over a pattern
 * listed before it), null leaves a tensor out, unmatched keys stay; two tensors
 * renamed to one key are refused naming both; bad rules (two '*', a '*' in TO alone,
 * neither string nor null, duplicate keys, no object, bad JSON) are refused naming
 * the rule or the line, and a missing file names the file.
 */
#include <jansson.h>

#include "export/safetensors.h"
#include "ck/save.h"
#include "ckpt_testlib.h"

typedef struct tdef {
    const char *key;      /* the state-dict key */
    ck_dtype dt;
    int ndim;
    uint64_t shape[2];
} tdef;

static const tdef app[] = {
    { "app.model.wte.weight", CK_F32, 2, { 4, 3 } },
    { "app.model.h.0 attn/c w", CK_F32, 1, { 5 } },
    { "app.model.pos_ids", CK_I64, 1, { 3 } },
    { "app.optim.state.wte.weight.exp_avg", CK_F32, 2, { 4, 3 } },
    { "app.optim.state.wte.weight.step", CK_F32, 0, { 0 } },
};

/* Element e of tensor t as a float: exact in bf16 (small integers and halves), so
 * that the bf16 export can be checked bit for bit. */
static float value(size_t t, uint64_t e)
{
    return (float)(t * 100 + e) * 0.5f;
}

static void save(const char *root, const char *name, const tdef *set, size_t n)
{
    ck_err err = { 0 };
    ck_mesh mesh;
    ck_placement rep[1] = { { 0 } };
    ck_mesh_parse("1", NULL, &mesh, NULL);
    ck_save *s;
    /* The save reads the shards' memory at commit. */
    static uint8_t mem[8][64 * 8];
    REQUIRE(n <= 8, "too many tensors");
    ck_decl *dc;
    char disk[CK_NAME_MAX];
    REQUIRE(ck_decl_new(&dc, &mesh, &err) == 0, "%s", ck_err_msg(&err));
    for (size_t t = 0; t < n; t++) {
        REQUIRE(ck_key_encode(set[t].key, strlen(set[t].key), disk, sizeof disk) == 0, "encode");
        REQUIRE(ck_decl_tensor(dc, disk, set[t].dt, set[t].ndim, set[t].shape, rep, &err) == 0,
                "%s", ck_err_msg(&err));
    }
    REQUIRE(ck_save_begin(&s, root, name, 1, dc, NULL, &err) == 0, "%s", ck_err_msg(&err));
    ck_decl_free(dc);
    for (size_t t = 0; t < n; t++) {
        REQUIRE(ck_key_encode(set[t].key, strlen(set[t].key), disk, sizeof disk) == 0, "encode");
        uint64_t numel = 1;
        for (int d = 0; d < set[t].ndim; d++)
            numel *= set[t].shape[d];
        uint8_t *buf = mem[t];
        for (uint64_t e = 0; e < numel; e++) {
            if (set[t].dt == CK_I64) {
                int64_t v = (int64_t)(t * 100 + e);
                memcpy(buf + e * 8, &v, 8);
            } else {
                float v = value(t, e);
                memcpy(buf + e * 4, &v, 4);
            }
        }
        REQUIRE(ck_save_shard(s, disk, 0, buf, &err) == 0, "%s", ck_err_msg(&err));
    }
    REQUIRE(ck_save_commit(s, NULL, &err) == 0, "%s", ck_err_msg(&err));
}

static ck_ckpt *open_ck(const char *root, const char *name)
{
    ck_ckpt *ck;
    ck_err err = { 0 };
    REQUIRE(ck_open(root, name, &ck, &err) == 0, "%s", ck_err_msg(&err));
    return ck;
}

/* The keys of the export in dir (one file), in a JSON object key -> tensor entry. */
static ck_st_file read_export(const char *dir)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_st_file sf;
    ck_err err = { 0 };
    REQUIRE(ck_st_open(path, &sf, &err) == 0, "%s", ck_err_msg(&err));
    return sf;
}

/* Exports ck with o into ROOT/sub; reads the file back. */
static ck_st_file export_into(ck_ckpt *ck, const char *root, const char *sub,
                              ck_consolidate_opts o, ck_consolidate_stats *st)
{
    char dir[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/%s", root, sub);
    o.dir = dir;
    ck_err err = { 0 };
    REQUIRE(ck_consolidate(ck, &o, st, &err) == 0, "%s", ck_err_msg(&err));
    return read_export(dir);
}

static const ck_st_tensor *find(const ck_st_file *sf, const char *key)
{
    for (size_t i = 0; i < sf->n; i++)
        if (!strcmp(sf->t[i].key, key))
            return &sf->t[i];
    return NULL;
}

static void model_only(const char *root)
{
    save(root, "app", app, sizeof app / sizeof *app);
    ck_ckpt *ck = open_ck(root, "app");
    char prefix[CK_NAME_MAX];
    ck_err err = { 0 };
    REQUIRE(ck_export_model_prefix(ck, prefix, sizeof prefix, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(!strcmp(prefix, "app.model."), "the model's prefix found is '%s'", prefix);
    ck_consolidate_stats st;
    ck_st_file sf = export_into(ck, root, "hf", (ck_consolidate_opts){ .prefix = prefix,
                                                                       .dtype = CK_BF16 }, &st);
    ck_close(ck);
    CHECK(sf.n == 3 && st.tensors == 3, "the export holds %zu tensors, wanted the model's 3", sf.n);
    static const char *const want[] = { "wte.weight", "h.0 attn/c w", "pos_ids" };
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/hf/model.safetensors", root);
    FILE *f = fopen(path, "rb");
    REQUIRE(f, "%s", path);
    for (size_t t = 0; t < 3; t++) {
        const ck_st_tensor *x = find(&sf, want[t]);
        CHECK(x, "no tensor under the key '%s'", want[t]);
        if (!x)
            continue;
        ck_dtype dt = app[t].dt == CK_I64 ? CK_I64 : CK_BF16;
        CHECK(x->dtype == dt, "%s has dtype %s, wanted %s", want[t], ck_dtype_name(x->dtype),
              ck_dtype_name(dt));
        uint8_t got[64 * 8];
        REQUIRE(x->end - x->begin <= sizeof got, "size");
        REQUIRE(fseeko(f, (off_t)(sf.data_start + x->begin), SEEK_SET) == 0 &&
                fread(got, 1, x->end - x->begin, f) == x->end - x->begin, "read %s", path);
        for (uint64_t e = 0; e < (x->end - x->begin) / ck_dtype_size(dt); e++) {
            if (dt == CK_I64) {
                int64_t v;
                memcpy(&v, got + e * 8, 8);
                CHECK(v == (int64_t)(t * 100 + e), "%s[%llu] is %lld", want[t],
                      (unsigned long long)e, (long long)v);
            } else {
                uint16_t h;
                memcpy(&h, got + e * 2, 2);
                float v = value(t, e), g;
                uint32_t bits = (uint32_t)h << 16;
                memcpy(&g, &bits, 4);
                CHECK(g == v, "%s[%llu] is %g, wanted %g", want[t], (unsigned long long)e,
                      (double)g, (double)v);
            }
        }
    }
    fclose(f);
    ck_st_free(&sf);

    /* A state dict saved as {"model": ..., "optim": ...}: the prefix is "model.". */
    static const tdef plain[] = { { "model.w", CK_F32, 1, { 2 } },
                                  { "optim.state.w.exp_avg", CK_F32, 1, { 2 } } };
    save(root, "plain", plain, 2);
    ck = open_ck(root, "plain");
    REQUIRE(ck_export_model_prefix(ck, prefix, sizeof prefix, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(!strcmp(prefix, "model."), "the model's prefix of 'plain' found is '%s'", prefix);
    ck_close(ck);

    /* Both shapes in one checkpoint, and neither: refused, saying to give the prefix. */
    static const tdef both[] = { { "app.model.w", CK_F32, 1, { 2 } },
                                 { "model.w", CK_F32, 1, { 2 } } };
    static const tdef neither[] = { { "w", CK_F32, 1, { 2 } },
                                    { "optimizer.state.w.exp_avg", CK_F32, 1, { 2 } } };
    save(root, "both", both, 2);
    save(root, "neither", neither, 2);
    ck = open_ck(root, "both");
    ck_err_clear(&err);
    CHECK(ck_export_model_prefix(ck, prefix, sizeof prefix, &err) == -EINVAL &&
          strstr(ck_err_msg(&err), "both") && strstr(ck_err_msg(&err), "prefix"),
          "both prefixes: '%s'", ck_err_msg(&err));
    ck_close(ck);
    ck = open_ck(root, "neither");
    ck_err_clear(&err);
    CHECK(ck_export_model_prefix(ck, prefix, sizeof prefix, &err) == -ENOENT &&
          strstr(ck_err_msg(&err), "model.") && strstr(ck_err_msg(&err), "prefix"),
          "no prefix: '%s'", ck_err_msg(&err));
    /* The prefix given as '' takes every tensor under its whole key. */
    sf = export_into(ck, root, "all", (ck_consolidate_opts){ .prefix = "" }, &st);
    CHECK(st.tensors == 2 && find(&sf, "optimizer.state.w.exp_avg"),
          "prefix '' exported %llu tensors", (unsigned long long)st.tensors);
    ck_st_free(&sf);
    ck_close(ck);
}

static int parse(const char *json, ck_key_map **m, ck_err *err)
{
    ck_err_clear(err);
    return ck_key_map_parse(json, strlen(json), "test.json", m, err);
}

static void key_map(const char *root)
{
    save(root, "app", app, sizeof app / sizeof *app);
    ck_ckpt *ck = open_ck(root, "app");
    ck_key_map *m;
    ck_err err = { 0 };
    /* The first matching pattern decides (h.0 is renamed, not dropped by the pattern
     * after it); the exact rule for wte.weight wins over the pattern listed before it;
     * pos_ids falls to that pattern and goes, and so does the optimizer. */
    REQUIRE(parse("{\"app.model.h.*\": \"transformer.h.*\", \"app.model.*\": null,"
                  " \"app.model.wte.weight\": \"transformer.wte\", \"app.optim.*\": null}", &m,
                  &err) == 0, "%s", ck_err_msg(&err));
    ck_consolidate_stats st;
    ck_st_file sf = export_into(ck, root, "mapped", (ck_consolidate_opts){
                                    .rename = ck_key_map_rename, .rename_arg = m }, &st);
    ck_key_map_free(m);
    CHECK(sf.n == 2 && find(&sf, "transformer.wte") && find(&sf, "transformer.h.0 attn/c w"),
          "the key map gave %zu tensors: %s, %s", sf.n, sf.n > 0 ? sf.t[0].key : "",
          sf.n > 1 ? sf.t[1].key : "");
    ck_st_free(&sf);

    /* Unmatched keys stay; two tensors renamed to one key are refused, naming both. */
    REQUIRE(parse("{\"app.optim.state.wte.weight.exp_avg\": \"app.model.wte.weight\"}", &m,
                  &err) == 0, "%s", ck_err_msg(&err));
    char dir[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/twice", root);
    ck_consolidate_opts o = { .dir = dir, .rename = ck_key_map_rename, .rename_arg = m };
    ck_err_clear(&err);
    CHECK(ck_consolidate(ck, &o, &st, &err) == -EINVAL &&
          strstr(ck_err_msg(&err), "app.model.wte.weight and app.optim.state.wte.weight.exp_avg"),
          "two tensors under one key: '%s'", ck_err_msg(&err));
    ck_key_map_free(m);
    snprintf(dir, sizeof dir, "%s/twice/model.safetensors", root);
    CHECK(access(dir, F_OK) != 0, "a refused export wrote %s", dir);
    ck_close(ck);

    static const struct { const char *json, *says; } bad[] = {
        { "{\"a.*.*\": \"b\"}", "rule \"a.*.*\" has more than one '*'" },
        { "{\"a\": \"b.*\"}", "rule \"a\" has a '*' in TO" },
        { "{\"a.*\": \"*.*\"}", "rule \"a.*\" has a '*' in TO" },
        { "{\"a\": 3}", "rule \"a\" is neither a string nor null" },
        { "{\"a\": \"\"}", "rule \"a\" renames to an empty key" },
        { "{\"a\": \"b\", \"a\": \"c\"}", "test.json: line 1" },
        { "[\"a\", \"b\"]", "not a JSON object" },
        { "{\"a\": ", "test.json: line 1" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        m = NULL;
        CHECK(parse(bad[i].json, &m, &err) == -EINVAL && !m &&
              strstr(ck_err_msg(&err), bad[i].says),
              "key map %s: '%s', wanted '%s'", bad[i].json, ck_err_msg(&err), bad[i].says);
    }
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/no-such.json", root);
    ck_err_clear(&err);
    CHECK(ck_key_map_load(path, &m, &err) == -ENOENT && strstr(ck_err_msg(&err), path),
          "a missing key map file: '%s'", ck_err_msg(&err));
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "model_only";
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "export-names");
    if (!strcmp(mode, "model_only"))
        model_only(root);
    else if (!strcmp(mode, "key_map"))
        key_map(root);
    else
        REQUIRE(0, "unknown mode %s", mode);
    if (!tl_failures)
        tl_rmtree(root);
    return tl_failures ? 1 : 0;
}
