/* A load into another dtype than the saved one converts the values (ck_reader_open's
 * dtype, ck_load_many's item dtype), never reinterprets their bits: bf16 [1, 2, -3.5,
 * 0.25] loads as f16 with the same values (their bits read as f16 would be [1.875, 2,
 * -2.1875, 1.625]), f32 loads as i32 [1, -2, 3, 7] (not 1065353216...), and a 3 Mi-
 * element f32 tensor loads as bf16 through several pieces of the bounded buffer, onto
 * another mesh, equal to ck_dtype_convert of the whole. Complex into real is refused
 * when the reader opens (and a batch holding it before any read), naming the tensor
 * and both dtypes; a NaN into i32 fails naming the tensor and the element. */
#include <math.h>

#include "ck/load.h"
#include "ck/save.h"
#include "ckpt_testlib.h"

#define BIG (3u << 20)

static ck_mesh mesh1;
static ck_placement rep[1] = { { .kind = CK_REPLICATE } };

static void declare(ck_decl *d, const char *name, ck_dtype dt, uint64_t n)
{
    ck_err err = { 0 };
    REQUIRE(ck_decl_tensor(d, name, dt, 1, &n, rep, &err) == 0, "%s: %s", name,
            ck_err_msg(&err));
}

static void give(ck_save *s, const char *name, const void *data)
{
    ck_err err = { 0 };
    REQUIRE(ck_save_shard(s, name, 0, data, &err) == 0, "%s: %s", name, ck_err_msg(&err));
}

int main(void)
{
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "convert");
    REQUIRE(ck_mesh_parse("1", NULL, &mesh1, NULL) == 0, "mesh");
    /* bf16 bits of 1.0, 2.0, -3.5, 0.25; the f16 bits of the same values. */
    static const uint16_t bf[4] = { 0x3f80, 0x4000, 0xc060, 0x3e80 };
    static const uint16_t f16_want[4] = { 0x3c00, 0x4000, 0xc300, 0x3400 };
    static const float f[4] = { 1.0f, -2.0f, 3.0f, 7.0f };
    static const int32_t i32_want[4] = { 1, -2, 3, 7 };
    float nan_at_2[3] = { 1.0f, 5.0f, NAN };
    float c[4] = { 1.0f, 0.0f, 2.0f, 0.0f };   /* two c64: 1+0i, 2+0i */
    float *big = malloc((size_t)BIG * 4);
    REQUIRE(big != NULL, "memory");
    for (uint32_t i = 0; i < BIG; i++)
        big[i] = (float)((int32_t)(i * 2654435761u) >> 8) / 4096.0f;

    ck_err err = { 0 };
    ck_save *s;
    ck_decl *d;
    REQUIRE(ck_decl_new(&d, &mesh1, &err) == 0, "%s", ck_err_msg(&err));
    declare(d, "b", CK_BF16, 4);
    declare(d, "f", CK_F32, 4);
    declare(d, "n", CK_F32, 3);
    declare(d, "c", CK_C64, 2);
    declare(d, "big", CK_F32, BIG);
    REQUIRE(ck_save_begin(&s, root, "conv", 1, d, NULL, &err) == 0, "%s", ck_err_msg(&err));
    ck_decl_free(d);
    give(s, "b", bf);
    give(s, "f", f);
    give(s, "n", nan_at_2);
    give(s, "c", c);
    give(s, "big", big);
    REQUIRE(ck_save_commit(s, NULL, &err) == 0, "%s", ck_err_msg(&err));

    ck_ckpt *ck;
    REQUIRE(ck_open(root, "conv", &ck, &err) == 0, "%s", ck_err_msg(&err));
    ck_box four = { .ndim = 1, .off = { 0 }, .len = { 4 } };

    /* One reader per target dtype. */
    ck_reader *rd;
    uint16_t h[4] = { 0 };
    REQUIRE(ck_reader_open(ck, "b", CK_F16, &rd, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(ck_reader_read(rd, &four, 0, sizeof h, h, &err) == 0, "bf16 as f16: %s",
          ck_err_msg(&err));
    CHECK(memcmp(h, f16_want, sizeof h) == 0, "bf16 [1, 2, -3.5, 0.25] loaded as f16 bits "
          "%04x %04x %04x %04x, want %04x %04x %04x %04x", h[0], h[1], h[2], h[3],
          f16_want[0], f16_want[1], f16_want[2], f16_want[3]);
    uint16_t h8[8];
    CHECK(ck_reader_read(rd, &four, 0, sizeof h8, h8, &err) == -EINVAL,
          "a 4-element f16 read of 16 bytes was taken");
    ck_reader_close(rd);

    /* A batch: f32 as i32 and bf16 as f16 side by side, and as saved. */
    int32_t i[4] = { 0 };
    uint16_t h2[4] = { 0 }, raw[4] = { 0 };
    ck_load_item items[3] = {
        { .tensor = "f", .box = four, .dst = i, .len = sizeof i, .dtype = CK_I32 },
        { .tensor = "b", .box = four, .dst = h2, .len = sizeof h2, .dtype = CK_F16 },
        { .tensor = "b", .box = four, .dst = raw, .len = sizeof raw },
    };
    CHECK(ck_load_many(ck, items, 3, &err) == 0, "batch: %s", ck_err_msg(&err));
    CHECK(memcmp(i, i32_want, sizeof i) == 0, "f32 [1, -2, 3, 7] loaded as i32 [%d, %d, %d, %d]",
          i[0], i[1], i[2], i[3]);
    CHECK(memcmp(h2, f16_want, sizeof h2) == 0, "bf16 as f16 in a batch: %04x...", h2[0]);
    CHECK(memcmp(raw, bf, sizeof raw) == 0, "bf16 as saved in a batch: %04x...", raw[0]);

    /* Big: onto rank 1 of 3 (S(0)), as bf16, in several pieces of the buffer. */
    uint16_t *want = malloc((size_t)BIG * 2), *got = malloc((size_t)BIG * 2);
    REQUIRE(want && got, "memory");
    REQUIRE(ck_dtype_convert(want, CK_BF16, big, CK_F32, BIG, &err) == 0, "%s", ck_err_msg(&err));
    ck_mesh three;
    ck_placement s0[1] = { { .kind = CK_SHARD, .dim = 0 } };
    REQUIRE(ck_mesh_parse("3", NULL, &three, NULL) == 0, "mesh");
    REQUIRE(ck_reader_open(ck, "big", CK_BF16, &rd, &err) == 0, "%s", ck_err_msg(&err));
    memset(got, 0xa5, (size_t)BIG * 2);
    CHECK(ck_reader_read_shard(rd, &three, s0, 1, got, &err) == 0, "big as bf16: %s",
          ck_err_msg(&err));
    uint64_t part = (BIG + 2) / 3;
    CHECK(memcmp(got, want + part, part * 2) == 0, "big f32 loaded as bf16 onto 3 ranks "
          "differs from ck_dtype_convert");
    ck_reader_close(rd);

    /* Refused when the reader opens, naming the tensor and both dtypes. */
    int rc = ck_reader_open(ck, "c", CK_F32, &rd, &err);
    const char *m = ck_err_msg(&err);
    CHECK(rc == -EINVAL && strstr(m, "tensor c ") && strstr(m, "c64") && strstr(m, "f32"),
          "c64 opened as f32: %d, '%s'", rc, m);
    ck_err_clear(&err);
    memset(i, 0x5a, sizeof i);
    float two[2];
    ck_load_item refused[2] = {
        { .tensor = "f", .box = four, .dst = i, .len = sizeof i },
        { .tensor = "c", .box = { .ndim = 1, .len = { 2 } }, .dst = two, .len = sizeof two,
          .dtype = CK_F32 },
    };
    rc = ck_load_many(ck, refused, 2, &err);
    m = ck_err_msg(&err);
    CHECK(rc == -EINVAL && strstr(m, "tensor c ") && strstr(m, "c64") && strstr(m, "f32"),
          "a batch with c64 as f32: %d, '%s'", rc, m);
    CHECK(i[0] == 0x5a5a5a5a, "the batch that holds a refused item read its other items");

    /* A value the target cannot hold: named by tensor and element. */
    ck_err_clear(&err);
    int32_t ni[3];
    REQUIRE(ck_reader_open(ck, "n", CK_I32, &rd, &err) == 0, "%s", ck_err_msg(&err));
    ck_box three_el = { .ndim = 1, .len = { 3 } };
    rc = ck_reader_read(rd, &three_el, 0, sizeof ni, ni, &err);
    m = ck_err_msg(&err);
    CHECK(rc == -ERANGE && strstr(m, "tensor n ") && strstr(m, "element 2 ") &&
          strstr(m, "nan") && strstr(m, "i32"), "NaN as i32: %d, '%s'", rc, m);
    ck_reader_close(rd);

    ck_close(ck);
    free(big);
    free(want);
    free(got);
    tl_rmtree(root);
    if (tl_failures)
        return 1;
    printf("ok: bf16 -> f16, f32 -> i32 and f32 -> bf16 by value; c64 -> f32 refused; NaN "
           "-> i32 named\n");
    return 0;
}
