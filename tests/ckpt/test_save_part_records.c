/* One save, three processes, no collectives: DCP's flow. Rank 0 shares the save and
 * hands the token to two forked ranks through pipes (as DCP's coordinator would);
 * each rank declares the same box lists, writes its own file and sends back its part
 * record; rank 0 adopts them, adds a blob another rank produced, and commits. The
 * checkpoint deep-verifies and holds the formula and the blob. Then what must not commit: a record with a flipped byte, a record forged
 * with a valid digest (file size changed, at the offset docs/FORMAT.md gives), a
 * record of another save, one adopted twice, a truncated one, a rank that reports a
 * failure, and a rank whose record never arrives: each is refused naming the rank,
 * and nothing is published. */
#include <openssl/sha.h>
#include <sys/wait.h>

#include "ck/save.h"
#include "save/save_int.h"
#include "ckpt_testlib.h"

#define WORLD 3
static const uint64_t seed = 23;
static ck_mesh mesh;

/* t0: uneven rows, rank 1 writes none; t1: 2x2 tiles, rank 0 writes two; t2: placed. */
static const uint64_t shape0[2] = { 13, 5 }, shape1[2] = { 6, 9 }, shape2[1] = { 1000 };
static const ck_box boxes0[2] = { { 2, { 0, 0 }, { 4, 5 } }, { 2, { 4, 0 }, { 9, 5 } } };
static const uint64_t writers0[2] = { 2, 0 };
static const ck_box boxes1[4] = {
    { 2, { 0, 0 }, { 3, 4 } }, { 2, { 0, 4 }, { 3, 5 } },
    { 2, { 3, 0 }, { 3, 4 } }, { 2, { 3, 4 }, { 3, 5 } },
};
static const uint64_t writers1[4] = { 0, 1, 2, 0 };

static ck_synth_src srcs[8];

static ck_save *build(const char *root, const char *name, uint64_t rank)
{
    ck_err err = { 0 };
    ck_save *s;
    ck_placement pl = { .kind = CK_SHARD, .dim = 0 };
    ck_decl *d;
    REQUIRE(ck_decl_new(&d, &mesh, &err) == 0 &&
            ck_decl_tensor_boxes(d, "t0", CK_F32, 2, shape0, 2, boxes0, writers0, &err) == 0 &&
            ck_decl_tensor_boxes(d, "t1", CK_BF16, 2, shape1, 4, boxes1, writers1, &err) == 0 &&
            ck_decl_tensor(d, "t2", CK_I32, 1, shape2, &pl, &err) == 0 &&
            ck_save_begin(&s, root, name, 5, d, NULL, &err) == 0, "%s", ck_err_msg(&err));
    ck_decl_free(d);
    int k = 0;
    for (uint32_t b = 0; b < 2; b++)
        if (writers0[b] == rank) {
            srcs[k] = (ck_synth_src){ seed, 0, 4, 2, { shape0[0], shape0[1] }, boxes0[b] };
            REQUIRE(ck_save_box_fill(s, "t0", b, ck_synth_fill, &srcs[k++], &err) == 0, "%s",
                    ck_err_msg(&err));
        }
    for (uint32_t b = 0; b < 4; b++)
        if (writers1[b] == rank) {
            srcs[k] = (ck_synth_src){ seed, 1, 2, 2, { shape1[0], shape1[1] }, boxes1[b] };
            REQUIRE(ck_save_box_fill(s, "t1", b, ck_synth_fill, &srcs[k++], &err) == 0, "%s",
                    ck_err_msg(&err));
        }
    uint32_t coord = (uint32_t)rank;
    srcs[k] = (ck_synth_src){ .seed = seed, .tensor = 2, .itemsize = 4, .ndim = 1,
                              .shape = { shape2[0] } };
    ck_shard_box(1, shape2, &mesh, &pl, &coord, &srcs[k].box);
    REQUIRE(ck_save_shard_fill(s, "t2", rank, ck_synth_fill, &srcs[k], &err) == 0, "%s",
            ck_err_msg(&err));
    return s;
}

/* This rank's part: join (rank 0 has shared), write, record. fail: report a failure. */
static void *write_part(ck_save *s, uint64_t rank, bool fail, size_t *len)
{
    ck_err err = { 0 }, outcome = { 0 };
    uint64_t bytes = ck__save_rank_bytes(s, rank);
    void *image = NULL;
    REQUIRE(posix_memalign(&image, CK_ALIGN, bytes ? bytes : CK_ALIGN) == 0, "oom");
    if (fail)
        ck_err_set(&outcome, -ENOSPC, "disk full on rank %llu", (unsigned long long)rank);
    else if (ck__save_copy_rank(s, rank, image, &outcome) == 0)
        ck__save_write_rank(s, rank, &outcome);
    void *rec;
    REQUIRE(ck__save_part(s, rank, &outcome, &rec, len, &err) == 0, "%s", ck_err_msg(&err));
    free(image);
    return rec;
}

static void child(const char *root, const char *name, uint64_t rank, int in, int out, bool fail)
{
    char token[CK_TOKEN_MAX] = "";
    ck_err err = { 0 };
    REQUIRE(read(in, token, sizeof token) == (ssize_t)sizeof token, "no token");
    ck_save *s = build(root, name, rank);
    REQUIRE(ck__save_join(s, token, rank, &err) == 0, "%s", ck_err_msg(&err));
    size_t len;
    void *rec = write_part(s, rank, fail, &len);
    ck_save_abort(s);
    REQUIRE(write(out, &len, sizeof len) == sizeof len && write(out, rec, len) == (ssize_t)len,
            "sending the record");
    free(rec);
    _exit(tl_failures ? 1 : 0);
}

typedef struct run {
    ck_save *s;                     /* rank 0's */
    void *rec[WORLD];
    size_t len[WORLD];
} run;

/* Rank 0 shares, two forked ranks write, every record comes back. fail_rank: that
 * rank reports a failure (-1: none). */
static void run_save(const char *root, const char *name, int fail_rank, run *R)
{
    ck_err err = { 0 };
    int to[WORLD][2], from[WORLD][2];
    pid_t pid[WORLD];
    for (uint64_t r = 1; r < WORLD; r++) {
        REQUIRE(pipe(to[r]) == 0 && pipe(from[r]) == 0, "pipe");
        if ((pid[r] = fork()) == 0)
            child(root, name, r, to[r][0], from[r][1], (int)r == fail_rank);
        REQUIRE(pid[r] > 0, "fork");
    }
    R->s = build(root, name, 0);
    char token[CK_TOKEN_MAX];
    REQUIRE(ck__save_share(R->s, token, &err) == 0, "%s", ck_err_msg(&err));
    for (uint64_t r = 1; r < WORLD; r++)
        REQUIRE(write(to[r][1], token, sizeof token) == sizeof token, "token");
    R->rec[0] = write_part(R->s, 0, fail_rank == 0, &R->len[0]);
    for (uint64_t r = 1; r < WORLD; r++) {
        REQUIRE(read(from[r][0], &R->len[r], sizeof R->len[r]) == sizeof R->len[r], "len");
        R->rec[r] = malloc(R->len[r]);
        size_t at = 0;
        while (at < R->len[r]) {
            ssize_t n = read(from[r][0], (char *)R->rec[r] + at, R->len[r] - at);
            REQUIRE(n > 0, "reading rank %llu's record", (unsigned long long)r);
            at += (size_t)n;
        }
        int st;
        REQUIRE(waitpid(pid[r], &st, 0) == pid[r] && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                "rank %llu failed", (unsigned long long)r);
        close(to[r][0]), close(to[r][1]), close(from[r][0]), close(from[r][1]);
    }
}

static void run_free(run *R)
{
    for (int r = 0; r < WORLD; r++)
        free(R->rec[r]);
}

static bool exists(const char *root, const char *name)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", root, name);
    return access(p, F_OK) == 0;
}

/* Whether ROOT/.pending still holds a directory of the save called name. */
static bool pending_left(const char *root, const char *name)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/.pending", root);
    DIR *d = opendir(p);
    struct dirent *de;
    size_t n = strlen(name);
    bool left = false;
    while (d && (de = readdir(d)))
        left |= strncmp(de->d_name, name, n) == 0 && de->d_name[n] == '.';
    if (d)
        closedir(d);
    return left;
}

/* Adopting rec must fail with a message holding want; then the commit must fail too
 * and publish nothing. */
static void expect_refused(const char *root, const char *name, run *R, uint64_t bad,
                           const void *rec, size_t len, const char *want)
{
    ck_err err = { 0 };
    for (uint64_t r = 0; r < WORLD; r++) {
        int rc = ck__save_adopt(R->s, r == bad ? rec : R->rec[r], r == bad ? len : R->len[r],
                                &err);
        if (r == bad)
            CHECK(rc < 0 && strstr(ck_err_msg(&err), want), "%s: adopt gave %d '%s', want '%s'",
                  name, rc, ck_err_msg(&err), want);
        else
            CHECK(rc == 0, "%s: rank %llu's good record: %s", name, (unsigned long long)r,
                  ck_err_msg(&err));
    }
    CHECK(ck_save_commit(R->s, NULL, &err) < 0 && strstr(ck_err_msg(&err), "never adopted"),
          "%s: commit: '%s'", name, ck_err_msg(&err));
    CHECK(!exists(root, name), "%s: published anyway", name);
    CHECK(!pending_left(root, name), "%s: the failed commit left its pending directory", name);
    run_free(R);
}

/* Offset of file_size in a record (docs/FORMAT.md, "Part records"). */
static size_t file_size_at(const uint8_t *rec)
{
    size_t at = 16;
    for (int i = 0; i < 2; i++)                          /* name, token */
        at += 2 + (size_t)(rec[at] | rec[at + 1] << 8);
    at += 16 + 4;                                        /* rank, world, code */
    at += 2 + (size_t)(rec[at] | rec[at + 1] << 8);      /* message */
    return at;
}

int main(void)
{
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "parts");
    REQUIRE(ck_mesh_parse("3", NULL, &mesh, NULL) == 0, "mesh");
    ck_err err = { 0 };

    run R;
    run_save(root, "good", -1, &R);
    for (int r = WORLD - 1; r >= 0; r--)      /* any order; rank 0's own record too */
        CHECK(ck__save_adopt(R.s, R.rec[r], R.len[r], &err) == 0, "adopt rank %d: %s", r,
              ck_err_msg(&err));
    CHECK(ck__save_adopt(R.s, R.rec[1], R.len[1], &err) < 0 &&
          strstr(ck_err_msg(&err), "adopted already"), "adopting twice: '%s'", ck_err_msg(&err));
    /* A blob another rank produced, carried by the caller: rank 0 adds it late. */
    static const char blob[] = "param_groups of rank 2";
    REQUIRE(ck_save_blob(R.s, "optim.param%5Fgroups", blob, sizeof blob, &err) == 0, "%s",
            ck_err_msg(&err));
    REQUIRE(ck_save_commit(R.s, NULL, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(tl_verify_deep(root, "good", seed) == 0, "the part-record save does not verify");
    ck_ckpt *ck;
    void *got = NULL;
    size_t glen = 0;
    REQUIRE(ck_open(root, "good", &ck, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(ck_blob_get(ck, "optim.param%5Fgroups", &got, &glen, &err) == 0 &&
          glen == sizeof blob && !memcmp(got, blob, glen), "the late blob: %s", ck_err_msg(&err));
    free(got);
    ck_close(ck);
    run_free(&R);

    run_save(root, "flipped", -1, &R);
    uint8_t *bad = malloc(R.len[1]);
    memcpy(bad, R.rec[1], R.len[1]);
    bad[R.len[1] - 40] ^= 1;                  /* a hash byte */
    expect_refused(root, "flipped", &R, 1, bad, R.len[1], "digest");

    run_save(root, "forged", -1, &R);
    bad = realloc(bad, R.len[2]);
    memcpy(bad, R.rec[2], R.len[2]);
    bad[file_size_at(bad)] ^= 0x10;
    SHA256(bad, R.len[2] - 32, bad + R.len[2] - 32);
    expect_refused(root, "forged", &R, 2, bad, R.len[2], "file size");

    /* Random damage with the digest made good again: every field is decoded and checked
     * against the plan; nothing crashes, and rank 2's file is adopted only from a
     * record that still says what the plan says. */
    run_save(root, "fuzzed", -1, &R);
    bad = realloc(bad, R.len[2]);
    uint64_t x = 77;
    int taken = 0;
    for (int t = 0; t < 300; t++) {
        memcpy(bad, R.rec[2], R.len[2]);
        size_t at = 8 + (size_t)((x = ck_splitmix64(x)) % (R.len[2] - 40));
        bad[at] ^= (uint8_t)(1u << (ck_splitmix64(x) % 8));
        SHA256(bad, R.len[2] - 32, bad + R.len[2] - 32);
        if (ck__save_adopt(R.s, bad, R.len[2], &err) == 0) {
            taken++;      /* a hash byte: only --deep can tell; adopt it once, no more */
            break;
        }
        CHECK(ck_err_msg(&err)[0], "fuzz %d: refused without a message", t);
    }
    CHECK(taken <= 1, "more than one damaged record adopted");
    ck_save_abort(R.s);
    run_free(&R);

    run_save(root, "truncated", -1, &R);
    expect_refused(root, "truncated", &R, 2, R.rec[2], R.len[2] - 7, "says it has");

    run save_b, other;    /* other's rank 0 gives up: its directory is debris */
    run_save(root, "other", -1, &other);
    run_save(root, "mixed", -1, &save_b);
    expect_refused(root, "mixed", &save_b, 1, other.rec[1], other.len[1], "another save");
    ck_save_abort(other.s);
    run_free(&other);

    run_save(root, "failing", 2, &R);
    expect_refused(root, "failing", &R, 2, R.rec[2], R.len[2], "disk full on rank 2");

    run_save(root, "missing", -1, &R);
    for (int r = 0; r < 2; r++)
        CHECK(ck__save_adopt(R.s, R.rec[r], R.len[r], &err) == 0, "%s", ck_err_msg(&err));
    CHECK(ck_save_commit(R.s, NULL, &err) < 0 && strstr(ck_err_msg(&err), "rank 2"),
          "a missing rank: '%s'", ck_err_msg(&err));
    CHECK(!exists(root, "missing") && !pending_left(root, "missing"),
          "published without rank 2, or left its directory");
    run_free(&R);
    free(bad);
    if (!tl_failures)
        tl_rmtree(root);
    return tl_failures ? 1 : 0;
}
