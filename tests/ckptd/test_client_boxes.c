/* Client API with box-list tensors (ck_decl_tensor_boxes, ck_client_box), embedded
 * and through a real ckptd: four ranks declare the same box lists (uneven rows with a
 * rank writing none, 2-D tiles with a rank writing two, a 0-D tensor, a placed tensor
 * among them) and give only their own boxes, from memory and as fills. The committed
 * checkpoint deep-verifies with the formula's bytes, loads as random boxes and onto a
 * mesh of 3 (ck/load.h), and both modes commit the same thing. A
 * rank that declares other boxes than the ranks before it is refused naming the
 * tensor; a box of another rank, a box that does not exist, a list that does not tile
 * (at the begin, which seals the declaration) and (connected) a declaration over
 * ckptd's message limit are refused by the client before anything is sent. */
#include "kc_testlib.h"

#define W 4

#define B2(o0, l0, o1, l1) { .ndim = 2, .off = { o0, o1 }, .len = { l0, l1 } }

static const uint64_t shape0[2] = { 21, 7 }, shape1[2] = { 9, 12 }, shape2[1] = { 0 },
                      shape3[1] = { 1000 };
static const ck_box boxes0[3] = { B2(0, 6, 0, 7), B2(6, 14, 0, 7), B2(20, 1, 0, 7) };
static const uint64_t writers0[3] = { 0, 2, 3 };           /* rank 1 writes none */
static const ck_box boxes1[4] = { B2(0, 5, 0, 6), B2(0, 5, 6, 6), B2(5, 4, 0, 6),
                                  B2(5, 4, 6, 6) };
static const uint64_t writers1[4] = { 1, 1, 2, 0 };        /* rank 1 writes two */
static const ck_box box2 = { .ndim = 0 };
static const uint64_t writer2 = 3;

typedef struct rank_src {
    ck_synth_src src[8];
    uint8_t *mem[8];
    int n;
} rank_src;

/* Reads box (or, box NULL, rank's part on mesh with pl) of tensor of the checkpoint
 * "boxes" into dst (len bytes) through the reader. */
static int load(const char *root, const char *tensor, const ck_box *box, const ck_mesh *mesh,
                const ck_placement *pl, uint64_t rank, void *dst, uint64_t len, ck_err *err)
{
    ck_ckpt *ck;
    ck_reader *rd;
    int r = ck_open(root, "boxes", &ck, err);
    if (r < 0)
        return r;
    if ((r = ck_reader_open(ck, tensor, CK_AS_SAVED, &rd, err)) == 0) {
        r = box ? ck_reader_read(rd, box, 0, len, dst, err)
                : ck_reader_read_shard(rd, mesh, pl, rank, dst, err);
        ck_reader_close(rd);
    }
    ck_close(ck);
    return r;
}

static ck_synth_src *next_src(rank_src *rs, uint32_t t, int ndim, const uint64_t *shape,
                              const ck_box *b, size_t is)
{
    ck_synth_src *x = &rs->src[rs->n];
    *x = (ck_synth_src){ .seed = KC_SEED, .tensor = t, .itemsize = is, .ndim = ndim, .box = *b };
    memcpy(x->shape, shape, (size_t)ndim * sizeof *shape);
    return x;
}

/* Every tensor, as every rank declares it; t1's box writers as given. */
static ck_decl *declared(const ck_mesh *mesh, const uint64_t *t1_writers)
{
    ck_err err = { 0 };
    ck_decl *d;
    ck_placement pl = { .kind = CK_SHARD, .dim = 0 };
    REQUIRE(ck_decl_new(&d, mesh, &err) == 0 &&
            ck_decl_tensor_boxes(d, "t0", CK_F32, 2, shape0, 3, boxes0, writers0, &err) == 0 &&
            ck_decl_tensor_boxes(d, "t1", CK_BF16, 2, shape1, 4, boxes1, t1_writers, &err) == 0 &&
            ck_decl_tensor_boxes(d, "t2", CK_I64, 0, shape2, 1, &box2, &writer2, &err) == 0 &&
            ck_decl_tensor(d, "t3", CK_I32, 1, shape3, &pl, &err) == 0, "%s", ck_err_msg(&err));
    return d;
}

/* Gives rank's own boxes. */
static void declare(ck_client_save *sv, uint64_t rank, const ck_mesh *mesh, rank_src *rs)
{
    ck_err err = { 0 };
    ck_placement pl = { .kind = CK_SHARD, .dim = 0 };
    for (uint32_t b = 0; b < 3; b++)
        if (writers0[b] == rank) {     /* from memory */
            ck_synth_src *x = next_src(rs, 0, 2, shape0, &boxes0[b], 4);
            rs->mem[rs->n++] = tl_box_bytes(KC_SEED, 0, 4, 2, shape0, &x->box);
            REQUIRE(ck_client_box(sv, "t0", b, rs->mem[rs->n - 1], &err) == 0, "%s",
                    ck_err_msg(&err));
        }
    for (uint32_t b = 0; b < 4; b++)
        if (writers1[b] == rank) {     /* as fills */
            ck_synth_src *x = next_src(rs, 1, 2, shape1, &boxes1[b], 2);
            rs->n++;
            REQUIRE(ck_client_box_fill(sv, "t1", b, ck_synth_fill, x, &err) == 0, "%s",
                    ck_err_msg(&err));
        }
    if (rank == writer2) {
        ck_synth_src *x = next_src(rs, 2, 0, shape2, &box2, 8);
        rs->n++;
        REQUIRE(ck_client_box_fill(sv, "t2", 0, ck_synth_fill, x, &err) == 0, "%s",
                ck_err_msg(&err));
    }
    uint32_t coord = (uint32_t)rank;
    ck_box mine;
    ck_shard_box(1, shape3, mesh, &pl, &coord, &mine);
    ck_synth_src *x = next_src(rs, 3, 1, shape3, &mine, 4);
    rs->n++;
    REQUIRE(ck_client_shard_fill(sv, "t3", ck_synth_fill, x, &err) == 0, "%s", ck_err_msg(&err));
}

static void misuse(ck_client *cl, const ck_mesh *mesh, const char *mode)
{
    ck_err err = { 0 };
    ck_client_save *sv;
    ck_decl *d;
    static const ck_box gap[2] = { B2(0, 6, 0, 7), B2(7, 14, 0, 7) };
    REQUIRE(ck_decl_new(&d, mesh, &err) == 0 &&
            ck_decl_tensor_boxes(d, "g", CK_F32, 2, shape0, 2, gap, writers0, &err) == 0,
            "%s", ck_err_msg(&err));
    CHECK(ck_client_begin(cl, &sv, "misuse", 1, d, 0, &kc_job, &err) < 0 &&
          strstr(ck_err_msg(&err), "g"), "%s: a list with a gap: '%s'", mode, ck_err_msg(&err));
    ck_decl_free(d);
    REQUIRE(ck_decl_new(&d, mesh, &err) == 0 &&
            ck_decl_tensor_boxes(d, "t0", CK_F32, 2, shape0, 3, boxes0, writers0, &err) == 0 &&
            ck_client_begin(cl, &sv, "misuse", 1, d, 0, &kc_job, &err) == 0,
            "%s", ck_err_msg(&err));
    ck_decl_free(d);
    static float data[256];
    CHECK(ck_client_box(sv, "t0", 1, data, &err) < 0 && strstr(ck_err_msg(&err), "rank 2"),
          "%s: giving rank 2's box from rank 0: '%s'", mode, ck_err_msg(&err));
    CHECK(ck_client_box(sv, "t0", 3, data, &err) < 0 && strstr(ck_err_msg(&err), "box 3"),
          "%s: a box past the list: '%s'", mode, ck_err_msg(&err));
    CHECK(ck_client_shard(sv, "t0", data, &err) < 0 && strstr(ck_err_msg(&err), "box"),
          "%s: a shard of a box list: '%s'", mode, ck_err_msg(&err));
    /* Box 0 is rank 0's and was never given. */
    CHECK(ck_client_submit(sv, &kc_copy, &err) < 0 && strstr(ck_err_msg(&err), "a box"),
          "%s: a submit without box 0: '%s'", mode, ck_err_msg(&err));
    ck_client_save_free(sv);
}

/* Connected: a declaration larger than ckptd's message limit (130000 boxes of an 8-D
 * tensor, 136 bytes each on the wire) is refused by the client before it is sent. */
static void too_big(ck_client *cl, const ck_mesh *mesh)
{
    enum { N = 130000 };
    uint64_t shape[8] = { N, 1, 1, 1, 1, 1, 1, 1 };
    ck_box *b = calloc(N, sizeof *b);
    uint64_t *w = calloc(N, sizeof *w);
    uint8_t *one = calloc(N, 1);
    REQUIRE(b && w && one, "oom");
    ck_err err = { 0 };
    ck_client_save *sv;
    ck_decl *d;
    for (uint32_t i = 0; i < N; i++) {
        b[i] = (ck_box){ .ndim = 8, .off = { i }, .len = { 1, 1, 1, 1, 1, 1, 1, 1 } };
        w[i] = 0;
    }
    REQUIRE(ck_decl_new(&d, mesh, &err) == 0 &&
            ck_decl_tensor_boxes(d, "big", CK_U8, 8, shape, N, b, w, &err) == 0 &&
            ck_client_begin(cl, &sv, "big", 1, d, 0, &kc_job, &err) == 0, "%s",
            ck_err_msg(&err));
    ck_decl_free(d);
    for (uint32_t i = 0; i < N; i++)
        ck_client_box(sv, "big", i, one + i, &err);
    CHECK(ck_client_submit(sv, &kc_copy, &err) == -EMSGSIZE && strstr(ck_err_msg(&err), "limit"),
          "connected: a 17 MB declaration: '%s'", ck_err_msg(&err));
    ck_client_save_free(sv);
    free(b);
    free(w);
    free(one);
}

/* Rank 2 declares t1 with its last two boxes' writers swapped. */
static void disagree(kc_env *e, const ck_mesh *mesh, const char *mode)
{
    ck_err err = { 0 };
    ck_client_save *sv0, *sv2;
    rank_src rs0 = { 0 };
    uint64_t other[4] = { 1, 1, 0, 2 };
    ck_decl *d0 = declared(mesh, writers1), *d2 = declared(mesh, other);
    REQUIRE(ck_client_begin(e->cl[0], &sv0, "disagree", 2, d0, 0, &kc_job, &err) == 0 &&
            ck_client_begin(e->cl[2], &sv2, "disagree", 2, d2, 2, &kc_job, &err) == 0, "%s",
            ck_err_msg(&err));
    ck_decl_free(d0);
    ck_decl_free(d2);
    declare(sv0, 0, mesh, &rs0);
    REQUIRE(ck_client_submit(sv0, &kc_copy, &err) == 0, "%s: %s", mode, ck_err_msg(&err));
    static uint8_t zeros[1 << 16];
    ck_client_box(sv2, "t0", 1, zeros, &err);
    ck_client_box(sv2, "t1", 3, zeros, &err);
    ck_client_shard(sv2, "t3", zeros, &err);
    int rc = ck_client_submit(sv2, &kc_copy, &err);
    if (rc == 0)
        rc = ck_client_wait(sv2, CK_CLIENT_COMMITTED, &err);
    CHECK(rc < 0 && strstr(ck_err_msg(&err), "t1") && strstr(ck_err_msg(&err), "rank 2") &&
          strstr(ck_err_msg(&err), "box writers"), "%s: rank 2 with other writers of t1: '%s'",
          mode, ck_err_msg(&err));
    ck_client_save_free(sv2);
    ck_client_save_free(sv0);
    for (int i = 0; i < rs0.n; i++)
        free(rs0.mem[i]);
}

static uint64_t run(bool connected)
{
    kc_env e;
    kc_open(&e, connected, "kcboxes", W, NULL, NULL);
    const char *mode = kc_mode(&e);
    ck_mesh mesh;
    REQUIRE(ck_mesh_parse("4", NULL, &mesh, NULL) == 0, "mesh");
    ck_err err = { 0 };
    ck_client_save *sv[W];
    rank_src rs[W] = { 0 };
    ck_decl *dl = declared(&mesh, writers1);
    for (uint64_t r = 0; r < W; r++) {
        REQUIRE(ck_client_begin(e.cl[r], &sv[r], "boxes", 9, dl, r, &kc_job, &err) == 0,
                "%s: %s", mode, ck_err_msg(&err));
        declare(sv[r], r, &mesh, &rs[r]);
        REQUIRE(ck_client_submit(sv[r], &kc_copy, &err) == 0, "%s: rank %llu: submit: %s", mode,
                (unsigned long long)r, ck_err_msg(&err));
    }
    ck_decl_free(dl);
    REQUIRE(ck_client_commit(sv[0], &err) == 0, "%s: commit: %s", mode, ck_err_msg(&err));
    for (uint64_t r = 0; r < W; r++) {
        REQUIRE(ck_client_wait(sv[r], CK_CLIENT_COMMITTED, &err) == 0, "%s: rank %llu: wait: %s", mode,
                (unsigned long long)r, ck_err_msg(&err));
        ck_client_save_free(sv[r]);
        for (int i = 0; i < rs[r].n; i++)
            free(rs[r].mem[i]);
    }
    CHECK(tl_verify_deep(e.root, "boxes", KC_SEED) == 0, "%s: the box-list save is bad", mode);

    /* Random boxes, and t1 onto a mesh of 3 with S(1). */
    unsigned rng = 99;
    static const struct { const char *name; int ndim; const uint64_t *shape; size_t is; } ts[] = {
        { "t0", 2, shape0, 4 }, { "t1", 2, shape1, 2 }, { "t3", 1, shape3, 4 },
    };
    for (int i = 0; i < 30; i++) {
        int t = i % 3;
        ck_box b = { .ndim = ts[t].ndim };
        for (int d = 0; d < b.ndim; d++) {
            b.off[d] = (uint64_t)rand_r(&rng) % ts[t].shape[d];
            b.len[d] = 1 + (uint64_t)rand_r(&rng) % (ts[t].shape[d] - b.off[d]);
        }
        uint64_t bytes = ck_box_numel(&b) * ts[t].is;
        uint32_t idx = (uint32_t)(ts[t].name[1] - '0');
        uint8_t *want = tl_box_bytes(KC_SEED, idx, ts[t].is, b.ndim, ts[t].shape, &b);
        uint8_t *got = malloc(bytes);
        int rc = load(e.root, ts[t].name, &b, NULL, NULL, 0, got, bytes, &err);
        CHECK(rc == 0 && memcmp(want, got, bytes) == 0, "%s: load_box %s: %s", mode,
              ts[t].name, rc ? ck_err_msg(&err) : "bytes differ from the formula");
        free(want);
        free(got);
    }
    ck_box outside = B2(20, 2, 0, 7);
    uint8_t small[64];
    CHECK(load(e.root, "t0", &outside, NULL, NULL, 0, small, 56, &err) < 0 &&
          strstr(ck_err_msg(&err), "outside"), "%s: a box outside t0: '%s'", mode,
          ck_err_msg(&err));
    ck_mesh m3;
    ck_placement s1[1] = { { .kind = CK_SHARD, .dim = 1 } };
    ck_mesh_parse("3", NULL, &m3, NULL);
    for (uint64_t r = 0; r < 3; r++) {
        uint32_t c = (uint32_t)r;
        ck_box b;
        ck_shard_box(2, shape1, &m3, s1, &c, &b);
        uint64_t bytes = ck_box_numel(&b) * 2;
        uint8_t *want = tl_box_bytes(KC_SEED, 1, 2, 2, shape1, &b), *got = malloc(bytes);
        CHECK(load(e.root, "t1", NULL, &m3, s1, r, got, bytes, &err) == 0 &&
              memcmp(want, got, bytes) == 0, "%s: t1 onto 3 (S(1)) rank %llu: %s", mode,
              (unsigned long long)r, ck_err_msg(&err));
        free(want);
        free(got);
    }
    misuse(e.cl[0], &mesh, mode);
    if (connected)
        too_big(e.cl[0], &mesh);
    disagree(&e, &mesh, mode);
    uint64_t h = kc_digest(e.root, "boxes");
    kc_close(&e);
    kc_remove(&e);
    return h;
}

int main(void)
{
    return kc_both_modes(run, true, "box-list tensors save through the client in both modes "
                         "with the formula's bytes, load as any box and onto 3 ranks; "
                         "disagreeing ranks and misuse refused");
}
