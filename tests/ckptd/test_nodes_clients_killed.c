/* The beyond-DCP promise across nodes: 8 rank processes, 4 per daemon (A serves ranks
 * 0-3, B ranks 4-7), each returns from submit (rank 0 also asks for the commit)
 * and is then killed with SIGKILL at once (its part is staged, likely not yet
 * durable). Both daemons
 * go on without any client: the checkpoint commits and verifies --deep. */
#include "kc_testlib.h"

static const kc_tensor ts[] = { { CK_F32, 2, { 2048, 512 }, "S(0)" },
                                { CK_BF16, 1, { 1 << 20 }, "S(0)" } };

static void rank_main(const char *sock, uint64_t r, int note)
{
    ck_mesh mesh;
    REQUIRE(ck_mesh_parse("8", NULL, &mesh, NULL) == 0, "mesh");
    ck_client *cl;
    ck_client_save *sv;
    kc_part part = { 0 };
    ck_err err = { 0 };
    ck_client_opts o = { .socket = sock, .nodes = 2 };
    REQUIRE(ck_client_open(&cl, NULL, &o, &err) == 0, "rank %llu: open: %s",
            (unsigned long long)r, ck_err_msg(&err));
    REQUIRE(kc_begin(cl, &sv, "orphan", 9, &mesh, r, ts, 2, &kc_job, &err) == 0, "begin: %s",
            ck_err_msg(&err));
    kc_declare(sv, &mesh, r, ts, 2, &part, false);
    REQUIRE(ck_client_submit(sv, &kc_copy, &err) == 0, "rank %llu: submit: %s",
            (unsigned long long)r, ck_err_msg(&err));
    if (r == 0)
        REQUIRE(ck_client_commit(sv, &err) == 0, "commit: %s", ck_err_msg(&err));
    char c = 1;
    REQUIRE(write(note, &c, 1) == 1, "note");
    pause();                    /* until the SIGKILL */
    _exit(0);
}

int main(void)
{
    kc_watchdog(100);
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "nodesorphan");
    kd_proc a, b;
    kd_start_id(&a, root, "A", NULL);
    kc_daemon_pid = a.pid;
    kd_start_id(&b, root, "B", NULL);
    int p[2];
    REQUIRE(pipe(p) == 0, "pipe");
    pid_t pids[8];
    for (uint64_t r = 0; r < 8; r++) {
        pids[r] = fork();
        REQUIRE(pids[r] >= 0, "fork");
        if (pids[r] == 0) {
            close(p[0]);
            rank_main(r < 4 ? a.sock : b.sock, r, p[1]);
        }
    }
    close(p[1]);
    char c;
    int noted = 0;
    while (noted < 8 && read(p[0], &c, 1) == 1)
        noted++;
    for (int r = 0; r < 8; r++)
        kill(pids[r], SIGKILL);
    for (int r = 0; r < 8; r++)
        waitpid(pids[r], NULL, 0);
    REQUIRE(noted == 8, "only %d of 8 ranks returned from submit", noted);
    double t0 = kd_now();
    while (!kd_exists(root, "orphan") && kd_now() - t0 < 30)
        kd_sleep_ms(20);
    CHECK(kd_exists(root, "orphan"), "the save was not committed 30 s after its ranks died "
          "(see %s, %s)", a.log, b.log);
    CHECK(kd_verify_tool(root, "orphan") == 0, "orphan does not verify --deep");
    if (kc_end_two(&a, &b, root))
        return 1;
    printf("ok: every rank killed right after submit (and rank 0's commit): the two "
           "daemons commit the checkpoint alone, and it verifies\n");
    return 0;
}
