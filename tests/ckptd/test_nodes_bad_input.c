/* Bad input around several daemons gets a clear error naming the thing, never a hang:
 * ckptd --id that is no id, or --part-timeout / --dead-after 0 (exit 2); CKPTD_NODES
 * that is no count (ck_client_open fails naming it); more daemons than ranks (the
 * BEGIN is refused naming both); ranks of one save that declare different daemon
 * counts (the later one is refused naming "daemon count"); a shared save of a name
 * committed already (rank 0 is refused, and the member's ranks are told at once that
 * the name exists instead of waiting for --part-timeout). */
#include "kc_testlib.h"

static void ckptd_refuses(const char *root, const char *opt, const char *val,
                          const char *needle)
{
    char out[PATH_MAX + 16];
    snprintf(out, sizeof out, "%s.out", root);
    unlink(out);
    const char *argv[] = { CKPTD_PATH, "--root", root, "--foreground", opt, val, NULL };
    int rc = kd_run(argv, out, 20);
    CHECK(rc == 2, "ckptd %s '%s' exited %d, not 2", opt, val, rc);
    CHECK(kd_log_has(out, needle), "ckptd %s '%s' did not say '%s' (see %s)", opt, val,
          needle, out);
    if (!tl_failures)
        unlink(out);
}

/* One rank's save of a small tensor on a world of 2 through sock with nodes daemons;
 * the outcome of submit then wait. */
static int save(const char *sock, unsigned nodes, const char *name, uint64_t rank,
                ck_client **keep, ck_client_save **svp, ck_err *err)
{
    ck_mesh mesh;
    REQUIRE(ck_mesh_parse("2", NULL, &mesh, NULL) == 0, "mesh");
    ck_placement pl[1];
    REQUIRE(ck_placements_parse("S(0)", 1, 1, pl, NULL) == 0, "placements");
    static float data[512];
    uint64_t shape[1] = { 1024 };
    ck_client_opts o = { .socket = sock, .nodes = nodes };
    int r = ck_client_open(keep, NULL, &o, err);
    if (r == 0)
        r = kc_begin1(*keep, svp, name, 1, &mesh, rank, "w", CK_F32, 1, shape, pl, &kc_job, err);
    if (r == 0 && (r = ck_client_shard(*svp, "w", data, err)) == 0)
        r = ck_client_submit(*svp, &kc_copy, err);
    return r;
}

int main(void)
{
    kc_watchdog(100);
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "nodesbad");
    ckptd_refuses(root, "--id", "../x", "--id: daemon id '../x'");
    ckptd_refuses(root, "--id", "", "--id: daemon id ''");
    ckptd_refuses(root, "--part-timeout", "0", "--part-timeout 0: not a number");
    ckptd_refuses(root, "--dead-after", "0", "--dead-after 0: not a number");

    kd_proc a, b;
    static const char *const extra[] = { "--part-timeout", "60", NULL };
    kd_start_id(&a, root, "A", extra);
    kc_daemon_pid = a.pid;
    kd_start_id(&b, root, "B", extra);
    ck_err err = { 0 };

    ck_client *cl = NULL;
    setenv("CKPTD_NODES", "two", 1);
    ck_client_opts o = { .socket = a.sock };
    int r = ck_client_open(&cl, NULL, &o, &err);
    CHECK(r == -EINVAL && strstr(ck_err_msg(&err), "CKPTD_NODES=two"),
          "CKPTD_NODES=two: %d: %s", r, ck_err_msg(&err));
    unsetenv("CKPTD_NODES");

    ck_client_save *sv = NULL;
    r = save(a.sock, 3, "toomany", 0, &cl, &sv, &err);
    if (r == 0)
        r = ck_client_wait(sv, CK_CLIENT_COMMITTED, &err);
    CHECK(r < 0 && strstr(ck_err_msg(&err), "3 daemons for a world of 2 ranks"),
          "3 daemons for 2 ranks: %d: %s", r, ck_err_msg(&err));
    ck_client_save_free(sv);
    ck_client_close(cl);

    ck_client *c0 = NULL, *c1 = NULL;
    ck_client_save *s0 = NULL, *s1 = NULL;
    ck_err e0 = { 0 }, e1 = { 0 };
    REQUIRE(save(a.sock, 1, "mixed", 0, &c0, &s0, &e0) == 0, "mixed rank 0: %s",
            ck_err_msg(&e0));
    r = save(a.sock, 2, "mixed", 1, &c1, &s1, &e1);
    if (r == 0)
        r = ck_client_wait(s1, CK_CLIENT_COMMITTED, &e1);
    CHECK(r < 0 && strstr(ck_err_msg(&e1), "daemon count"),
          "ranks with 1 and 2 daemons: %d: %s", r, ck_err_msg(&e1));
    ck_client_save_free(s1);
    ck_client_close(c1);
    ck_client_save_free(s0);
    ck_client_close(c0);

    /* "done" committed through A alone, then again as a save shared with B. */
    REQUIRE(save(a.sock, 1, "done", 0, &c0, &s0, &e0) == 0 &&
            save(a.sock, 1, "done", 1, &c1, &s1, &e1) == 0 &&
            ck_client_commit(s0, &e0) == 0 && ck_client_wait(s0, CK_CLIENT_COMMITTED, &e0) == 0 &&
            ck_client_wait(s1, CK_CLIENT_COMMITTED, &e1) == 0, "the first save of done: %s / %s", ck_err_msg(&e0),
            ck_err_msg(&e1));
    ck_client_save_free(s0);
    ck_client_save_free(s1);
    ck_client_close(c0);
    ck_client_close(c1);
    double t0 = kd_now();
    r = save(b.sock, 2, "done", 1, &c1, &s1, &e1);
    int r0 = save(a.sock, 2, "done", 0, &c0, &s0, &e0);
    if (r0 == 0)
        r0 = ck_client_wait(s0, CK_CLIENT_COMMITTED, &e0);
    if (r == 0)
        r = ck_client_wait(s1, CK_CLIENT_COMMITTED, &e1);
    CHECK(r0 == -EEXIST && r == -EEXIST && strstr(ck_err_msg(&e1), "already exists"),
          "a shared save of a committed name: rank 0 %d (%s), the member's rank %d (%s)", r0,
          ck_err_msg(&e0), r, ck_err_msg(&e1));
    CHECK(kd_now() - t0 < 30, "the member's rank waited %.0f s", kd_now() - t0);
    ck_client_save_free(s0);
    ck_client_save_free(s1);
    ck_client_close(c0);
    ck_client_close(c1);

    if (kc_end_two(&a, &b, root))
        return 1;
    printf("ok: bad --id, --part-timeout, --dead-after, CKPTD_NODES, daemon counts and a "
           "shared save of a committed name all end in errors naming them\n");
    return 0;
}
