/* ck_load_many reads a rank's boxes as one batch: onto several meshes, with tensors
 * interleaved and destinations at every alignment (page-aligned, a few bytes off, in
 * one buffer back to back), every box equals what ck_reader_read gives for it alone
 * and the formula. Boxes near a data file's end (where the aligned read would pass it)
 * and empty boxes too; a wrong length or a box outside the tensor is refused, naming
 * the tensor. */
#include "ck/load.h"
#include "ck/save.h"
#include "ckpt_testlib.h"

static const uint64_t seed = 5;
static const uint64_t shapes[3][2] = { { 1001, 37 }, { 3, 5 }, { 4099, 9 } };
static const ck_dtype dt[3] = { CK_F32, CK_BF16, CK_F64 };

static void save(const char *root)
{
    static const char *const pl[3] = { "S(0)", "S(0)", "S(0)" };
    tl_save_formula(root, "src", "4", NULL, shapes, dt, pl, 3, seed);
}

int main(void)
{
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "loadmany");
    save(root);
    ck_err err = { 0 };
    ck_ckpt *ck;
    REQUIRE(ck_open(root, "src", &ck, &err) == 0, "%s", ck_err_msg(&err));
    static const struct { const char *mesh, *pl; } targets[] = {
        { "3", "S(0)" }, { "1", "S(0)" }, { "2x3", "S(0),S(1)" }, { "5", "S(0)" },
        { "7", "S(1)" },
    };
    uint64_t boxes = 0;
    for (size_t k = 0; k < sizeof targets / sizeof targets[0]; k++) {
        ck_mesh m;
        ck_placement pl[CK_MAX_MESH_DIMS];
        REQUIRE(ck_mesh_parse(targets[k].mesh, NULL, &m, NULL) == 0, "mesh");
        REQUIRE(ck_placements_parse(targets[k].pl, m.ndim, 2, pl, NULL) == 0, "pl");
        for (uint64_t r = 0; r < ck_mesh_world(&m); r++) {
            /* One rank's load: every tensor's box, tensors interleaved (t0 twice). */
            ck_load_item it[4] = { { 0 } };   /* dtype 0: as saved */
            uint8_t *want[4], *single[4];
            uint64_t total = 0, len[4];
            static const uint32_t order[4] = { 0, 2, 1, 0 };
            for (int i = 0; i < 4; i++) {
                uint32_t t = order[i], c[CK_MAX_MESH_DIMS];
                ck_mesh_coord(&m, r, c);
                ck_shard_box(2, shapes[t], &m, pl, c, &it[i].box);
                len[i] = ck_box_numel(&it[i].box) * ck_dtype_size(dt[t]);
                want[i] = tl_box_bytes(seed, t, ck_dtype_size(dt[t]), 2, shapes[t], &it[i].box);
                total += len[i] + 8;
            }
            /* One buffer, each destination 0..7 bytes past where the last one ended:
             * rarely 4 KiB aligned, as tensors in memory are. */
            uint8_t *buf = aligned_alloc(4096, ((total + 4096) / 4096 + 1) * 4096);
            uint64_t at = (r % 3 == 0) ? 0 : 3;
            for (int i = 0; i < 4; i++) {
                char *tn = malloc(8);
                snprintf(tn, 8, "t%u", order[i]);
                it[i].tensor = tn;
                it[i].dst = buf + at;
                it[i].len = len[i];
                at += len[i] + (uint64_t)i + 1;
            }
            memset(buf, 0x5a, at);
            int rc = ck_load_many(ck, it, 4, &err);
            CHECK(rc == 0, "onto %s rank %llu: %s", targets[k].mesh, (unsigned long long)r,
                  ck_err_msg(&err));
            for (int i = 0; i < 4 && rc == 0; i++) {
                single[i] = malloc(len[i] + 1);
                ck_reader *rd;
                REQUIRE(ck_reader_open(ck, it[i].tensor, CK_AS_SAVED, &rd, &err) == 0, "%s",
                        ck_err_msg(&err));
                CHECK(ck_reader_read(rd, &it[i].box, 0, len[i], single[i], &err) == 0, "%s",
                      ck_err_msg(&err));
                ck_reader_close(rd);
                CHECK(memcmp(it[i].dst, single[i], len[i]) == 0 &&
                      memcmp(it[i].dst, want[i], len[i]) == 0,
                      "onto %s (%s) rank %llu: item %d (%s) differs from its single read",
                      targets[k].mesh, targets[k].pl, (unsigned long long)r, i, it[i].tensor);
                free(single[i]);
                boxes++;
            }
            for (int i = 0; i < 4; i++) {
                free(want[i]);
                free((char *)it[i].tensor);
            }
            free(buf);
        }
    }
    /* Misuse: a wrong length, a box outside the tensor. */
    uint8_t b[64];
    ck_load_item bad = { .tensor = "t1", .box = { .ndim = 2, .off = { 0, 0 }, .len = { 1, 1 } },
                         .dst = b, .len = 3 };
    CHECK(ck_load_many(ck, &bad, 1, &err) == -EINVAL && strstr(ck_err_msg(&err), "t1"),
          "a wrong length was not refused naming the tensor: %s", ck_err_msg(&err));
    bad = (ck_load_item){ .tensor = "t0", .box = { .ndim = 2, .off = { 1001, 0 },
                          .len = { 1, 1 } }, .dst = b, .len = 4 };
    CHECK(ck_load_many(ck, &bad, 1, &err) == -EINVAL, "a box outside t0 was read");
    bad = (ck_load_item){ .tensor = "nope", .box = { .ndim = 2 }, .dst = b, .len = 0 };
    CHECK(ck_load_many(ck, &bad, 1, &err) < 0 && strstr(ck_err_msg(&err), "nope"),
          "an unknown tensor was not refused by name: %s", ck_err_msg(&err));
    ck_close(ck);
    tl_rmtree(root);
    if (tl_failures)
        return 1;
    printf("ok: %llu boxes of batched loads equal their single reads and the formula\n",
           (unsigned long long)boxes);
    return 0;
}
