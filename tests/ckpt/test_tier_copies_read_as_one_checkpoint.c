/* A checkpoint whose data files are spread over copies (a node's part, another's,
 * the durable tier's whole copy) reads as one through ck_open_copies: every tensor
 * loads as saved, each file from the first copy that holds it; ck_load_files names
 * the files a rank's boxes touch, on the same mesh and on another, and a load within
 * them needs no other copy. A file no copy holds fails the load that needs it, naming
 * the file and the copies; a copy of another save of the same name is refused,
 * naming both directories; so are no copies at all, or a directory that is no
 * checkpoint. Every block read through the copies is checked: a flipped byte in the
 * copy a file is read from fails the load naming the file. Readers for many threads
 * (ck_readers) and deep verification read through the copies too. */
#include <fcntl.h>

#include "ck/load.h"
#include "ck/save.h"
#include "ck/verify.h"
#include "ckpt_testlib.h"

static const uint64_t seed = 11;
static const uint64_t shapes[3][2] = { { 1000, 6 }, { 7, 1023 }, { 64, 64 } };
static const ck_dtype dt[3] = { CK_F32, CK_BF16, CK_F64 };
static const char *const pls[3] = { "S(0)", "S(1)", "R" };

/* A partial copy of root/src in dir/src holding the files named (hard links, and
 * the copy file FORMAT.md describes). */
static void partial(const char *root, const char *dir, const char *const *files, int n)
{
    char from[PATH_MAX], to[PATH_MAX];
    snprintf(to, sizeof to, "%s/src", dir);
    REQUIRE(mkdir(dir, 0755) == 0 && mkdir(to, 0755) == 0, "mkdir %s", to);
    const char *all[8] = { "manifest.mdb" };
    for (int i = 0; i < n; i++)
        all[i + 1] = files[i];
    for (int i = 0; i <= n; i++) {
        snprintf(from, sizeof from, "%s/src/%s", root, all[i]);
        snprintf(to, sizeof to, "%s/src/%s", dir, all[i]);
        REQUIRE(link(from, to) == 0, "link %s", to);
    }
    snprintf(to, sizeof to, "%s/src/copy", dir);
    FILE *f = fopen(to, "w");
    REQUIRE(f, "%s", to);
    fprintf(f, "libshard copy 1\nsource node%c\nfiles %d\n", dir[strlen(dir) - 1], n);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s\n", files[i]);
    fclose(f);
}

/* rank r's boxes on mesh m (placements pls, as saved or another mesh's). */
static void rank_items(const char *mesh_s, uint64_t r, ck_load_item *it, uint8_t **dst)
{
    ck_mesh m;
    REQUIRE(ck_mesh_parse(mesh_s, NULL, &m, NULL) == 0, "mesh");
    for (uint32_t t = 0; t < 3; t++) {
        ck_placement pl[CK_MAX_MESH_DIMS];
        uint32_t c[CK_MAX_MESH_DIMS];
        REQUIRE(ck_placements_parse(pls[t], m.ndim, 2, pl, NULL) == 0, "pl");
        ck_mesh_coord(&m, r, c);
        static const char *const names[3] = { "t0", "t1", "t2" };
        it[t] = (ck_load_item){ .tensor = names[t] };
        ck_shard_box(2, shapes[t], &m, pl, c, &it[t].box);
        it[t].len = ck_box_numel(&it[t].box) * ck_dtype_size(dt[t]);
        it[t].dst = dst[t] = malloc(it[t].len + 1);
    }
}

/* Whether a load of the items gives the formula's bytes. */
static bool formula(const ck_load_item *it, int n)
{
    bool ok = true;
    for (int t = 0; t < n; t++) {
        uint8_t *want = tl_box_bytes(seed, (uint32_t)t, ck_dtype_size(dt[t]), 2, shapes[t],
                                     &it[t].box);
        ok = ok && memcmp(want, it[t].dst, it[t].len) == 0;
        free(want);
    }
    return ok;
}

static void free_items(uint8_t **dst)
{
    for (int t = 0; t < 3; t++)
        free(dst[t]);
}

/* The file t2 (replicated, written by one rank the plan picks) lies in. */
static uint32_t t2_file(ck_ckpt *ck)
{
    ck_tensor t;
    ck_shard *sh;
    uint32_t n;
    REQUIRE(ck_tensor_get(ck, "t2", &t, NULL) == 0 && ck_shards_get(ck, &t, &sh, &n, NULL) == 0,
            "t2");
    uint32_t f = sh[0].ext[0].file;
    free(sh);
    return f;
}

int main(void)
{
    char root[PATH_MAX], a[PATH_MAX + 8], b[PATH_MAX + 8], other[PATH_MAX + 8];
    char da[PATH_MAX + 16], db[PATH_MAX + 16], dc[PATH_MAX + 16], dother[PATH_MAX + 16];
    tl_tmpdir(root, sizeof root, "copies");
    tl_save_formula(root, "src", "4", NULL, shapes, dt, pls, 3, seed);
    snprintf(a, sizeof a, "%s/A", root);
    snprintf(b, sizeof b, "%s/B", root);
    snprintf(other, sizeof other, "%s/O", root);
    partial(root, a, (const char *const[]){ "rank-00000.dat", "rank-00001.dat" }, 2);
    partial(root, b, (const char *const[]){ "rank-00002.dat" }, 1);
    snprintf(da, sizeof da, "%s/src", a);
    snprintf(db, sizeof db, "%s/src", b);
    snprintf(dc, sizeof dc, "%s/src", root);
    ck_err err = { 0 };
    ck_ckpt *ck;
    ck_load_item it[3];
    uint8_t *dst[3];
    char path[PATH_MAX];

    /* Every tensor whole, through the three copies. */
    REQUIRE(ck_open_copies((const char *const[]){ da, db, dc }, 3, &ck, &err) == 0, "%s",
            ck_err_msg(&err));
    CHECK(!ck_get_copy(ck)->partial && ck_get_copy(ck)->files_held == 4, "the union is whole");
    rank_items("1", 0, it, dst);
    CHECK(ck_load_many(ck, it, 3, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(formula(it, 3), "every tensor read through the copies is the formula's");
    free_items(dst);
    static const char *const owner[4] = { "/A/src/", "/A/src/", "/B/src/", "/src/" };
    for (uint32_t f = 0; f < 4; f++) {
        ck_file_path(ck, f, path, sizeof path);
        CHECK(strstr(path, owner[f]) && strlen(strstr(path, owner[f])) == strlen(owner[f]) + 14,
              "file %u is read from %s (not %s)", f, path, owner[f]);
    }
    ck_verify_result vr;
    CHECK(ck_verify(ck, &(ck_verify_opts){ .deep = true }, &vr, &err) == 0 && vr.problems == 0 &&
          vr.files == 4, "deep verification through the copies: %s (%llu problems)",
          ck_err_msg(&err), (unsigned long long)vr.problems);
    ck_readers *rs;
    REQUIRE(ck_readers_open_ckpt(ck, &rs, &err) == 0, "%s", ck_err_msg(&err));
    rank_items("1", 0, it, dst);
    for (int t = 0; t < 3; t++)
        CHECK(ck_readers_read(rs, it[t].tensor, &it[t].box, 0, it[t].len, it[t].dst, &err) == 0,
              "%s", ck_err_msg(&err));
    CHECK(formula(it, 3), "ck_readers read through the copies");
    free_items(dst);
    ck_readers_close(rs);
    uint32_t writer = t2_file(ck);
    ck_close(ck);

    /* Two partial copies: what they hold loads, what neither holds fails naming it. */
    REQUIRE(ck_open_copies((const char *const[]){ da, db }, 2, &ck, &err) == 0, "%s",
            ck_err_msg(&err));
    CHECK(ck_get_copy(ck)->partial && ck_get_copy(ck)->files_held == 3, "3 of 4 files");
    uint8_t need[4];
    for (uint64_t r = 0; r < 4; r++) {
        rank_items("4", r, it, dst);
        REQUIRE(ck_load_files(ck, it, 3, need, &err) == 0, "%s", ck_err_msg(&err));
        for (uint32_t f = 0; f < 4; f++)
            CHECK(need[f] == (f == r || f == writer), "the same mesh, rank %llu: file %u %s",
                  (unsigned long long)r, f, need[f] ? "needed" : "not needed");
        int rc = ck_load_many(ck, it, 3, &err);
        if (r < 3 && writer < 3) {
            CHECK(rc == 0 && formula(it, 3), "rank %llu's own part: %s", (unsigned long long)r,
                  ck_err_msg(&err));
        } else if (r == 3) {
            CHECK(rc == -ENODATA && strstr(ck_err_msg(&err), "data file rank-00003.dat is in none "
                                           "of the 2 copies opened") &&
                  strstr(ck_err_msg(&err), da) && strstr(ck_err_msg(&err), db),
                  "a file no copy holds: %d %s", rc, ck_err_msg(&err));
        }
        free_items(dst);
    }
    /* Onto another mesh: rank 0 of 2 needs the first half of t0's rows and of t1's
     * columns (files 0 and 1), and t2's writer's file. */
    rank_items("2", 0, it, dst);
    REQUIRE(ck_load_files(ck, it, 3, need, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(need[0] && need[1] && need[2] == (writer == 2) && need[3] == (writer == 3),
          "onto 2 ranks, rank 0's halves of t0 and t1 lie in files 0 and 1, t2 in its "
          "writer's");
    free_items(dst);
    rank_items("2", 0, it, dst);
    REQUIRE(ck_load_files(ck, it, 1, need, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(need[0] && need[1] && !need[2] && !need[3], "t0's first 500 rows lie in files 0, 1");
    CHECK(ck_load_many(ck, it, 1, &err) == 0 && formula(it, 1), "%s", ck_err_msg(&err));
    free_items(dst);
    it[0] = (ck_load_item){ .tensor = "t9", .box = { .ndim = 2 } };
    CHECK(ck_load_files(ck, it, 1, need, &err) == -ENOENT && strstr(ck_err_msg(&err), "t9"),
          "an unknown tensor is named: %s", ck_err_msg(&err));
    it[0] = (ck_load_item){ .tensor = "t0", .box = { .ndim = 2, .off = { 990, 0 },
                                                     .len = { 11, 6 } } };
    CHECK(ck_load_files(ck, it, 1, need, &err) == -EINVAL && strstr(ck_err_msg(&err), "t0"),
          "a box outside the tensor is refused: %s", ck_err_msg(&err));
    ck_close(ck);

    /* A copy whose file went bad: the load that reads it there fails, naming it. */
    char bad[PATH_MAX + 8], dbad[PATH_MAX + 16], cmd[3 * PATH_MAX];
    snprintf(bad, sizeof bad, "%s/X", root);
    partial(root, bad, (const char *const[]){ "rank-00001.dat" }, 1);
    snprintf(dbad, sizeof dbad, "%s/src", bad);
    snprintf(cmd, sizeof cmd, "cp %s/rank-00001.dat %s/r && mv %s/r %s/rank-00001.dat && "
             "printf '\\377' | dd of=%s/rank-00001.dat bs=1 seek=100 conv=notrunc 2>/dev/null",
             dbad, dbad, dbad, dbad, dbad);
    REQUIRE(system(cmd) == 0, "flipping a byte of X's copy");
    REQUIRE(ck_open_copies((const char *const[]){ dbad, dc }, 2, &ck, &err) == 0, "%s",
            ck_err_msg(&err));
    rank_items("4", 1, it, dst);
    int rc = ck_load_many(ck, it, 1, &err);
    CHECK(rc == -EBADMSG && strstr(ck_err_msg(&err), "rank-00001.dat"),
          "a flipped byte in the copy read: %d %s", rc, ck_err_msg(&err));
    free_items(dst);
    ck_close(ck);

    /* Another save of the same name: refused, both named. */
    REQUIRE(mkdir(other, 0755) == 0, "mkdir");
    tl_save_formula(other, "src", "4", NULL, shapes, dt, pls, 3, seed);
    snprintf(dother, sizeof dother, "%s/src", other);
    CHECK(ck_open_copies((const char *const[]){ da, dother }, 2, &ck, &err) == -EBADMSG &&
          strstr(ck_err_msg(&err), da) && strstr(ck_err_msg(&err), dother) &&
          strstr(ck_err_msg(&err), "copies of different checkpoints") &&
          strstr(ck_err_msg(&err), "commit time"), "another save of src: %s", ck_err_msg(&err));
    CHECK(ck_open_copies(NULL, 0, &ck, &err) == -EINVAL, "no copies: %s", ck_err_msg(&err));
    CHECK(ck_open_copies((const char *const[]){ da, root }, 2, &ck, &err) == -EBADMSG &&
          strstr(ck_err_msg(&err), root), "a directory that is no checkpoint: %s",
          ck_err_msg(&err));
    tl_rmtree(root);
    return tl_failures ? 1 : 0;
}
