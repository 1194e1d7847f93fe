/* Out of file descriptors, ckptd neither spins nor stops serving. Its RLIMIT_NOFILE is
 * lowered (prlimit) to 16 above what it holds, and 64 clients connect and stay idle:
 *  - over the next 3 s its CPU time (utime + stime, /proc/PID/stat: a count of what it
 *    used, not a clock) stays under 1 s: accept's EMFILE on the level-triggered
 *    listening socket used to make the loop spin at 100% of a core;
 *  - the clients past the limit get ERROR naming the lack of descriptors, and the log
 *    says so once each time the daemon runs short, never once per client refused (the
 *    daemon's other threads, its heartbeat's among them, open and close descriptors of
 *    their own, so a client may be taken between two shortages: each new shortage then
 *    follows a "taking new clients again");
 *  - once the idle clients leave, a save of 2 ranks commits and deep-verifies, and the
 *    log says that clients are taken again. */
#include <poll.h>
#include <sys/resource.h>

#include "kd_testlib.h"
#include "async/proto.h"

#define IDLE 64

/* CPU seconds pid has used (user + system). */
static double cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    /* After the command: state, then fields 4-13, then utime (14) and stime (15). */
    REQUIRE(p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
                        &st) == 2, "cannot read %s", path);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

int main(void)
{
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "kdfds");
    kd_proc d;
    kd_start(&d, root, NULL);
    int held = kd_count_fds(d.pid);
    struct rlimit rl = { .rlim_cur = (rlim_t)held + 16, .rlim_max = (rlim_t)held + 16 };
    REQUIRE(prlimit(d.pid, RLIMIT_NOFILE, &rl, NULL) == 0, "prlimit: %s", strerror(errno));
    int fd[IDLE];
    ck_err err = { 0 };
    for (int i = 0; i < IDLE; i++)
        REQUIRE(ck__conn_connect(d.sock, &fd[i], &err) == 0, "client %d: %s", i,
                ck_err_msg(&err));
    for (int i = 0; i < 500 && !kd_log_has(d.log, "out of file descriptors"); i++)
        kd_sleep_ms(10);
    double c0 = cpu_s(d.pid);
    kd_sleep_ms(3000);
    double used = cpu_s(d.pid) - c0;
    int refused = 0;
    for (int i = 0; i < IDLE; i++) {
        struct pollfd p = { .fd = fd[i], .events = POLLIN };
        ck__msg m = { 0 };
        if (poll(&p, 1, 0) == 1 && ck__conn_recv(fd[i], true, &m, NULL) > 0 &&
            m.type == CK_MSG_ERROR && memmem(m.payload, m.len, "out of file descriptors", 23))
            refused++;
        free(m.payload);
    }
    printf("ckptd with %d descriptors, limit %d, %d idle clients: %.2f s of CPU in 3 s; %d "
           "clients refused naming the limit\n", held, held + 16, IDLE, used, refused);
    CHECK(used < 1.0, "ckptd used %.2f s of CPU in 3 s with its descriptors spent: it spins",
          used);
    CHECK(refused > 0, "no client past the limit was told why it was refused");
    int shorts = kd_count_in(d.log, "out of file descriptors"),
        again = kd_count_in(d.log, "taking new clients again");
    CHECK(shorts >= 1 && shorts == again + 1 && shorts <= 5, "the lack of descriptors is "
          "logged %d times, with %d recoveries between: want once per shortage, a few at most "
          "(see %s)", shorts, again, d.log);
    for (int i = 0; i < IDLE; i++)
        close(fd[i]);
    for (int i = 0; i < 500 && kd_count_fds(d.pid) > held; i++)
        kd_sleep_ms(10);
    CHECK(kd_wait_pid(kd_synth(root, d.sock, "after", "2", "2", "1MiB", NULL), 60) == 0,
          "a save failed once the idle clients left (see %s)", d.log);
    CHECK(tl_verify_deep(root, "after", 7) == 0, "the save is bad");
    CHECK(kd_log_has(d.log, "taking new clients again"), "the recovery is not logged");
    CHECK(kd_term(&d, 30) == 0, "ckptd did not exit 0 (see %s)", d.log);
    if (tl_failures)
        return 1;
    tl_rmtree(root);
    unlink(d.log);
    printf("ok: out of descriptors, ckptd stays idle, refuses with a reason, and serves "
           "again\n");
    return 0;
}
