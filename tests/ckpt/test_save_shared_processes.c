/* One save, many processes: each of 4 forked ranks builds the same ck_save, writes
 * only its own data file into the shared pending directory and sends its block hashes
 * to rank 0 through a pipe; rank 0 adopts them and commits. The checkpoint holds the
 * formula's bytes and deep-verifies. A rank that dies before sending leaves the save
 * uncommitted and only .pending debris, which recovery removes. */
#include <sys/wait.h>

#include "ck/catalog.h"
#include "model/plan.h"
#include "ck/save.h"
#include "ckpt_testlib.h"

#define WORLD 4
static const uint64_t seed = 11;
static const uint64_t shapes[3][2] = { { 1001, 33 }, { 3, 8 }, { 4096, 16 } };

static ck_save *build(const char *root, const char *name, const char *token)
{
    ck_err err = { 0 };
    ck_mesh mesh;
    ck_placement pl[2];
    ck_mesh_parse("2x2", NULL, &mesh, NULL);
    ck_placements_parse("R,S(0)", 2, 2, pl, NULL);
    ck_save *s;
    REQUIRE(ck_save_begin(&s, root, name, 5, &mesh, &(ck_save_opts){ .block_size = 16384 },
                          &err) == 0, "%s", ck_err_msg(&err));
    for (int t = 0; t < 3; t++) {
        char tn[8];
        snprintf(tn, sizeof tn, "t%d", t);
        REQUIRE(ck_save_tensor(s, tn, CK_F32, 2, shapes[t], pl, &err) == 0, "%s", ck_err_msg(&err));
    }
    REQUIRE(ck_save_prepare_shared(s, token, &err) == 0, "%s", ck_err_msg(&err));
    return s;
}

/* This rank's part: its image from the formula, written and made durable. */
static void write_own(ck_save *s, uint64_t rank, uint8_t **img)
{
    ck_err err = { 0 };
    uint64_t size = ck_save_rank_bytes(s, rank);
    *img = NULL;
    if (!size)
        return;
    REQUIRE(posix_memalign((void **)img, 4096, size) == 0, "oom");
    memset(*img, 0, size);
    const ck_plan *p = ck_save_plan(s);
    for (uint32_t i = 0; i < ck_plan_nshards(p); i++) {
        const ck_plan_shard *ps = ck_plan_shard_at(p, i);
        if (ps->writer != rank || !ps->bytes)
            continue;
        uint8_t *b = tl_box_bytes(seed, ps->tensor, 4, 2, shapes[ps->tensor], &ps->box);
        memcpy(*img + ps->file_off, b, ps->bytes);
        free(b);
    }
    REQUIRE(ck_save_rank_image(s, rank, *img, &err) == 0, "%s", ck_err_msg(&err));
    REQUIRE(ck_save_write_rank(s, rank, &err) == 0, "rank %llu: %s", (unsigned long long)rank,
            ck_err_msg(&err));
}

/* Runs one save; rank `dies` (or none: -1) exits before sending. Returns whether
 * rank 0 committed. */
static bool run(const char *root, const char *name, int dies)
{
    int fds[WORLD][2];
    pid_t pid[WORLD];
    for (int r = 1; r < WORLD; r++) {
        REQUIRE(pipe(fds[r]) == 0, "pipe");
        pid[r] = fork();
        REQUIRE(pid[r] >= 0, "fork");
        if (pid[r] == 0) {
            close(fds[r][0]);
            ck_save *s = build(root, name, "job1");
            uint8_t *img;
            write_own(s, (uint64_t)r, &img);
            if (r == dies)
                _exit(3);
            const uint8_t *h;
            size_t n;
            REQUIRE(ck_save_rank_hashes(s, (uint64_t)r, &h, &n) == 0, "hashes");
            REQUIRE(n == ck_save_hash_bytes(s, (uint64_t)r), "hash length");
            REQUIRE(write(fds[r][1], &n, sizeof n) == (ssize_t)sizeof n, "send");
            REQUIRE(n == 0 || write(fds[r][1], h, n) == (ssize_t)n, "send");
            ck_save_detach(s);
            free(img);
            _exit(tl_failures ? 1 : 0);
        }
        close(fds[r][1]);
    }
    ck_err err = { 0 };
    ck_save *s = build(root, name, "job1");
    uint8_t *img;
    write_own(s, 0, &img);
    bool ok = true;
    for (int r = 1; r < WORLD; r++) {
        size_t n = 0;
        uint8_t buf[4096];
        bool got = read(fds[r][0], &n, sizeof n) == (ssize_t)sizeof n && n <= sizeof buf &&
                   (n == 0 || read(fds[r][0], buf, n) == (ssize_t)n);
        close(fds[r][0]);
        if (!got) {
            ok = false;    /* that rank died: its part is not durable */
            continue;
        }
        CHECK(ck_save_adopt_rank(s, (uint64_t)r, buf, n, &err) == 0, "%s", ck_err_msg(&err));
        CHECK(ck_save_adopt_rank(s, (uint64_t)r, buf, n + 32, &err) == -EINVAL,
              "a wrong hash length was adopted");
    }
    for (int r = 1; r < WORLD; r++) {
        int st;
        waitpid(pid[r], &st, 0);
        CHECK(r == dies ? WEXITSTATUS(st) == 3 : WEXITSTATUS(st) == 0, "rank %d exited %d", r,
              WEXITSTATUS(st));
    }
    if (ok)
        CHECK(ck_save_commit(s, NULL, &err) == 0, "commit: %s", ck_err_msg(&err));
    else
        ck_save_detach(s);   /* as a coordinator that gives up: debris for recovery */
    free(img);
    return ok;
}

int main(void)
{
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "shared");
    REQUIRE(run(root, "together", -1), "the save did not commit");
    CHECK(tl_verify_deep(root, "together", seed) == 0, "the shared save has problems");

    CHECK(!run(root, "torn", 2), "a save with a dead rank committed");
    char p[PATH_MAX];
    struct stat st;
    snprintf(p, sizeof p, "%s/torn", root);
    CHECK(stat(p, &st) < 0, "a torn save is visible");
    size_t removed = 0;
    ck_err err = { 0 };
    REQUIRE(ck_root_recover(root, &removed, NULL, NULL, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(removed == 1, "recovery removed %zu pending saves", removed);
    CHECK(tl_verify_deep(root, "together", seed) == 0, "recovery damaged the earlier save");
    tl_rmtree(root);
    if (tl_failures)
        return 1;
    printf("ok: %d processes wrote one checkpoint; a dead rank left only debris\n", WORLD);
    return 0;
}
