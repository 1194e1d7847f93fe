/* Saves tensors of many shapes, dtypes, meshes and placements (uneven, empty shards,
 * 0-D, zero-length dims), from memory and from fill callbacks, then reopens the
 * checkpoint and checks every byte of every shard against the formula, the metadata,
 * the blobs, deep verification, the catalog, and that replicas share the writing. */
#include "ck/catalog.h"
#include "ck/save.h"
#include "ckpt_testlib.h"

typedef struct tdef {
    ck_dtype dtype;
    int ndim;
    uint64_t shape[3];
    const char *pl;
} tdef;

typedef struct scenario {
    const char *mesh, *dims;
    tdef t[8];
    int nt;
} scenario;

static const scenario scenarios[] = {
    { "4", NULL, { { CK_F32, 2, { 10, 3 }, "S(0)" }, { CK_F32, 2, { 3, 5 }, "S(0)" },
                   { CK_BF16, 2, { 0, 7 }, "S(0)" }, { CK_F64, 0, { 0 }, "R" },
                   { CK_I8, 1, { 1 }, "S(0)" }, { CK_U8, 1, { 12289 }, "S(0)" },
                   { CK_F16, 3, { 5, 4, 3 }, "S(1)" } }, 7 },
    { "2x3", "replicate,shard", { { CK_F32, 2, { 64, 33 }, "R,S(0)" },
                                  { CK_BF16, 2, { 7, 9 }, "S(0),S(1)" },
                                  { CK_I64, 2, { 5, 5 }, "R,R" },
                                  { CK_I32, 2, { 4000, 3 }, "R,S(0)" },
                                  { CK_BOOL, 1, { 100 }, "S(0),S(0)" } }, 5 },
    { "2x2x2", "a,b,c", { { CK_I16, 3, { 9, 8, 7 }, "S(0),R,S(2)" },
                          { CK_F32, 2, { 3000, 5 }, "R,S(0),R" } }, 2 },
};

int main(void)
{
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "roundtrip");
    const uint64_t seed = 0x5eed;
    for (size_t si = 0; si < sizeof scenarios / sizeof scenarios[0]; si++) {
        const scenario *sc = &scenarios[si];
        ck_err err = { 0 };
        ck_mesh mesh;
        REQUIRE(ck_mesh_parse(sc->mesh, sc->dims, &mesh, &err) == 0, "%s", ck_err_msg(&err));
        uint64_t world = ck_mesh_world(&mesh);
        char name[32];
        snprintf(name, sizeof name, "rt-%zu", si);
        /* Tiny blocks and I/Os: many blocks per file, several I/Os per block. */
        ck_save_opts so = { .block_size = 16384, .io_size = 4096, .mem_limit = 65536 };
        ck_save *s;
        ck_decl *dc;
        REQUIRE(ck_decl_new(&dc, &mesh, &err) == 0, "%s", ck_err_msg(&err));
        for (int i = 0; i < sc->nt; i++) {
            const tdef *td = &sc->t[i];
            ck_placement pl[CK_MAX_MESH_DIMS];
            char tn[16];
            snprintf(tn, sizeof tn, "t%d", i);
            REQUIRE(ck_placements_parse(td->pl, mesh.ndim, td->ndim, pl, &err) == 0, "%s",
                    ck_err_msg(&err));
            REQUIRE(ck_decl_tensor(dc, tn, td->dtype, td->ndim, td->shape, pl, &err) == 0, "%s",
                    ck_err_msg(&err));
        }
        REQUIRE(ck_save_begin(&s, root, name, 100 + si, dc, &so, &err) == 0, "%s",
                ck_err_msg(&err));
        ck_decl_free(dc);
        uint8_t *bufs[8 * 8] = { 0 };
        ck_synth_src gens[8 * 8];
        int nb = 0;
        for (int i = 0; i < sc->nt; i++) {
            const tdef *td = &sc->t[i];
            ck_placement pl[CK_MAX_MESH_DIMS];
            char tn[16];
            snprintf(tn, sizeof tn, "t%d", i);
            REQUIRE(ck_placements_parse(td->pl, mesh.ndim, td->ndim, pl, &err) == 0, "%s",
                    ck_err_msg(&err));
            for (uint64_t r = 0; r < world; r++) {
                uint32_t coord[CK_MAX_MESH_DIMS];
                ck_box box;
                ck_mesh_coord(&mesh, r, coord);
                ck_shard_box(td->ndim, td->shape, &mesh, pl, coord, &box);
                size_t is = ck_dtype_size(td->dtype);
                /* Every rank offers, as every rank calls save; the plan keeps one. */
                if ((r + (uint64_t)i) % 2 == 0) {
                    uint8_t *b = tl_box_bytes(seed, (uint32_t)i, is, td->ndim, td->shape, &box);
                    REQUIRE(ck_save_shard(s, tn, r, b, &err) == 0, "%s", ck_err_msg(&err));
                    REQUIRE(nb < 64, "too many buffers");
                    bufs[nb] = b;
                    gens[nb++].tensor = UINT32_MAX;
                } else {
                    REQUIRE(nb < 64, "too many buffers");
                    ck_synth_src *g = &gens[nb++];
                    *g = (ck_synth_src){ .seed = seed, .tensor = (uint32_t)i, .itemsize = is,
                                         .ndim = td->ndim, .box = box };
                    memcpy(g->shape, td->shape, sizeof td->shape);
                    REQUIRE(ck_save_shard_fill(s, tn, r, ck_synth_fill, g, &err) == 0, "%s",
                            ck_err_msg(&err));
                }
            }
        }
        /* Offering an undeclared tensor or a rank outside the mesh is an error. */
        CHECK(ck_save_shard(s, "nope", 0, bufs[0], &err) == -ENOENT, "undeclared tensor");
        CHECK(ck_save_shard(s, "t0", world, bufs[0], &err) == -EINVAL, "rank outside mesh");
        static const char rng[] = "rng-state-bytes";
        REQUIRE(ck_save_blob(s, "rng", rng, sizeof rng, &err) == 0, "%s", ck_err_msg(&err));
        REQUIRE(ck_save_blob(s, "empty", "", 0, &err) == 0, "%s", ck_err_msg(&err));
        CHECK(ck_save_blob(s, "rng", rng, 1, &err) == -EEXIST, "duplicate blob accepted");
        ck_save_stats st;
        int r = ck_save_commit(s, &st, &err);
        REQUIRE(r == 0, "commit %s: %s", name, ck_err_msg(&err));
        for (int i = 0; i < nb; i++)
            free(bufs[i]);

        ck_ckpt *ck;
        REQUIRE(ck_open(root, name, &ck, &err) == 0, "%s", ck_err_msg(&err));
        const ck_info *in = ck_get_info(ck);
        CHECK(!strcmp(in->name, name) && in->step == 100 + si, "name/step");
        CHECK(ck_mesh_equal(&in->mesh, &mesh), "mesh round trip");
        CHECK(in->n_tensors == (uint64_t)sc->nt && in->n_blobs == 2, "counts");
        CHECK(in->block_size == 16384 && in->hashed, "block size / hashed");
        CHECK(st.tensor_bytes == in->tensor_bytes, "stats vs info bytes");
        for (int i = 0; i < sc->nt; i++) {
            char tn[16];
            ck_tensor t;
            snprintf(tn, sizeof tn, "t%d", i);
            REQUIRE(ck_tensor_get(ck, tn, &t, &err) == 0, "%s", ck_err_msg(&err));
            CHECK(t.dtype == sc->t[i].dtype && t.ndim == sc->t[i].ndim, "tensor %s meta", tn);
            for (int d = 0; d < t.ndim; d++)
                CHECK(t.shape[d] == sc->t[i].shape[d], "tensor %s shape", tn);
        }
        void *blob;
        size_t blen;
        REQUIRE(ck_blob_get(ck, "rng", &blob, &blen, &err) == 0, "%s", ck_err_msg(&err));
        CHECK(blen == sizeof rng && !memcmp(blob, rng, blen), "blob bytes");
        free(blob);
        CHECK(ck_blob_get(ck, "missing", &blob, &blen, &err) == -ENOENT, "missing blob");
        CHECK(ck_tensor_get(ck, "missing", &(ck_tensor){ 0 }, &err) == -ENOENT, "missing tensor");

        /* Replicas share the writing: with a replicate dim, more than one replica of
         * each shard position has a data file (scenario 2x3: ranks 0-2 and 3-5). */
        if (si == 1) {
            bool first = false, second = false;
            for (uint32_t f = 0; f < in->n_files; f++) {
                first = first || ck_file_get(ck, f)->rank < 3;
                second = second || ck_file_get(ck, f)->rank >= 3;
            }
            CHECK(first && second, "both replica groups write data");
        }
        ck_close(ck);
        CHECK(tl_verify_deep(root, name, seed) == 0, "checkpoint %s has problems", name);
    }
    ck_cat_entry *ents;
    size_t n;
    ck_err err = { 0 };
    REQUIRE(ck_catalog_list(root, &ents, &n, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(n == sizeof scenarios / sizeof scenarios[0], "catalog lists %zu checkpoints", n);
    free(ents);
    tl_rmtree(root);
    if (tl_failures)
        return 1;
    printf("ok: %zu scenarios round-trip byte for byte\n", sizeof scenarios / sizeof scenarios[0]);
    return 0;
}
