/* reshard_case SRC_MESH SRC_PL DST_MESH DST_PL MODE EXPECT [aligned]
 *
 * Saves a synthetic checkpoint on SRC_MESH (placements SRC_PL for the 2-D tensors,
 * R for the 0-D one), reshards it onto DST_MESH/DST_PL with MODE (auto|copy), and
 * checks the result: deep verify, every shard's bytes against the formula, ck_compare
 * against the source (equal), and EXPECT: "ref" (every tensor by reference: hard
 * links to the very same inodes, nothing copied), "copy" (nothing linked, no inode
 * shared) or "mixed" (some of each). With "aligned" every tensor has 4 KiB rows, so
 * that dim-0 cuts fall on page boundaries and can be linked. */
#include <sys/stat.h>

#include "ck/compare.h"
#include "ck/reshard.h"
#include "ck/save.h"
#include "ckpt_testlib.h"

static const uint64_t seed = 4242;

typedef struct spec {
    ck_dtype dt;
    int ndim;
    uint64_t shape[2];
} spec;

/* Odd shapes (uneven, empty and unaligned shards) and page-row shapes. */
static const spec mixed_set[] = {
    { CK_F32, 2, { 1001, 1024 } }, { CK_BF16, 2, { 3, 5 } }, { CK_F64, 2, { 4096, 8 } },
    { CK_I16, 2, { 17, 19 } }, { CK_F32, 0, { 0, 0 } }, { CK_U8, 2, { 10, 1 } },
};
static const spec aligned_set[] = {
    { CK_F32, 2, { 1001, 1024 } }, { CK_BF16, 2, { 64, 2048 } }, { CK_U8, 2, { 7, 8192 } },
};

static void save_src(const char *root, const char *mesh_s, const char *pl_s, const spec *set,
                     uint32_t n)
{
    ck_err err = { 0 };
    ck_mesh mesh;
    ck_placement pl[CK_MAX_MESH_DIMS], rep[CK_MAX_MESH_DIMS] = { { 0 } };
    REQUIRE(ck_mesh_parse(mesh_s, NULL, &mesh, &err) == 0, "%s", ck_err_msg(&err));
    REQUIRE(ck_placements_parse(pl_s, mesh.ndim, 2, pl, &err) == 0, "%s", ck_err_msg(&err));
    uint64_t world = ck_mesh_world(&mesh);
    ck_synth_src *src = calloc(n * world, sizeof *src);
    ck_save *s;
    ck_decl *d;
    char tn[8];
    REQUIRE(src && ck_decl_new(&d, &mesh, &err) == 0, "%s", ck_err_msg(&err));
    for (uint32_t t = 0; t < n; t++) {
        snprintf(tn, sizeof tn, "t%u", t);
        REQUIRE(ck_decl_tensor(d, tn, set[t].dt, set[t].ndim, set[t].shape,
                               set[t].ndim ? pl : rep, &err) == 0, "%s", ck_err_msg(&err));
    }
    REQUIRE(ck_save_begin(&s, root, "src", 3, d, NULL, &err) == 0, "%s", ck_err_msg(&err));
    ck_decl_free(d);
    for (uint32_t t = 0; t < n; t++) {
        snprintf(tn, sizeof tn, "t%u", t);
        const ck_placement *p = set[t].ndim ? pl : rep;
        for (uint64_t r = 0; r < world; r++) {
            uint32_t c[CK_MAX_MESH_DIMS];
            ck_mesh_coord(&mesh, r, c);
            ck_synth_src *g = &src[t * world + r];
            *g = (ck_synth_src){ .seed = seed, .tensor = t, .itemsize = ck_dtype_size(set[t].dt),
                                 .ndim = set[t].ndim, .shape = { set[t].shape[0], set[t].shape[1] } };
            ck_shard_box(set[t].ndim, set[t].shape, &mesh, p, c, &g->box);
            REQUIRE(ck_save_shard_fill(s, tn, r, ck_synth_fill, g, &err) == 0, "%s",
                    ck_err_msg(&err));
        }
    }
    REQUIRE(ck_save_blob(s, "step", "3", 1, &err) == 0, "%s", ck_err_msg(&err));
    REQUIRE(ck_save_commit(s, NULL, &err) == 0, "%s", ck_err_msg(&err));
    free(src);
}

/* How many data files of dst share an inode with a data file of src. */
static uint32_t shared_inodes(ck_ckpt *a, ck_ckpt *b)
{
    uint32_t shared = 0;
    for (uint32_t i = 0; i < ck_get_info(b)->n_files; i++) {
        char pb[PATH_MAX], pa[PATH_MAX];
        struct stat sb, sa;
        snprintf(pb, sizeof pb, "%s/%s", ck_dir(b), ck_file_get(b, i)->name);
        REQUIRE(stat(pb, &sb) == 0, "stat %s", pb);
        for (uint32_t j = 0; j < ck_get_info(a)->n_files; j++) {
            snprintf(pa, sizeof pa, "%s/%s", ck_dir(a), ck_file_get(a, j)->name);
            REQUIRE(stat(pa, &sa) == 0, "stat %s", pa);
            if (sa.st_ino == sb.st_ino && sa.st_dev == sb.st_dev) {
                CHECK(sb.st_nlink >= 2, "%s: a link, yet st_nlink %lu", pb,
                      (unsigned long)sb.st_nlink);
                shared++;
            }
        }
    }
    return shared;
}

static void on_diff(void *arg, const char *msg)
{
    fprintf(stderr, "%s: %s\n", (const char *)arg, msg);
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: %s SRC_MESH SRC_PL DST_MESH DST_PL auto|copy ref|copy|mixed "
                "[aligned]\n", argv[0]);
        return 2;
    }
    bool aligned = argc > 7 && !strcmp(argv[7], "aligned");
    const spec *set = aligned ? aligned_set : mixed_set;
    uint32_t n = aligned ? 3 : 6;
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "reshard");
    save_src(root, argv[1], argv[2], set, n);

    ck_err err = { 0 };
    ck_mesh mesh;
    ck_placement pl[CK_MAX_MESH_DIMS];
    REQUIRE(ck_mesh_parse(argv[3], NULL, &mesh, &err) == 0, "%s", ck_err_msg(&err));
    REQUIRE(ck_placements_parse(argv[4], mesh.ndim, 2, pl, &err) == 0, "%s", ck_err_msg(&err));
    ck_ckpt *src, *dst;
    REQUIRE(ck_open(root, "src", &src, &err) == 0, "%s", ck_err_msg(&err));
    ck_reshard_opts o = { .root = root, .name = "dst", .mesh = &mesh, .pl = pl,
                          .mode = !strcmp(argv[5], "copy") ? CK_RESHARD_COPY : CK_RESHARD_AUTO,
                          .mem_limit = 8u << 20 };
    ck_reshard_stats st;
    REQUIRE(ck_reshard(src, &o, &st, &err) == 0, "reshard: %s", ck_err_msg(&err));
    fprintf(stderr, "%s %s -> %s %s: %llu linked, %llu copied (%llu bytes)\n", argv[1], argv[2],
            argv[3], argv[4], (unsigned long long)st.tensors_linked,
            (unsigned long long)st.tensors_copied, (unsigned long long)st.bytes_copied);

    CHECK(tl_verify_deep(root, "dst", seed) == 0, "the resharded checkpoint is not sound");
    REQUIRE(ck_open(root, "dst", &dst, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(ck_mesh_equal(&ck_get_info(dst)->mesh, &mesh), "the new manifest has another mesh");
    CHECK(ck_get_info(dst)->step == 3 && ck_get_info(dst)->n_blobs == 1, "step or blobs lost");
    ck_compare_opts co = { .mem_limit = 1u << 20, .diff = on_diff, .cb_arg = "compare" };
    ck_compare_result cr;
    REQUIRE(ck_compare(src, dst, &co, &cr, &err) == 0, "compare: %s", ck_err_msg(&err));
    CHECK(cr.differing == 0 && cr.tensors == n, "%llu of %llu tensors differ from the source",
          (unsigned long long)cr.differing, (unsigned long long)cr.tensors);

    uint32_t shared = shared_inodes(src, dst);
    if (!strcmp(argv[6], "ref")) {
        CHECK(st.tensors_copied == 0 && st.bytes_copied == 0 && st.files_written == 0,
              "expected every tensor by reference, %llu copied", (unsigned long long)st.tensors_copied);
        CHECK(shared == ck_get_info(dst)->n_files, "%u of %u data files are hard links of the "
              "source's", shared, ck_get_info(dst)->n_files);
    } else if (!strcmp(argv[6], "copy")) {
        CHECK(st.tensors_linked == 0 && shared == 0, "expected a copy: %llu tensors linked, "
              "%u files shared", (unsigned long long)st.tensors_linked, shared);
    } else {
        CHECK(st.tensors_linked > 0 && st.tensors_copied > 0 && shared > 0,
              "expected some tensors linked and some copied: %llu / %llu",
              (unsigned long long)st.tensors_linked, (unsigned long long)st.tensors_copied);
    }
    ck_close(dst);
    ck_close(src);
    if (!tl_failures)
        tl_rmtree(root);
    return tl_failures ? 1 : 0;
}
