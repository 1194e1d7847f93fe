/* Load: many client processes, each with its own connection, each saving one small
 * checkpoint after another through one ckptd. Every checkpoint commits and
 * deep-verifies, and afterwards the daemon's open descriptors and RSS are back at
 * their level after a first save (printed). Under ASan, ckptd's exit status at SIGTERM
 * carries LeakSanitizer's verdict, so a leak fails the test.
 * Default 16 clients x 10 saves (CI on 2 cores, ASan included); KD_LOAD_CLIENTS and
 * KD_LOAD_SAVES set other counts (scripts/soak runs 64 x 20). */
#include "ck/catalog.h"
#include "kc_testlib.h"

static const kc_tensor ts[] = { { CK_F32, 2, { 96, 64 }, "R" },
                                { CK_BF16, 1, { 3000 }, "R" } };

/* One client process: saves NAME-00 .. NAME-(saves-1), one after another. */
static int client(const char *sock, int id, int saves)
{
    ck_err err = { 0 };
    ck_client *cl;
    if (ck_client_open(&cl, NULL, &(ck_client_opts){ .socket = sock }, &err) < 0) {
        fprintf(stderr, "client %d: open: %s\n", id, ck_err_msg(&err));
        return 1;
    }
    ck_mesh mesh;
    ck_mesh_parse("1", NULL, &mesh, NULL);
    for (int k = 0; k < saves; k++) {
        char name[32];
        snprintf(name, sizeof name, "c%02d-s%02d", id, k);
        ck_client_save *sv;
        kc_part part = { 0 };
        if (kc_begin(cl, &sv, name, (uint64_t)k, &mesh, 0, ts, 2, &kc_job, &err) < 0) {
            fprintf(stderr, "client %d: %s: begin: %s\n", id, name, ck_err_msg(&err));
            return 1;
        }
        kc_declare(sv, &mesh, 0, ts, 2, &part, false);
        int r = ck_client_submit(sv, &kc_copy, &err);
        if (r == 0)
            r = ck_client_commit(sv, &err);
        if (r == 0)
            r = ck_client_wait(sv, CK_CLIENT_COMMITTED, &err);
        ck_client_save_free(sv);
        kc_part_free(&part);
        if (r < 0) {
            fprintf(stderr, "client %d: %s: %s\n", id, name, ck_err_msg(&err));
            return 1;
        }
    }
    ck_client_close(cl);
    return 0;
}

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && atoi(v) > 0 ? atoi(v) : dflt;
}

int main(void)
{
    int nclients = env_int("KD_LOAD_CLIENTS", 16), saves = env_int("KD_LOAD_SAVES", 10);
    kc_watchdog(900);
    kc_env e;
    kc_open(&e, true, "kdload", 1, NULL, NULL);
    /* The starting level: after a first round of saves, one per writer thread, which
     * starts what the daemon keeps (the threads' arenas). */
    pid_t warm[4];
    for (int i = 0; i < 4; i++)
        if ((warm[i] = fork()) == 0)
            _exit(client(e.d.sock, 90 + i, 1));
    for (int i = 0; i < 4; i++) {
        int st;
        REQUIRE(warm[i] > 0 && waitpid(warm[i], &st, 0) == warm[i] && WIFEXITED(st) &&
                WEXITSTATUS(st) == 0, "a first save failed");
    }
    /* The daemon sees the clients' closes after they exit. */
    for (int i = 0, n = -1; i < 50 && n != kd_count_fds(e.d.pid); i++) {
        n = kd_count_fds(e.d.pid);
        kd_sleep_ms(50);
    }
    int fd0 = kd_count_fds(e.d.pid);
    long rss0 = kd_rss_kib(e.d.pid);
    double t0 = kd_now();
    pid_t *pids = calloc((size_t)nclients, sizeof *pids);
    REQUIRE(pids, "out of memory");
    for (int i = 0; i < nclients; i++) {
        pids[i] = fork();
        REQUIRE(pids[i] >= 0, "fork");
        if (pids[i] == 0)
            _exit(client(e.d.sock, i, saves));
    }
    int failed = 0, fdmax = fd0;
    long rssmax = rss0;
    for (int done = 0; done < nclients;) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p > 0) {
            done++;
            failed += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
            continue;
        }
        int fds = kd_count_fds(e.d.pid);
        long rss = kd_rss_kib(e.d.pid);
        fdmax = fds > fdmax ? fds : fdmax;
        rssmax = rss > rssmax ? rss : rssmax;
        kd_sleep_ms(20);
    }
    double secs = kd_now() - t0;
    CHECK(failed == 0, "%d of %d clients failed a save", failed, nclients);
    /* The last replies may still be on their way out: let the daemon drop them. */
    int fd1 = kd_count_fds(e.d.pid);
    for (int i = 0; i < 250 && fd1 != fd0; i++, fd1 = kd_count_fds(e.d.pid))
        kd_sleep_ms(20);
    long rss1 = kd_rss_kib(e.d.pid);
    printf("%d clients x %d saves in %.1f s; ckptd: %d fds at the start level, %d at the "
           "peak, %d after; RSS %ld MiB at the start level, %ld MiB at the peak, %ld MiB "
           "after\n", nclients, saves, secs, fd0, fdmax, fd1, rss0 >> 10, rssmax >> 10,
           rss1 >> 10);
    CHECK(fd1 == fd0, "ckptd holds %d descriptors after the load, %d before", fd1, fd0);
    CHECK(!KD_RSS_CHECKED || rss1 - rss0 < 16 << 10, "ckptd's RSS grew by %ld MiB over the "
          "load", (rss1 - rss0) >> 10);
    if (!KD_RSS_CHECKED)
        printf("(RSS not checked under ASan: its allocator keeps freed memory)\n");
    ck_scan sc;
    REQUIRE(ck_root_scan(e.root, &sc, NULL) == 0, "scan");
    CHECK(sc.n_committed == (size_t)(nclients * saves + 4), "%zu checkpoints committed, %d "
          "expected", sc.n_committed, nclients * saves + 4);
    CHECK(sc.n_pending == 0, "%zu saves left in .pending", sc.n_pending);
    uint64_t bad = 0;
    for (size_t i = 0; i < sc.n_committed; i++)
        bad += tl_verify_deep(e.root, sc.committed[i], KC_SEED) != 0;
    CHECK(bad == 0, "%llu checkpoints do not verify", (unsigned long long)bad);
    ck_scan_free(&sc);
    free(pids);
    kc_close(&e);   /* SIGTERM: exit 0, which under ASan includes LeakSanitizer's */
    kc_remove(&e);
    if (tl_failures)
        return 1;
    printf("ok: %d checkpoints from %d client processes committed and verify; fds and RSS "
           "back at their start level\n", nclients * saves, nclients);
    return 0;
}
