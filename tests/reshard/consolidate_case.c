/* consolidate_case single|sharded|bf16|filter
 *
 * Saves a checkpoint on 2x4 (uneven, empty and 0-D tensors, several dtypes),
 * exports it with ck_consolidate, and checks the files with the project's own
 * safetensors reader: the header layout (length prefix, padding to 8, offsets tiling
 * the data, order by element size then name, alignment, __metadata__), every element
 * against the formula (for "bf16", every float tensor rounded to bf16 as torch's .to()
 * does: an f64 through an f32 first; integers as they are), the index for
 * "sharded", and byte-identical files from a second export. */
#include <jansson.h>
#include <math.h>

#include "export/safetensors.h"
#include "ck/save.h"
#include "ckpt_testlib.h"

static const uint64_t seed = 77;

static const struct { ck_dtype dt; int ndim; uint64_t shape[2]; } set[] = {
    { CK_F32, 2, { 1001, 37 } }, { CK_BF16, 2, { 3, 5 } }, { CK_F64, 2, { 4096, 8 } },
    { CK_I16, 2, { 17, 19 } }, { CK_F32, 0, { 0, 0 } }, { CK_U8, 2, { 10, 1 } },
    { CK_I64, 2, { 0, 4 } },
};
#define NT (sizeof set / sizeof *set)

static void save_src(const char *root)
{
    ck_err err = { 0 };
    ck_mesh mesh;
    ck_placement pl[2], rep[2] = { { 0 } };
    ck_mesh_parse("2x4", NULL, &mesh, NULL);
    ck_placements_parse("R,S(0)", 2, 2, pl, NULL);
    static ck_synth_src src[NT][8];
    ck_save *s;
    ck_decl *d;
    char tn[8];
    REQUIRE(ck_decl_new(&d, &mesh, &err) == 0, "%s", ck_err_msg(&err));
    for (uint32_t t = 0; t < NT; t++) {
        snprintf(tn, sizeof tn, "t%u", t);
        REQUIRE(ck_decl_tensor(d, tn, set[t].dt, set[t].ndim, set[t].shape,
                               set[t].ndim ? pl : rep, &err) == 0, "%s", ck_err_msg(&err));
    }
    REQUIRE(ck_save_begin(&s, root, "src", 1, d, NULL, &err) == 0, "%s", ck_err_msg(&err));
    ck_decl_free(d);
    for (uint32_t t = 0; t < NT; t++) {
        snprintf(tn, sizeof tn, "t%u", t);
        const ck_placement *p = set[t].ndim ? pl : rep;
        for (uint64_t r = 0; r < 8; r++) {
            uint32_t c[2];
            ck_mesh_coord(&mesh, r, c);
            src[t][r] = (ck_synth_src){ .seed = seed, .tensor = t,
                                        .itemsize = ck_dtype_size(set[t].dt), .ndim = set[t].ndim,
                                        .shape = { set[t].shape[0], set[t].shape[1] } };
            ck_shard_box(set[t].ndim, set[t].shape, &mesh, p, c, &src[t][r].box);
            REQUIRE(ck_save_shard_fill(s, tn, r, ck_synth_fill, &src[t][r], &err) == 0, "%s",
                    ck_err_msg(&err));
        }
    }
    REQUIRE(ck_save_commit(s, NULL, &err) == 0, "%s", ck_err_msg(&err));
}

/* Whether bf16 h is element e of a float tensor of dtype dt at ref, rounded to nearest
 * even (an f64 made an f32 first, as torch does); a NaN only has to stay a NaN. Written
 * out here, independent of the converter the export uses. */
static bool same_bf16(uint16_t h, ck_dtype dt, const uint8_t *ref, uint64_t e)
{
    uint32_t x;
    if (dt == CK_BF16) {
        uint16_t b;
        memcpy(&b, ref + e * 2, 2);
        return b == h || ((b & 0x7fff) > 0x7f80 && (h & 0x7fff) > 0x7f80);
    }
    if (dt == CK_F64) {
        double d;
        memcpy(&d, ref + e * 8, 8);
        float f = (float)d;
        memcpy(&x, &f, 4);
    } else {
        memcpy(&x, ref + e * 4, 4);
    }
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (h & 0x7fff) > 0x7f80;
    return h == (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

static bool float_dtype(ck_dtype dt)
{
    return dt == CK_F32 || dt == CK_BF16 || dt == CK_F64;
}

static void read_at(const char *path, uint64_t off, void *buf, size_t len)
{
    FILE *f = fopen(path, "rb");
    REQUIRE(f && fseeko(f, (off_t)off, SEEK_SET) == 0 && fread(buf, 1, len, f) == len,
            "read %s", path);
    fclose(f);
}

/* Checks one exported file; marks the tensors it holds in seen[]. */
static void check_file(const char *path, bool bf16, int *seen)
{
    ck_st_file sf;
    ck_err err = { 0 };
    REQUIRE(ck_st_open(path, &sf, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(sf.data_start % 8 == 0, "%s: header not padded to 8", path);
    CHECK(!strcmp(sf.format, "pt"), "%s: __metadata__.format is '%s'", path, sf.format);
    for (size_t i = 0; i < sf.n; i++) {
        const ck_st_tensor *x = &sf.t[i];
        uint32_t idx = (uint32_t)strtoul(x->name + 1, NULL, 10);
        REQUIRE(idx < NT, "unknown tensor %s", x->name);
        seen[idx]++;
        size_t is = ck_dtype_size(x->dtype);
        CHECK(x->begin % is == 0, "%s: tensor %s is not aligned", path, x->name);
        if (i > 0) {
            size_t pis = ck_dtype_size(sf.t[i - 1].dtype);
            CHECK(pis > is || (pis == is && strcmp(sf.t[i - 1].name, x->name) < 0),
                  "%s: %s before %s breaks the order", path, sf.t[i - 1].name, x->name);
        }
        ck_dtype want = bf16 && float_dtype(set[idx].dt) ? CK_BF16 : set[idx].dt;
        CHECK(x->dtype == want && x->ndim == set[idx].ndim, "%s: %s has dtype %s", path, x->name,
              ck_st_dtype_name(x->dtype));
        ck_box full;
        ck_box_full(set[idx].ndim, set[idx].shape, &full);
        uint64_t n = ck_box_numel(&full);
        size_t sis = ck_dtype_size(set[idx].dt);
        uint8_t *ref = tl_box_bytes(seed, idx, sis, set[idx].ndim, set[idx].shape, &full);
        uint8_t *got = malloc(x->end - x->begin + 1);
        REQUIRE(got, "oom");
        read_at(path, sf.data_start + x->begin, got, x->end - x->begin);
        uint64_t bad = 0;
        for (uint64_t e = 0; e < n; e++) {
            if (want != CK_BF16) {
                bad += memcmp(got + e * is, ref + e * is, is) != 0;
            } else {
                uint16_t h;
                memcpy(&h, got + e * 2, 2);
                bad += !same_bf16(h, set[idx].dt, ref, e);
            }
        }
        CHECK(bad == 0, "%s: tensor %s: %llu of %llu elements differ from the formula", path,
              x->name, (unsigned long long)bad, (unsigned long long)n);
        free(ref);
        free(got);
    }
    ck_st_free(&sf);
}

static bool same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca == EOF && cb == EOF)
            break;
        same = ca == cb;
    }
    if (fa)
        fclose(fa);
    if (fb)
        fclose(fb);
    return same;
}

static ck_consolidate_stats export(ck_ckpt *ck, const char *dir, const ck_consolidate_opts *base)
{
    ck_consolidate_opts o = *base;
    o.dir = dir;
    ck_consolidate_stats st;
    ck_err err = { 0 };
    REQUIRE(ck_consolidate(ck, &o, &st, &err) == 0, "consolidate: %s", ck_err_msg(&err));
    return st;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "single";
    char root[PATH_MAX], d1[PATH_MAX + 8], d2[PATH_MAX + 8];
    tl_tmpdir(root, sizeof root, "consolidate");
    save_src(root);
    snprintf(d1, sizeof d1, "%s/out1", root);
    snprintf(d2, sizeof d2, "%s/out2", root);
    ck_ckpt *ck;
    ck_err err = { 0 };
    REQUIRE(ck_open(root, "src", &ck, &err) == 0, "%s", ck_err_msg(&err));
    bool bf16 = !strcmp(mode, "bf16");
    ck_consolidate_opts o = { .mem_limit = 1u << 20 };
    if (bf16)
        o.dtype = CK_BF16;
    if (!strcmp(mode, "sharded"))
        o.max_shard_size = 64 * 1024;
    if (!strcmp(mode, "filter"))
        o.filter = "t[13]";
    ck_consolidate_stats st = export(ck, d1, &o), st2 = export(ck, d2, &o);
    int seen[NT] = { 0 };
    char p1[PATH_MAX + 64], p2[PATH_MAX + 64];
    for (uint64_t i = 0; i < st.files; i++) {
        const char *fmt = st.files == 1 ? "%s/model.safetensors" : "%s/model-%05llu-of-%05llu.safetensors";
        snprintf(p1, sizeof p1, fmt, d1, (unsigned long long)i + 1, (unsigned long long)st.files);
        snprintf(p2, sizeof p2, fmt, d2, (unsigned long long)i + 1, (unsigned long long)st.files);
        check_file(p1, bf16, seen);
        CHECK(same_file(p1, p2), "%s and %s differ: the export is not deterministic", p1, p2);
    }
    CHECK(st2.files == st.files && st2.bytes == st.bytes, "the second export differs in shape");
    for (uint32_t t = 0; t < NT; t++) {
        int want = o.filter ? (t == 1 || t == 3) : 1;
        CHECK(seen[t] == want, "tensor t%u appears %d times, wanted %d", t, seen[t], want);
    }
    snprintf(p1, sizeof p1, "%s/model.safetensors.index.json", d1);
    if (!strcmp(mode, "sharded")) {
        CHECK(st.files > 2 && st.sharded, "expected several files, got %llu",
              (unsigned long long)st.files);
        json_error_t je;
        json_t *j = json_load_file(p1, 0, &je);
        REQUIRE(j, "%s: %s", p1, je.text);
        json_t *map = json_object_get(j, "weight_map");
        uint64_t total = 0;
        for (uint32_t t = 0; t < NT; t++) {
            ck_box full;
            ck_box_full(set[t].ndim, set[t].shape, &full);
            total += ck_box_numel(&full) * ck_dtype_size(set[t].dt);
            char tn[8];
            snprintf(tn, sizeof tn, "t%u", t);
            json_t *f = json_object_get(map, tn);
            CHECK(json_is_string(f), "weight_map lacks %s", tn);
        }
        json_t *ts = json_object_get(json_object_get(j, "metadata"), "total_size");
        CHECK(json_is_integer(ts) && (uint64_t)json_integer_value(ts) == total,
              "metadata.total_size is not %llu", (unsigned long long)total);
        json_decref(j);
    } else {
        CHECK(st.files == 1 && access(p1, F_OK) != 0, "a single file and no index expected");
    }
    ck_close(ck);
    if (!tl_failures)
        tl_rmtree(root);
    return tl_failures ? 1 : 0;
}
