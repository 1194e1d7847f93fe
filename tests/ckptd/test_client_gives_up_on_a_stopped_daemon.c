/* A ckptd that stops answering (SIGSTOP) costs a client a bounded wait, not a hang
 * (time limits of 2 s here, $CKPTD_TIMEOUT; the commit's 30 s, $CKPTD_COMMIT_TIMEOUT):
 *  - submit of a new save returns -ETIMEDOUT (ADMIT never came), naming the
 *    daemon's socket, its pid and the wait;
 *  - the next save connects again, and HELLO is not answered either: -ETIMEDOUT, named;
 *  - a save staged before the stop: ck_client_wait returns -ETIMEDOUT naming the
 *    commit as the wait, and says that ckptd may still commit it;
 *  - ckptctl status --daemon-timeout 1 exits 2, naming the daemon and the wait;
 *  - a bad $CKPTD_TIMEOUT is refused naming it;
 * and once the daemon runs again (SIGCONT), the same client's next save connects again
 * and commits, and the save it gave up is either absent or deep-verifies (never torn).
 * Each call's time is printed; the test asserts the errors, not the times. */
#include "kc_testlib.h"

static const kc_tensor tensors[] = {
    { CK_F32, 2, { 256, 1024 }, "R" },
};

static ck_client_save *declare(ck_client *cl, const char *name, kc_part *p)
{
    ck_mesh mesh = { .ndim = 1, .size = { 1 } };
    ck_client_save *sv;
    ck_err err = { 0 };
    REQUIRE(kc_begin(cl, &sv, name, 1, &mesh, 0, tensors, 1, &kc_job, &err) == 0, "begin %s: %s", name,
            ck_err_msg(&err));
    kc_declare(sv, &mesh, 0, tensors, 1, p, false);
    return sv;
}

/* The error names the socket, the daemon's pid and (part of) the wait. */
static void check_named(const char *what, int rc, const ck_err *err, const kd_proc *d,
                        const char *wait, double secs)
{
    char pid[32];
    snprintf(pid, sizeof pid, "pid %d", (int)d->pid);
    printf("%s: %.2f s: %s\n", what, secs, ck_err_msg(err));
    CHECK(rc == -ETIMEDOUT, "%s: %d (%s), not -ETIMEDOUT", what, rc, ck_err_msg(err));
    CHECK(strstr(ck_err_msg(err), d->sock) && strstr(ck_err_msg(err), pid) &&
          strstr(ck_err_msg(err), wait), "%s: the error does not name the socket %s, %s and "
          "'%s': %s", what, d->sock, pid, wait, ck_err_msg(err));
}

int main(void)
{
    kc_watchdog(120);
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "kdstop");
    kd_proc d;
    kd_start(&d, root, NULL);
    kc_daemon_pid = d.pid;
    ck_err err = { 0 };

    /* The environment's limit, and a bad one refused. */
    ck_client *cl;
    setenv("CKPTD_TIMEOUT", "soon", 1);
    int rc = ck_client_open(&cl, NULL, &(ck_client_opts){ .socket = d.sock }, &err);
    CHECK(rc == -EINVAL && strstr(ck_err_msg(&err), "CKPTD_TIMEOUT=soon"),
          "CKPTD_TIMEOUT=soon: %d (%s)", rc, ck_err_msg(&err));
    setenv("CKPTD_TIMEOUT", "2", 1);
    setenv("CKPTD_COMMIT_TIMEOUT", "30", 1);
    REQUIRE(ck_client_open(&cl, NULL, &(ck_client_opts){ .socket = d.sock }, &err) == 0,
            "open: %s", ck_err_msg(&err));
    unsetenv("CKPTD_TIMEOUT");
    unsetenv("CKPTD_COMMIT_TIMEOUT");

    kc_part p[5] = { 0 };
    ck_client_save *a = declare(cl, "a", &p[0]);
    REQUIRE(ck_client_submit(a, &kc_copy, &err) == 0 && ck_client_commit(a, &err) == 0 &&
            ck_client_wait(a, CK_CLIENT_COMMITTED, &err) == 0, "save a: %s", ck_err_msg(&err));
    ck_client_save_free(a);

    /* Stopped: a new save gives up on its ADMIT. */
    kill(d.pid, SIGSTOP);
    ck_client_save *b = declare(cl, "b", &p[1]);
    double t0 = kd_now();
    ck_err_clear(&err);
    rc = ck_client_submit(b, &kc_copy, &err);
    check_named("submit, daemon stopped", rc, &err, &d, "ADMIT", kd_now() - t0);
    CHECK(strstr(ck_err_msg(&err), "did not answer within 2.0 s"), "submit: not said to be "
          "silent: %s", ck_err_msg(&err));
    ck_client_save_free(b);

    /* ckptctl status gives up too, naming the daemon. */
    char out[PATH_MAX + 16], pid[32];
    snprintf(out, sizeof out, "%s.ctl", root);
    snprintf(pid, sizeof pid, "(pid %d)", (int)d.pid);
    const char *ctl[] = { CKPTCTL_PATH, "status", "--socket", d.sock, "--daemon-timeout", "1",
                          NULL };
    t0 = kd_now();
    rc = kd_run(ctl, out, 60);
    printf("ckptctl status, daemon stopped: exit %d after %.2f s\n", rc, kd_now() - t0);
    CHECK(rc == 2 && kd_log_has(out, d.sock) && kd_log_has(out, pid) &&
          kd_log_has(out, "did not answer within 1.0 s"), "ckptctl status: exit %d without "
          "naming the daemon and the wait (see %s)", rc, out);

    /* The next save connects again; HELLO goes unanswered. */
    ck_client_save *c = declare(cl, "c", &p[2]);
    t0 = kd_now();
    ck_err_clear(&err);
    rc = ck_client_submit(c, &kc_copy, &err);
    check_named("submit, connecting again", rc, &err, &d, "HELLO", kd_now() - t0);
    ck_client_save_free(c);

    /* Running again: a save is staged; stopped before its commit, the wait gives up. */
    kill(d.pid, SIGCONT);
    ck_client_save *g = declare(cl, "given-up", &p[3]);
    REQUIRE(ck_client_submit(g, &kc_copy, &err) == 0, "save given-up: %s", ck_err_msg(&err));
    kill(d.pid, SIGSTOP);
    CHECK(ck_client_commit(g, &err) == 0, "commit of given-up: %s", ck_err_msg(&err));
    t0 = kd_now();
    ck_err_clear(&err);
    rc = ck_client_wait(g, CK_CLIENT_COMMITTED, &err);
    check_named("wait, daemon stopped", rc, &err, &d, "the commit", kd_now() - t0);
    CHECK(strstr(ck_err_msg(&err), "may still commit"), "the wait's error does not say that "
          "ckptd may still commit it: %s", ck_err_msg(&err));
    t0 = kd_now();
    ck_client_save_free(g);
    printf("save_free of the given-up save: %.2f s\n", kd_now() - t0);

    /* Running again: the same client saves again. */
    kill(d.pid, SIGCONT);
    ck_client_save *e = declare(cl, "after", &p[4]);
    ck_err_clear(&err);
    rc = ck_client_submit(e, &kc_copy, &err);
    if (rc == 0)
        rc = ck_client_commit(e, &err);
    if (rc == 0)
        rc = ck_client_wait(e, CK_CLIENT_COMMITTED, &err);
    CHECK(rc == 0, "the save after SIGCONT: %s", ck_err_msg(&err));
    ck_client_save_free(e);
    t0 = kd_now();
    ck_client_close(cl);
    printf("close: %.2f s\n", kd_now() - t0);
    CHECK(tl_verify_deep(root, "after", KC_SEED) == 0, "the save after SIGCONT is bad");
    CHECK(tl_verify_deep(root, "a", KC_SEED) == 0, "the first save is bad");
    CHECK(!kd_exists(root, "b") && !kd_exists(root, "c"), "a save that never began is visible");
    for (int i = 0; i < 500 && kc_status(d.sock).n; i++)
        kd_sleep_ms(10);
    bool given = kd_exists(root, "given-up");
    printf("the given-up save is %s\n", given ? "committed (ckptd ran on)" : "absent");
    CHECK(!given || tl_verify_deep(root, "given-up", KC_SEED) == 0, "the given-up save is "
          "visible but does not verify");
    for (int i = 0; i < 5; i++)
        kc_part_free(&p[i]);
    CHECK(kd_term(&d, 30) == 0, "ckptd did not exit 0 (see %s)", d.log);
    kc_daemon_pid = 0;
    if (tl_failures)
        return 1;
    tl_rmtree(root);
    unlink(d.log);
    unlink(out);
    printf("ok: a stopped ckptd costs each call its time limit, named; the client connects "
           "again once it runs\n");
    return 0;
}
