/* Client API, ck_client_load onto another mesh, embedded and through ckptd: a save of
 * four ranks on a 2x2 mesh (R,S(0)) with uneven shapes (rows that do not divide by
 * the shard count, 1-D, 3-D, four dtypes) loads onto 3 (S(0), and S(1)), 1 (R) and
 * 2x3 (S(0),S(1)) meshes: every target rank's buffer equals the formula's bytes of
 * its box. A tensor or checkpoint that does not exist, a buffer of the wrong size, a
 * rank outside the target mesh and a placement the tensor cannot take are refused
 * with a clear error, and dst is not written. Both modes load the same bytes. */
#include "kc_testlib.h"

static const kc_tensor tensors[] = {
    { CK_F32, 2, { 1001, 37 }, "R,S(0)" },
    { CK_BF16, 2, { 3, 5 }, "R,S(0)" },
    { CK_F64, 1, { 7 }, "R,S(0)" },
    { CK_I16, 3, { 17, 19, 3 }, "R,S(0)" },
};
#define NT 4

typedef struct target {
    const char *mesh;
    const char *pl[3];         /* for tensors of 1, 2 and 3 dims */
} target;

static const target targets[] = {
    { "3", { "S(0)", "S(0)", "S(0)" } },
    { "3", { "S(0)", "S(1)", "S(1)" } },
    { "1", { "R", "R", "R" } },
    { "2x3", { "R,S(0)", "S(0),S(1)", "S(0),S(1)" } },
};
#define NTARGETS 4

static uint64_t run(bool connected)
{
    kc_env e;
    kc_open(&e, connected, "kcload", 4, NULL, NULL);
    const char *mode = kc_mode(&e);
    ck_mesh mesh;
    REQUIRE(ck_mesh_parse("2x2", NULL, &mesh, NULL) == 0, "mesh");
    ck_err err = { 0 };
    ck_client_save *sv[4];
    kc_part parts[4] = { 0 };
    for (uint64_t r = 0; r < 4; r++) {
        REQUIRE(ck_client_begin(e.cl[r], &sv[r], "src", 11, &mesh, r, 4, &kc_job, &err) == 0,
                "%s: begin: %s", mode, ck_err_msg(&err));
        kc_declare(sv[r], &mesh, r, tensors, NT, &parts[r], true);
        REQUIRE(ck_client_save_async(sv[r], &err) == 0, "%s: rank %llu: save_async: %s", mode,
                (unsigned long long)r, ck_err_msg(&err));
    }
    REQUIRE(ck_client_commit(sv[0], &err) == 0, "%s: commit: %s", mode, ck_err_msg(&err));
    for (uint64_t r = 0; r < 4; r++) {
        REQUIRE(ck_client_wait(sv[r], &err) == 0, "%s: rank %llu: wait: %s", mode,
                (unsigned long long)r, ck_err_msg(&err));
        ck_client_save_free(sv[r]);
        kc_part_free(&parts[r]);
    }
    CHECK(tl_verify_deep(e.root, "src", KC_SEED) == 0, "%s: the saved checkpoint is bad", mode);

    uint64_t h = 0xcbf29ce484222325ull, loads = 0;
    for (size_t k = 0; k < NTARGETS; k++) {
        ck_mesh m;
        REQUIRE(ck_mesh_parse(targets[k].mesh, NULL, &m, NULL) == 0, "mesh %s", targets[k].mesh);
        for (uint32_t t = 0; t < NT; t++) {
            char tn[16];
            snprintf(tn, sizeof tn, "t%u", t);
            const kc_tensor *ts = &tensors[t];
            ck_placement pl[CK_MAX_MESH_DIMS];
            REQUIRE(ck_placements_parse(targets[k].pl[ts->ndim - 1], m.ndim, ts->ndim, pl,
                                        &err) == 0, "%s", ck_err_msg(&err));
            size_t is = ck_dtype_size(ts->dtype);
            for (uint64_t r = 0; r < ck_mesh_world(&m); r++) {
                uint32_t c[CK_MAX_MESH_DIMS];
                ck_box box;
                ck_mesh_coord(&m, r, c);
                ck_shard_box(ts->ndim, ts->shape, &m, pl, c, &box);
                uint64_t bytes = ck_box_numel(&box) * is;
                uint8_t *want = tl_box_bytes(KC_SEED, t, is, ts->ndim, ts->shape, &box);
                uint8_t *got = malloc(bytes + 1);
                REQUIRE(got, "oom");
                memset(got, 0xa5, bytes);
                /* Any rank's client may load any part: load is a read of the root. */
                int rc = ck_client_load(e.cl[r % 4], "src", tn, &m, pl, r, CK_AS_SAVED, got,
                                        bytes, &err);
                CHECK(rc == 0, "%s: %s onto %s (%s) rank %llu: %s", mode, tn, targets[k].mesh,
                      targets[k].pl[ts->ndim - 1], (unsigned long long)r, ck_err_msg(&err));
                CHECK(rc != 0 || memcmp(want, got, bytes) == 0, "%s: %s onto %s (%s) rank "
                      "%llu: the loaded bytes differ from the formula", mode, tn,
                      targets[k].mesh, targets[k].pl[ts->ndim - 1], (unsigned long long)r);
                kc_fnv(&h, got, bytes);
                loads++;
                free(want);
                free(got);
            }
        }
    }
    CHECK(loads == 4 * (3 + 3 + 1 + 6), "%s: %llu loads", mode, (unsigned long long)loads);

    /* Refusals: clear, and dst untouched. */
    ck_mesh m3;
    ck_placement pl3[CK_MAX_MESH_DIMS], bad[CK_MAX_MESH_DIMS];
    ck_mesh_parse("3", NULL, &m3, NULL);
    ck_placements_parse("S(0)", 1, 2, pl3, NULL);
    bad[0] = (ck_placement){ .kind = CK_SHARD, .dim = 5 };
    uint8_t buf[64 * 1024];
    uint64_t rows = 1001 / 3 + 1, need = rows * 37 * 4;     /* t0, rank 0 of 3 */
    static const struct {
        const char *why, *ckpt, *tensor;
        int ph;                /* 0: S(0), 1: S(5) */
        uint64_t rank, len;
        const char *says;
    } bads[] = {
        { "no such tensor", "src", "nope", 0, 0, 0, "nope" },
        { "no such checkpoint", "absent", "t0", 0, 0, 0, "absent" },
        { "a buffer one element short", "src", "t0", 0, 0, 1, NULL },
        { "a buffer one element long", "src", "t0", 0, 0, 2, NULL },
        { "an empty buffer", "src", "t0", 0, 0, 3, NULL },
        { "rank 3 of a mesh of 3", "src", "t0", 0, 3, 0, "rank 3" },
        { "S(5) on a 2-D tensor", "src", "t0", 1, 0, 0, "t0" },
    };
    REQUIRE(need + 4 <= sizeof buf, "buffer");
    for (size_t i = 0; i < sizeof bads / sizeof *bads; i++) {
        uint64_t len = bads[i].len == 1 ? need - 4 : bads[i].len == 2 ? need + 4
                     : bads[i].len == 3 ? 0 : need;
        memset(buf, 0xa5, sizeof buf);
        memset(&err, 0, sizeof err);
        int rc = ck_client_load(e.cl[0], bads[i].ckpt, bads[i].tensor, &m3,
                                bads[i].ph ? bad : pl3, bads[i].rank, CK_AS_SAVED, buf, len,
                                &err);
        const char *msg = ck_err_msg(&err);
        CHECK(rc < 0, "%s: load with %s succeeded", mode, bads[i].why);
        CHECK(rc >= 0 || (msg[0] && (!bads[i].says || strstr(msg, bads[i].says))),
              "%s: load with %s: the error does not say so: \"%s\"", mode, bads[i].why, msg);
        if (bads[i].len) {
            char nb[32];
            snprintf(nb, sizeof nb, "%llu", (unsigned long long)need);
            CHECK(rc >= 0 || strstr(msg, nb), "%s: load with %s: the error does not name the "
                  "part's %s bytes: \"%s\"", mode, bads[i].why, nb, msg);
        }
        bool untouched = true;
        for (size_t b = 0; b < sizeof buf; b++)
            untouched &= buf[b] == 0xa5;
        CHECK(untouched, "%s: load with %s wrote into the buffer", mode, bads[i].why);
    }

    kc_close(&e);
    kc_remove(&e);
    return h;
}

int main(void)
{
    return kc_both_modes(run, false, "a 2x2 (R,S(0)) save loads onto 3, 1 and 2x3 meshes "
                         "with the formula's bytes in both modes; bad tensor, checkpoint, "
                         "buffer size, rank and placement refused");
}
