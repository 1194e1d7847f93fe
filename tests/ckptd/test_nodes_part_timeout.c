/* A save whose parts cannot all arrive: two daemons (A serves ranks 0-3, B ranks 4-7),
 * --part-timeout 2 (A's --rank-timeout 1 does not count the ranks served by B).
 * Ranks 4-7 begin at B and are admitted, but their copies never end
 * (a fill that blocks), so B never stages them. Ranks 0-3 get a timeout error from A
 * that names the missing ranks, the limit and B; once their copies are let go, ranks
 * 4-7 get the failure too (B heard of it from A's failure record): every connected
 * rank ends with an error, none hangs. Nothing is visible, and the next save of the
 * same name commits. */
#include "kc_testlib.h"

#define ROWS 8192

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static bool let_go;

static int blocking_fill(void *arg, uint64_t off, void *dst, size_t len)
{
    (void)arg, (void)off;
    pthread_mutex_lock(&mu);
    while (!let_go)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    memset(dst, 7, len);
    return 0;
}

static int plain_fill(void *arg, uint64_t off, void *dst, size_t len)
{
    (void)arg, (void)off;
    memset(dst, 7, len);
    return 0;
}

static void run(ck_client *const *cl, const char *name, bool block, ck_err *errs, int *rcs)
{
    ck_mesh mesh;
    REQUIRE(ck_mesh_parse("8", NULL, &mesh, NULL) == 0, "mesh");
    ck_placement pl[1];
    REQUIRE(ck_placements_parse("S(0)", 1, 1, pl, NULL) == 0, "placements");
    uint64_t shape[1] = { ROWS };
    ck_client_save *sv[8];
    ck_err err = { 0 };
    for (int r = 7; r >= 0; r--) {
        REQUIRE(kc_begin1(cl[r], &sv[r], name, 1, &mesh, (uint64_t)r, "w", CK_F32, 1, shape, pl,
                          &kc_job, &err) == 0, "rank %d: begin: %s", r, ck_err_msg(&err));
        REQUIRE(ck_client_shard_fill(sv[r], "w", block && r >= 4 ? blocking_fill : plain_fill,
                                     NULL, &err) == 0, "shard: %s", ck_err_msg(&err));
        REQUIRE(ck_client_submit(sv[r], r >= 4 ? &kc_lazy : &kc_copy, &err) == 0,
                "rank %d: save: %s", r, ck_err_msg(&err));
    }
    REQUIRE(ck_client_commit(sv[0], &err) == 0, "commit: %s", ck_err_msg(&err));
    for (int r = 0; r < 4; r++)
        rcs[r] = ck_client_wait(sv[r], CK_CLIENT_COMMITTED, &errs[r]);
    pthread_mutex_lock(&mu);
    let_go = true;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    for (int r = 4; r < 8; r++)
        rcs[r] = ck_client_wait(sv[r], CK_CLIENT_COMMITTED, &errs[r]);
    for (int r = 0; r < 8; r++)
        ck_client_save_free(sv[r]);
}

int main(void)
{
    kc_watchdog(100);
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "nodestimeout");
    static const char *const extra[] = { "--part-timeout", "2", "--dead-after", "5", NULL };
    /* A's --rank-timeout is shorter than the part timeout: ranks 4-7 never come to A,
     * and that is the part timeout's to report, not the rank timeout's. */
    static const char *const extra_a[] = { "--part-timeout", "2", "--dead-after", "5",
                                           "--rank-timeout", "1", NULL };
    kd_proc a, b;
    kd_start_id(&a, root, "A", extra_a);
    kc_daemon_pid = a.pid;
    kd_start_id(&b, root, "B", extra);
    ck_client *cl[8];
    ck_err err = { 0 };
    for (int r = 0; r < 8; r++) {
        ck_client_opts o = { .socket = r < 4 ? a.sock : b.sock, .nodes = 2 };
        REQUIRE(ck_client_open(&cl[r], NULL, &o, &err) == 0, "rank %d: open: %s", r,
                ck_err_msg(&err));
    }
    ck_err errs[8] = { 0 };
    int rcs[8];
    double t0 = kd_now();
    run(cl, "late", true, errs, rcs);
    for (int r = 0; r < 8; r++) {
        const char *m = ck_err_msg(&errs[r]);
        CHECK(rcs[r] == -ETIMEDOUT, "rank %d: %d, not -ETIMEDOUT: %s", r, rcs[r], m);
        CHECK(strstr(m, "ranks 4-7") && strstr(m, "--part-timeout 2 s") && strstr(m, "B"),
              "rank %d: the error does not name the missing ranks 4-7, the limit and daemon "
              "B: %s", r, m);
        if (r == 0 || r == 4)
            printf("rank %d: %s\n", r, m);
    }
    CHECK(kd_now() - t0 < 60, "the save took %.0f s to fail", kd_now() - t0);
    CHECK(!kd_exists(root, "late"), "a checkpoint 'late' is visible");
    run(cl, "late", false, errs, rcs);
    for (int r = 0; r < 8; r++)
        CHECK(rcs[r] == 0, "rank %d: the retry failed: %s", r, ck_err_msg(&errs[r]));
    CHECK(kd_verify_tool(root, "late") == 0, "the retry does not verify");
    for (int r = 0; r < 8; r++)
        ck_client_close(cl[r]);
    if (kc_end_two(&a, &b, root))
        return 1;
    printf("ok: parts that never arrive end in a timeout error naming ranks 4-7 and daemon B "
           "on all 8 connected ranks; nothing visible; the retry commits\n");
    return 0;
}
