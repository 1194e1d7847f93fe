/* A client of another uid is refused: even with the socket and root opened up to
 * everyone, SO_PEERCRED turns it away and the daemon logs it. Skips (77) when neither
 * setpriv nor runuser can run a command as nobody. */
#include "kd_testlib.h"

static bool as_nobody(const char *const *cmd, int *rc)
{
    static const char *const runners[][6] = {
        { "/usr/bin/setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", NULL },
        { "/usr/sbin/runuser", "-u", "nobody", "--", NULL },
    };
    for (size_t i = 0; i < 2; i++) {
        const char *argv[16];
        int n = 0;
        for (; runners[i][n]; n++)
            argv[n] = runners[i][n];
        if (access(argv[0], X_OK) != 0)
            continue;
        const char *probe[16];
        memcpy(probe, argv, n * sizeof *argv);
        probe[n] = "/bin/true";
        probe[n + 1] = NULL;
        if (kd_run(probe, "/dev/null", 10) != 0)
            continue;
        for (int k = 0; cmd[k]; k++)
            argv[n++] = cmd[k];
        argv[n] = NULL;
        *rc = kd_run(argv, "/dev/null", 20);
        return true;
    }
    return false;
}

int main(void)
{
    if (geteuid() != 0) {
        printf("skip: needs root to run a client as nobody\n");
        return 77;
    }
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "kduid");
    kd_proc d;
    kd_start(&d, root, NULL);
    chmod(root, 0755);
    chmod(d.sock, 0666);   /* as if someone loosened it: the uid check still holds */
    int rc;
    const char *cmd[] = { CKPTCTL_PATH, "status", "--socket", d.sock, NULL };
    if (!as_nobody(cmd, &rc)) {
        kd_term(&d, 10);
        tl_rmtree(root);
        printf("skip: neither setpriv nor runuser can run a command as nobody\n");
        return 77;
    }
    CHECK(rc == 2, "ckptctl as nobody exited %d, expected 2 (refused)", rc);
    CHECK(kd_log_has(d.log, "refused a client of uid"), "the refusal was not logged");
    const char *mine[] = { CKPTCTL_PATH, "status", "--socket", d.sock, NULL };
    CHECK(kd_run(mine, "/dev/null", 10) == 0, "the daemon's own uid was refused");
    CHECK(kd_term(&d, 10) == 0, "ckptd did not exit 0");
    if (tl_failures)
        return 1;
    tl_rmtree(root);
    unlink(d.log);
    printf("ok: a client of uid nobody was refused and logged\n");
    return 0;
}
