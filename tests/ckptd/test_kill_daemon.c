/* SIGKILL of ckptd at random moments of saves by 4 client processes, 50 times in CI
 * (KD_KILL_TRIALS=N for a longer run): the clients get an error and do not hang;
 * after a restart, .pending is empty, the interrupted save is absent or complete, and
 * every checkpoint committed before passes a deep verify. */
#include "kd_testlib.h"
#include "format/layout.h"

int main(void)
{
    const char *env = getenv("KD_KILL_TRIALS");
    int trials = env && atoi(env) > 0 ? atoi(env) : 50;
    char root[PATH_MAX], out[PATH_MAX + 8], pend[PATH_MAX + 16];
    tl_tmpdir(root, sizeof root, "kdkill");
    snprintf(out, sizeof out, "%s.out", root);
    snprintf(pend, sizeof pend, "%s/%s", root, CK_PENDING);
    srand((unsigned)getpid());
    int complete = 0, absent = 0;
    kd_proc d;
    /* One save without a kill sets the range of kill times: from before the first
     * byte to past the commit, however fast this build (ASan) or machine is. */
    kd_start(&d, root, NULL);
    double t0 = kd_now();
    REQUIRE(kd_wait_pid(kd_synth(root, d.sock, "warmup", "4", "6", "6MiB", out), 60) == 0,
            "the unkilled save failed");
    int span_ms = (int)((kd_now() - t0) * 1500) + 1;
    kd_kill9(&d);
    complete++;
    for (int t = 0; t < trials; t++) {
        char name[32];
        snprintf(name, sizeof name, "step-%04d", t);
        kd_start(&d, root, NULL);
        CHECK(kd_count_entries(pend, true) == 0, "trial %d: .pending not empty after restart", t);
        pid_t p = kd_synth(root, d.sock, name, "4", "6", "6MiB", out);
        kd_sleep_ms((double)(rand() % span_ms));
        kd_kill9(&d);
        int rc = kd_wait_pid(p, 20);
        CHECK(rc != -1, "trial %d: clients hung after the daemon died", t);
        kd_start(&d, root, NULL);   /* recovery runs here */
        CHECK(kd_count_entries(pend, true) == 0, "trial %d: recovery left .pending debris", t);
        if (kd_exists(root, name)) {
            complete++;
            CHECK(tl_verify_deep(root, name, 7) == 0, "trial %d: %s is visible but bad", t, name);
        } else {
            absent++;
            CHECK(rc != 0, "trial %d: ckpt-synth succeeded but %s is absent", t, name);
        }
        kd_kill9(&d);
    }
    /* Nothing committed earlier was touched by any later kill. */
    for (int t = 0; t < trials; t++) {
        char name[32];
        snprintf(name, sizeof name, "step-%04d", t);
        if (kd_exists(root, name))
            CHECK(tl_verify_deep(root, name, 7) == 0, "%s damaged by a later trial", name);
    }
    CHECK(tl_verify_deep(root, "warmup", 7) == 0, "warmup damaged by a later trial");
    /* Besides the catalog (and its lock), only the checkpoints counted above. */
    CHECK(kd_count_entries(root, false) == complete + 2, "unexpected entries in %s", root);
    if (tl_failures)
        return 1;
    tl_rmtree(root);
    unlink(out);
    unlink(d.log);
    printf("ok: %d SIGKILLs of ckptd within %d ms of a save's start: %d saves complete, "
           "%d absent, no debris, no hang\n", trials, span_ms, complete - 1, absent);
    return 0;
}
