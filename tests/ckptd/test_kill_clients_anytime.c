/* SIGKILL of a save's client processes at random moments, from before the first BEGIN
 * to past the commit, against one ckptd that lives through every trial: each time the
 * save is either committed and deep-verifies or absent, the daemon abandons what the
 * dead clients left (nothing in .pending), keeps serving, and holds as many
 * descriptors as before the trial. 20 trials in CI; KD_KILL_TRIALS=N for more
 * (scripts/soak). */
#include "kc_testlib.h"
#include "format/layout.h"

/* ckpt-synth's 4 rank processes in a process group of their own, so one kill ends
 * them all. */
static pid_t synth_group(const char *root, const char *sock, const char *name, const char *out)
{
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        setpgid(0, 0);
        int fd = open(out, O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        const char *argv[] = { CKPT_SYNTH_PATH, root, "--name", name, "--mesh", "4",
                               "--tensors", "6", "--bytes", "6MiB", "--seed", "7", "--uneven",
                               "--hash-threads", "2", "--world", "4", "--daemon", sock, NULL };
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    setpgid(pid, pid);
    return pid;
}

/* Waits until ckptd has no save in flight and its descriptors are back to fds. */
static bool settled(const kd_proc *d, int fds)
{
    for (int i = 0; i < 1000; i++) {
        if (kc_status(d->sock).n == 0 && kd_count_fds(d->pid) == fds)
            return true;
        kd_sleep_ms(20);
    }
    return false;
}

int main(void)
{
    const char *env = getenv("KD_KILL_TRIALS");
    int trials = env && atoi(env) > 0 ? atoi(env) : 20;
    kc_watchdog((unsigned)(60 + trials * 20));
    char root[PATH_MAX], out[PATH_MAX + 8], pend[PATH_MAX + 16];
    tl_tmpdir(root, sizeof root, "kdkillc");
    snprintf(out, sizeof out, "%s.out", root);
    snprintf(pend, sizeof pend, "%s/%s", root, CK_PENDING);
    srand((unsigned)getpid());
    kd_proc d;
    kd_start(&d, root, NULL);
    kc_daemon_pid = d.pid;
    /* Two saves without a kill; the second sets the range of kill times. */
    REQUIRE(kd_wait_pid(synth_group(root, d.sock, "warmup", out), 60) == 0,
            "the unkilled save failed");
    double t0 = kd_now();
    REQUIRE(kd_wait_pid(synth_group(root, d.sock, "timed", out), 60) == 0,
            "the unkilled save failed");
    int span_ms = (int)((kd_now() - t0) * 1200) + 1;
    /* The baseline: no save in flight and the descriptor count unchanged for 0.5 s. The
     * exited clients' connections close a moment after their save is done; counted
     * while still open, they made a baseline the next trial fell below. */
    int fds = -1, same = 0;
    for (int i = 0; i < 1000 && same < 25; i++) {
        int now = kd_count_fds(d.pid);
        same = now == fds && kc_status(d.sock).n == 0 ? same + 1 : 0;
        fds = now;
        kd_sleep_ms(20);
    }
    REQUIRE(same >= 25, "the daemon did not settle after the first saves");
    int complete = 0, absent = 0;
    for (int t = 0; t < trials; t++) {
        char name[32];
        snprintf(name, sizeof name, "step-%04d", t);
        pid_t p = synth_group(root, d.sock, name, out);
        kd_sleep_ms((double)(rand() % span_ms));
        kill(-p, SIGKILL);
        waitpid(p, NULL, 0);
        CHECK(settled(&d, fds), "trial %d: ckptd did not settle (saves in flight, or %d fds "
              "instead of %d)", t, kd_count_fds(d.pid), fds);
        CHECK(kd_count_entries(pend, false) == 0, "trial %d: the dead clients' save left "
              "debris in %s", t, pend);
        if (kd_exists(root, name)) {
            complete++;
            CHECK(tl_verify_deep(root, name, 7) == 0, "trial %d: %s is visible but bad", t, name);
        } else {
            absent++;
        }
        if (tl_failures)
            break;
    }
    CHECK(kd_wait_pid(synth_group(root, d.sock, "after", out), 60) == 0,
          "a save after the trials failed");
    CHECK(kd_term(&d, 30) == 0, "ckptd did not exit 0 (see %s)", d.log);
    kc_daemon_pid = 0;
    if (tl_failures)
        return 1;
    tl_rmtree(root);
    unlink(out);
    unlink(d.log);
    printf("ok: %d SIGKILLs of a save's 4 clients within %d ms of its start: %d saves "
           "complete, %d absent; no debris, ckptd kept serving with %d fds\n", trials,
           span_ms, complete, absent, fds);
    return 0;
}
