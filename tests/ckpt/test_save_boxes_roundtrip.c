/* Tensors stored as box lists (format 1.1), as DCP's planner cuts them: uneven dim-0
 * chunks, 2-D tiles with a rank writing several, a rank writing none, an empty box,
 * a 0-D tensor, a new dtype and an escaped name, beside a placed tensor. The
 * checkpoint deep-verifies, every box holds the formula, and every tensor loads onto
 * other meshes and as random boxes bit for bit. */
#include "ck/load.h"
#include "ck/save.h"
#include "ckpt_testlib.h"

static const uint64_t seed = 7;

#define MAXB 4

typedef struct tcase {
    const char *name;           /* "tN...": formula index N */
    ck_dtype dt;
    int ndim;
    uint64_t shape[2];
    uint32_t n;                 /* 0: placed, S(0) */
    ck_box box[MAXB];
    uint64_t writer[MAXB];
} tcase;

#define B1(o, l) { .ndim = 1, .off = { o }, .len = { l } }
#define B2(o0, l0, o1, l1) { .ndim = 2, .off = { o0, o1 }, .len = { l0, l1 } }

static const tcase cases[] = {
    /* HSDP-like: uneven rows, rank 3 writes nothing */
    { "t0", CK_F32, 2, { 20, 6 }, 3, { B2(0, 3, 0, 6), B2(3, 6, 0, 6), B2(9, 11, 0, 6) },
      { 2, 0, 1 } },
    /* TP + FSDP tiles, rank 0 writes two */
    { "t1", CK_BF16, 2, { 7, 10 }, 4,
      { B2(0, 4, 0, 5), B2(0, 4, 5, 5), B2(4, 3, 0, 5), B2(4, 3, 5, 5) }, { 0, 1, 2, 0 } },
    /* 0-D: the optimizer's step */
    { "t2", CK_I64, 0, { 0 }, 1, { { .ndim = 0 } }, { 3 } },
    /* placed, between box lists */
    { "t3", CK_F32, 2, { 9, 4 }, 0, { { 0 } }, { 0 } },
    /* an empty box */
    { "t4", CK_F16, 1, { 5 }, 2, { B1(0, 5), B1(5, 0) }, { 1, 2 } },
    /* a 1.1 dtype and an escaped name ("t5/x"), both boxes on one rank */
    { "t5%2Fx", CK_U16, 1, { 8 }, 2, { B1(4, 4), B1(0, 4) }, { 3, 3 } },
};
#define NCASES (sizeof cases / sizeof cases[0])

static ck_synth_src src[NCASES][MAXB];
static ck_mesh mesh4;

static void declare(ck_decl *d, size_t i)
{
    const tcase *c = &cases[i];
    ck_err err = { 0 };
    if (!c->n) {
        ck_placement pl = { .kind = CK_SHARD, .dim = 0 };
        REQUIRE(ck_decl_tensor(d, c->name, c->dt, c->ndim, c->shape, &pl, &err) == 0, "%s",
                ck_err_msg(&err));
        return;
    }
    REQUIRE(ck_decl_tensor_boxes(d, c->name, c->dt, c->ndim, c->shape, c->n, c->box, c->writer,
                                 &err) == 0, "%s", ck_err_msg(&err));
}

static void save(const char *root)
{
    ck_err err = { 0 };
    ck_save *s;
    ck_decl *d;
    REQUIRE(ck_decl_new(&d, &mesh4, &err) == 0, "%s", ck_err_msg(&err));
    for (size_t i = 0; i < NCASES; i++)
        declare(d, i);
    REQUIRE(ck_save_begin(&s, root, "boxes", 3, d, NULL, &err) == 0, "%s", ck_err_msg(&err));
    ck_decl_free(d);
    for (size_t i = 0; i < NCASES; i++) {
        const tcase *c = &cases[i];
        size_t is = ck_dtype_size(c->dt);
        uint32_t n = c->n ? c->n : 4;
        for (uint32_t b = 0; b < n; b++) {
            ck_synth_src *x = &src[i][b];
            *x = (ck_synth_src){ .seed = seed, .tensor = (uint32_t)strtoul(c->name + 1, NULL, 10),
                                 .itemsize = is, .ndim = c->ndim,
                                 .shape = { c->shape[0], c->shape[1] } };
            if (c->n) {
                x->box = c->box[b];
                REQUIRE(ck_save_box_fill(s, c->name, b, ck_synth_fill, x, &err) == 0, "%s",
                        ck_err_msg(&err));
            } else {
                uint32_t coord = b;
                ck_placement pl = { .kind = CK_SHARD, .dim = 0 };
                ck_shard_box(c->ndim, c->shape, &mesh4, &pl, &coord, &x->box);
                REQUIRE(ck_save_shard_fill(s, c->name, b, ck_synth_fill, x, &err) == 0, "%s",
                        ck_err_msg(&err));
            }
        }
    }
    CHECK(!ck_save_writes(s, "t0", 3) && ck_save_writes(s, "t0", 2) &&
          ck_save_writes(s, "t1", 0), "ck_save_writes for box lists");
    REQUIRE(ck_save_commit(s, NULL, &err) == 0, "%s", ck_err_msg(&err));
}

/* The tensor's part on every rank of mesh m with placements pl, and random boxes. */
static void load_onto(ck_ckpt *ck, size_t i, const char *mspec, const char *plspec,
                      unsigned *rng)
{
    const tcase *c = &cases[i];
    ck_err err = { 0 };
    ck_mesh m;
    ck_placement pl[CK_MAX_MESH_DIMS];
    REQUIRE(ck_mesh_parse(mspec, NULL, &m, NULL) == 0, "mesh %s", mspec);
    REQUIRE(ck_placements_parse(plspec, m.ndim, -1, pl, NULL) == 0, "pl %s", plspec);
    /* S(d) past the tensor's dims: replicate on that mesh dim instead */
        for (int d = 0; d < m.ndim; d++)
            if (pl[d].kind == CK_SHARD && pl[d].dim >= c->ndim)
                pl[d] = (ck_placement){ .kind = CK_REPLICATE };
    ck_reader *rd;
    REQUIRE(ck_reader_open(ck, c->name, CK_AS_SAVED, &rd, &err) == 0, "%s", ck_err_msg(&err));
    size_t is = ck_dtype_size(c->dt);
    uint32_t idx = (uint32_t)strtoul(c->name + 1, NULL, 10);
    for (uint64_t r = 0; r < ck_mesh_world(&m) + 4; r++) {
        ck_box box;
        if (r < ck_mesh_world(&m)) {
            uint32_t coord[CK_MAX_MESH_DIMS];
            ck_mesh_coord(&m, r, coord);
            ck_shard_box(c->ndim, c->shape, &m, pl, coord, &box);
        } else {   /* a random box, as a DCP read item asks */
            box.ndim = c->ndim;
            for (int d = 0; d < c->ndim; d++) {
                box.off[d] = (uint64_t)rand_r(rng) % (c->shape[d] + 1);
                box.len[d] = (uint64_t)rand_r(rng) % (c->shape[d] - box.off[d] + 1);
            }
        }
        uint64_t bytes = ck_box_numel(&box) * is;
        uint8_t *want = tl_box_bytes(seed, idx, is, c->ndim, c->shape, &box);
        uint8_t *got = malloc(bytes + 1);
        REQUIRE(got, "oom");
        memset(got, 0xa5, bytes);
        int rc = r < ck_mesh_world(&m) ? ck_reader_read_shard(rd, &m, pl, r, got, &err)
                                       : ck_reader_read(rd, &box, 0, bytes, got, &err);
        CHECK(rc == 0, "%s onto %s: %s", c->name, mspec, ck_err_msg(&err));
        CHECK(rc != 0 || memcmp(want, got, bytes) == 0, "%s onto %s (%s) part %llu: bytes "
              "differ from the formula", c->name, mspec, plspec, (unsigned long long)r);
        free(want);
        free(got);
    }
    ck_reader_close(rd);
}

/* A declaration that must be refused, with a message holding `want`. */
static void refuse(const char *root, const char *why, int ndim, const uint64_t *shape,
                   uint32_t n, const ck_box *b, const uint64_t *w, const char *want)
{
    ck_err err = { 0 };
    ck_save *s = NULL;
    ck_decl *d;
    /* What the tensor alone says is refused as it is declared, the tiling by the seal. */
    REQUIRE(ck_decl_new(&d, &mesh4, &err) == 0, "%s", ck_err_msg(&err));
    int rc = ck_decl_tensor_boxes(d, "tb", CK_F32, ndim, shape, n, b, w, &err);
    if (rc == 0)
        rc = ck_save_begin(&s, root, "refused", 1, d, NULL, &err);
    CHECK(rc < 0 && strstr(ck_err_msg(&err), want) && strstr(ck_err_msg(&err), "tb"),
          "%s: rc %d, message '%s' (want '%s' and the tensor's name)", why, rc,
          ck_err_msg(&err), want);
    ck_decl_free(d);
    ck_save_abort(s);
}

static void misuse(const char *root)
{
    uint64_t sh[2] = { 8, 8 }, w[3] = { 0, 1, 2 }, far[2] = { 0, 4 };
    ck_box ov[2] = { B2(0, 5, 0, 8), B2(4, 4, 0, 8) };
    ck_box gap[2] = { B2(0, 4, 0, 8), B2(5, 3, 0, 8) };
    ck_box out[2] = { B2(0, 4, 0, 8), B2(4, 5, 0, 8) };
    ck_box tiles[2] = { B2(0, 8, 0, 4), B2(0, 8, 4, 4) };
    ck_box rank1[1] = { B1(0, 8) };
    refuse(root, "overlap", 2, sh, 2, ov, w, "overlap");
    refuse(root, "gap", 2, sh, 2, gap, w, "gap");
    refuse(root, "outside", 2, sh, 2, out, w, "outside");
    refuse(root, "writer outside the mesh", 2, sh, 2, tiles, far, "rank 4");
    refuse(root, "a box with other dims", 2, sh, 1, rank1, w, "dims");
    refuse(root, "absurd count", 2, sh, CK_MAX_BOXES + 1, tiles, w, "boxes");

    ck_err err = { 0 };
    ck_save *s;
    ck_decl *d;
    ck_placement pl = { .kind = CK_SHARD, .dim = 0 };
    REQUIRE(ck_decl_new(&d, &mesh4, &err) == 0 &&
            ck_decl_tensor_boxes(d, "tb", CK_F32, 2, sh, 2, tiles, w, &err) == 0 &&
            ck_decl_tensor(d, "tp", CK_F32, 2, sh, &pl, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(ck_decl_tensor_boxes(d, "bad%2f", CK_F32, 2, sh, 2, tiles, w, &err) == -EINVAL,
          "a lowercase escape is refused");
    REQUIRE(ck_save_begin(&s, root, "misuse", 1, d, NULL, &err) == 0, "%s", ck_err_msg(&err));
    ck_decl_free(d);
    static float data[64];
    CHECK(ck_save_shard(s, "tb", 0, data, &err) == -EINVAL && strstr(ck_err_msg(&err), "box"),
          "ck_save_shard on a box list: %s", ck_err_msg(&err));
    CHECK(ck_save_box(s, "tp", 0, data, &err) == -EINVAL && strstr(ck_err_msg(&err), "tp"),
          "ck_save_box on a placed tensor: %s", ck_err_msg(&err));
    CHECK(ck_save_box(s, "tb", 2, data, &err) == -EINVAL && strstr(ck_err_msg(&err), "box 2"),
          "ck_save_box past the list: %s", ck_err_msg(&err));
    /* Box 1 is never given: the commit names it and publishes nothing. */
    for (uint64_t r = 0; r < 4; r++)
        ck_save_shard(s, "tp", r, data, &err);
    REQUIRE(ck_save_box(s, "tb", 0, data, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(ck_save_commit(s, NULL, &err) < 0 && strstr(ck_err_msg(&err), "tb"),
          "a commit without box 1: '%s'", ck_err_msg(&err));
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/misuse", root);
    CHECK(access(path, F_OK) != 0, "a failed save left %s", path);
}

int main(void)
{
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "boxes");
    REQUIRE(ck_mesh_parse("4", NULL, &mesh4, NULL) == 0, "mesh");
    save(root);
    CHECK(tl_verify_deep(root, "boxes", seed) == 0, "the box-list checkpoint does not verify");

    ck_err err = { 0 };
    ck_ckpt *ck;
    REQUIRE(ck_open(root, "boxes", &ck, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(ck_get_info(ck)->major == 1 && ck_get_info(ck)->minor == 1, "format %u.%u, want 1.1",
          ck_get_info(ck)->major, ck_get_info(ck)->minor);
    ck_tensor t;
    REQUIRE(ck_tensor_get(ck, "t1", &t, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(ck_tensor_is_boxes(&t) && t.n_shards == 4, "t1 reads back as a list of 4 boxes");
    REQUIRE(ck_tensor_get(ck, "t3", &t, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(!ck_tensor_is_boxes(&t), "t3 reads back placed");
    unsigned rng = 4242;
    static const struct { const char *mesh, *pl; } targets[] = {
        { "3", "S(0)" }, { "1", "R" }, { "2x2", "S(0),S(1)" }, { "5", "S(1)" }, { "4", "R" },
    };
    for (size_t i = 0; i < NCASES; i++)
        for (size_t k = 0; k < sizeof targets / sizeof targets[0]; k++)
            load_onto(ck, i, targets[k].mesh, targets[k].pl, &rng);
    ck_close(ck);

    /* A 0-D box list declared with no shape array at all, as a binding may pass it. */
    ck_save *s;
    ck_box scalar = { .ndim = 0 };
    uint64_t w3 = 3, value = 0x1122334455667788ull, back = 0;
    ck_decl *d;
    REQUIRE(ck_decl_new(&d, &mesh4, &err) == 0 &&
            ck_decl_tensor_boxes(d, "step", CK_I64, 0, NULL, 1, &scalar, &w3, &err) == 0 &&
            ck_save_begin(&s, root, "scalar", 1, d, NULL, &err) == 0 &&
            ck_save_box(s, "step", 0, &value, &err) == 0 &&
            ck_save_commit(s, NULL, &err) == 0, "%s", ck_err_msg(&err));
    ck_decl_free(d);
    ck_reader *rd;
    REQUIRE(ck_open(root, "scalar", &ck, &err) == 0 &&
            ck_reader_open(ck, "step", CK_AS_SAVED, &rd, &err) == 0,
            "%s", ck_err_msg(&err));
    CHECK(ck_reader_read(rd, &scalar, 0, 8, &back, &err) == 0 && back == value,
          "the 0-D box reads back %llx: %s", (unsigned long long)back, ck_err_msg(&err));
    ck_reader_close(rd);
    ck_close(ck);
    misuse(root);
    tl_rmtree(root);
    return tl_failures ? 1 : 0;
}
