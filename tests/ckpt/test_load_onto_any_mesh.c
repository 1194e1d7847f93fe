/* A checkpoint saved on a 2x4 mesh loads onto 3, 1, 2x2, 8, 5 and 2x3 (with dim-1
 * sharding too): every rank's shard, and random byte ranges of random boxes, equal
 * the formula. For dim-0 layouts an unverified load reads each saved extent in one
 * coalesced piece (a verified one reads whole hash blocks instead, each once). */
#include "ck/load.h"
#include "ck/save.h"
#include "ckpt_testlib.h"
#include "model/layout.h"

static const uint64_t seed = 99;

static void save_2x4(const char *root)
{
    static const uint64_t shapes[4][2] = { { 1001, 37 }, { 3, 5 }, { 4096, 8 }, { 17, 19 } };
    static const ck_dtype dt[4] = { CK_F32, CK_BF16, CK_F64, CK_I16 };
    static const char *const pl[4] = { "R,S(0)", "R,S(0)", "R,S(0)", "S(1),S(0)" };
    tl_save_formula(root, "src", "2x4", "replicate,shard", shapes, dt, pl, 4, seed);
}

int main(void)
{
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "load");
    save_2x4(root);
    ck_err err = { 0 };
    ck_ckpt *ck, *raw;
    REQUIRE(ck_open(root, "src", &ck, &err) == 0, "%s", ck_err_msg(&err));
    REQUIRE(ck_open(root, "src", &raw, &err) == 0, "%s", ck_err_msg(&err));
    ck_load_verify(raw, false);
    static const struct { const char *mesh, *pl; } targets[] = {
        { "3", "S(0)" }, { "1", "S(0)" }, { "2x2", "R,S(0)" }, { "8", "S(0)" },
        { "5", "S(0)" }, { "2x3", "S(0),S(1)" }, { "4", "R" }, { "3", "S(1)" },
    };
    uint64_t checked = 0, ranges = 0;
    unsigned rng = 12345;
    for (uint32_t t = 0; t < 4; t++) {
        char tn[8];
        snprintf(tn, sizeof tn, "t%u", t);
        ck_reader *rd, *rraw;
        REQUIRE(ck_reader_open(ck, tn, CK_AS_SAVED, &rd, &err) == 0, "%s", ck_err_msg(&err));
        REQUIRE(ck_reader_open(raw, tn, CK_AS_SAVED, &rraw, &err) == 0, "%s",
                ck_err_msg(&err));
        const ck_tensor *ten = ck_reader_tensor(rd);
        size_t is = ck_dtype_size(ten->dtype);
        for (size_t k = 0; k < sizeof targets / sizeof targets[0]; k++) {
            ck_mesh m;
            ck_placement pl[CK_MAX_MESH_DIMS];
            REQUIRE(ck_mesh_parse(targets[k].mesh, NULL, &m, NULL) == 0, "mesh");
            REQUIRE(ck_placements_parse(targets[k].pl, m.ndim, 2, pl, NULL) == 0, "pl");
            for (uint64_t r = 0; r < ck_mesh_world(&m); r++) {
                uint32_t c[CK_MAX_MESH_DIMS];
                ck_box box;
                ck_mesh_coord(&m, r, c);
                ck_shard_box(2, ten->shape, &m, pl, c, &box);
                uint64_t bytes = ck_box_numel(&box) * is;
                uint8_t *want = tl_box_bytes(seed, t, is, 2, ten->shape, &box);
                uint8_t *got = malloc(bytes + 1);
                memset(got, 0xa5, bytes);
                int rc = ck_reader_read_shard(rd, &m, pl, r, got, &err);
                CHECK(rc == 0, "%s onto %s rank %llu: %s", tn, targets[k].mesh,
                      (unsigned long long)r, ck_err_msg(&err));
                CHECK(rc != 0 || memcmp(want, got, bytes) == 0, "%s onto %s (%s) rank %llu: "
                      "bytes differ", tn, targets[k].mesh, targets[k].pl, (unsigned long long)r);
                /* t0 and t2 were saved S(0): a dim-0 target reads each saved shard it
                 * meets in one piece (a short last chunk never splits it: <= 1 MiB). */
                if (rc == 0 && t != 3 && t != 1 && pl[m.ndim - 1].kind == CK_SHARD &&
                    pl[m.ndim - 1].dim == 0 && m.ndim == 1 && bytes <= (1u << 20)) {
                    uint64_t meets = 0;
                    for (uint64_t sr = 0; sr < 4; sr++) {
                        ck_box sb, x;
                        ck_mesh sm;
                        ck_placement sp[1];
                        ck_mesh_parse("4", NULL, &sm, NULL);
                        ck_placements_parse("S(0)", 1, 2, sp, NULL);
                        uint32_t sc[1] = { (uint32_t)sr };
                        ck_shard_box(2, ten->shape, &sm, sp, sc, &sb);
                        meets += ck__box_intersect(&sb, &box, &x);
                    }
                    memset(got, 0xa5, bytes);
                    CHECK(ck_reader_read_shard(rraw, &m, pl, r, got, &err) == 0 &&
                          memcmp(want, got, bytes) == 0, "%s onto %s rank %llu unverified: %s",
                          tn, targets[k].mesh, (unsigned long long)r, ck_err_msg(&err));
                    CHECK(ck_reader_last_reads(rraw) == meets, "%s onto %s rank %llu: %llu "
                          "reads for %llu saved shards", tn, targets[k].mesh,
                          (unsigned long long)r, (unsigned long long)ck_reader_last_reads(rraw),
                          (unsigned long long)meets);
                }
                /* A random byte range of the same box. */
                if (bytes >= is) {
                    uint64_t ne = bytes / is;
                    uint64_t a = (rng = rng * 1103515245 + 12345) % ne;
                    uint64_t n = 1 + (rng = rng * 1103515245 + 12345) % (ne - a);
                    memset(got, 0, bytes);
                    rc = ck_reader_read(rd, &box, a * is, n * is, got, &err);
                    CHECK(rc == 0 && memcmp(want + a * is, got, n * is) == 0,
                          "%s box range [%llu,+%llu) onto %s: %s", tn, (unsigned long long)a,
                          (unsigned long long)n, targets[k].mesh, rc ? ck_err_msg(&err) : "differs");
                    ranges++;
                }
                checked++;
                free(want);
                free(got);
            }
        }
        /* Misuse gets an error, not a crash. */
        uint8_t b[16];
        ck_box bad = { .ndim = 2, .off = { ten->shape[0], 0 }, .len = { 1, 1 } };
        CHECK(ck_reader_read(rd, &bad, 0, is, b, &err) == -EINVAL, "box outside accepted");
        ck_box one = { .ndim = 2, .off = { 0, 0 }, .len = { 1, 1 } };
        CHECK(is == 1 || ck_reader_read(rd, &one, 1, 1, b, &err) == -EINVAL, "partial element");
        ck_reader_close(rd);
        ck_reader_close(rraw);
    }
    ck_close(ck);
    ck_close(raw);
    tl_rmtree(root);
    if (tl_failures)
        return 1;
    printf("ok: %llu target shards and %llu random ranges equal the formula\n",
           (unsigned long long)checked, (unsigned long long)ranges);
    return 0;
}
