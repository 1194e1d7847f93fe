/* Bounded shutdown (README, "ckptd"): on SIGTERM ckptd stops accepting, finishes every
 * save whose parts are all staged, lets the ranks of the others stage theirs until
 * --drain-timeout, then aborts those still waiting (logged, nothing visible, their
 * pending directories removed) and exits 0. Saves, all of world 2, at the SIGTERM:
 *   done:    both ranks staged, commit asked            -> committed
 *   late:    rank 0 staged; rank 1 stages after SIGTERM -> committed
 *   stuck:   rank 0 staged, rank 1 began and never stages -> aborted
 *   half:    only rank 0 began and staged                 -> aborted
 * and a save whose first BEGIN was refused (its staging declared smaller than its
 * part) must not count as in flight: ckptd used to wait for it forever.
 * A second SIGTERM during a drain exits at once, and the next start removes what it
 * left (the debris of the unfinished saves). */

#include "kc_testlib.h"
#include "format/layout.h"

static const kc_tensor ts[] = { { CK_F32, 2, { 512, 64 }, "S(0)" } };

typedef struct save {
    const char *name;
    ck_client_save *sv[2];
    kc_part part[2];
} save;

static void begin(kc_env *e, save *s, uint64_t rank)
{
    ck_mesh mesh;
    ck_err err = { 0 };
    ck_mesh_parse("2", NULL, &mesh, NULL);
    REQUIRE(kc_begin(e->cl[rank], &s->sv[rank], s->name, 1, &mesh, rank, ts, 1, &kc_job, &err) == 0,
            "%s: begin rank %llu: %s", s->name, (unsigned long long)rank, ck_err_msg(&err));
    kc_declare(s->sv[rank], &mesh, rank, ts, 1, &s->part[rank], false);
}

static void stage(save *s, uint64_t rank)
{
    ck_err err = { 0 };
    REQUIRE(ck_client_submit(s->sv[rank], &kc_copy, &err) == 0, "%s: submit rank %llu: %s",
            s->name, (unsigned long long)rank, ck_err_msg(&err));
    if (rank == 0)
        REQUIRE(ck_client_commit(s->sv[0], &err) == 0, "%s: commit: %s", s->name,
                ck_err_msg(&err));
}

/* Waits for the outcome every began rank gets, and frees the save. */
static int outcome(save *s)
{
    int r = 0;
    for (int k = 0; k < 2; k++) {
        if (!s->sv[k])
            continue;
        ck_err err = { 0 };
        int w = ck_client_wait(s->sv[k], CK_CLIENT_COMMITTED, &err);
        r = r ? r : w;
        ck_client_save_free(s->sv[k]);
        kc_part_free(&s->part[k]);
        s->sv[k] = NULL;
    }
    return r;
}

/* A raw BEGIN whose declared staging cannot hold the part: ERROR naming the save. */
static void refused_begin(const char *sock)
{
    ck_err err = { 0 };
    kc_wire_tensor t = { .name = "w", .dtype = CK_F32, .ndim = 1, .shape = { 4096 } };
    kc_wire d = { .name = "refused", .step = 1, .ntensors = 1, .tensors = &t,
                   .staging_size = 4096 };
    ck_mesh_parse("1", NULL, &d.mesh, NULL);
    int fd = kc_raw_begin(sock, &d);
    ck__msg m;
    CHECK(ck__conn_recv(fd, true, &m, &err) > 0 && m.type == CK_MSG_ERROR,
          "a BEGIN with too small a staging area got no ERROR");
    if (m.type)
        free(m.payload);
    close(fd);
}

/* Checks that ROOT/.pending is empty, then closes the clients and ckptd. */
static void pending_clean(kc_env *e, const char *who)
{
    char pend[PATH_MAX + 16];
    snprintf(pend, sizeof pend, "%s/%s", e->root, CK_PENDING);
    CHECK(kd_count_entries(pend, true) == 0, "%s left %d entries in %s", who,
          kd_count_entries(pend, true), pend);
    kc_close(e);
    kc_remove(e);
}

static void drain_case(void)
{
    const char *extra[] = { "--drain-timeout", "2", NULL };
    kc_env e;
    kc_open(&e, true, "kdterm", 2, extra, NULL);
    save done = { .name = "done" }, late = { .name = "late" }, stuck = { .name = "stuck" },
         half = { .name = "half" };
    begin(&e, &done, 0), begin(&e, &done, 1), stage(&done, 0), stage(&done, 1);
    begin(&e, &late, 0), begin(&e, &late, 1), stage(&late, 0);
    begin(&e, &stuck, 0), begin(&e, &stuck, 1), stage(&stuck, 0);
    begin(&e, &half, 0), stage(&half, 0);
    refused_begin(e.d.sock);
    double t0 = kd_now();
    kill(e.d.pid, SIGTERM);
    for (int i = 0; i < 500 && kd_sock_alive(e.d.sock); i++)
        kd_sleep_ms(10);
    CHECK(!kd_sock_alive(e.d.sock), "ckptd still accepts connections after SIGTERM");
    stage(&late, 1);
    CHECK(outcome(&done) == 0, "done: a fully staged save did not commit at SIGTERM");
    CHECK(outcome(&late) == 0, "late: a rank that staged during the drain did not commit");
    CHECK(outcome(&stuck) < 0, "stuck: a save waiting for a rank did not fail at the drain "
          "timeout");
    CHECK(outcome(&half) < 0, "half: a save waiting for a rank did not fail at the drain "
          "timeout");
    int rc = kd_wait_pid(e.d.pid, 30);
    e.d.pid = 0;
    kc_daemon_pid = 0;
    CHECK(rc == 0, "ckptd exited %d after SIGTERM, not 0 within 30 s (see %s)", rc, e.d.log);
    CHECK(kd_now() - t0 < 30, "the drain did not end");
    CHECK(kd_log_has(e.d.log, "drain timeout") && kd_log_has(e.d.log, "stuck") &&
          kd_log_has(e.d.log, "half"), "the aborted saves are not logged by name: see %s",
          e.d.log);
    CHECK(kd_verify_tool(e.root, "done") == 0 && kd_verify_tool(e.root, "late") == 0,
          "done or late does not verify");
    CHECK(!kd_exists(e.root, "stuck") && !kd_exists(e.root, "half"),
          "an aborted save is visible");
    pending_clean(&e, "the aborted saves");
}

static void twice_case(void)
{
    const char *extra[] = { "--drain-timeout", "60", NULL };
    kc_env e;
    kc_open(&e, true, "kdterm2", 2, extra, NULL);
    save stuck = { .name = "stuck" };
    begin(&e, &stuck, 0), begin(&e, &stuck, 1), stage(&stuck, 0);
    kill(e.d.pid, SIGTERM);
    for (int i = 0; i < 500 && kd_sock_alive(e.d.sock); i++)
        kd_sleep_ms(10);
    kill(e.d.pid, SIGTERM);
    int rc = kd_wait_pid(e.d.pid, 10);
    e.d.pid = 0;
    kc_daemon_pid = 0;
    CHECK(rc != -1 && rc != 0, "a second SIGTERM did not end ckptd at once (exit %d)", rc);
    CHECK(kd_log_has(e.d.log, "second SIGTERM"), "the forced exit is not logged: see %s",
          e.d.log);
    CHECK(outcome(&stuck) < 0, "stuck: the clients did not hear of the forced exit");
    CHECK(!kd_exists(e.root, "stuck"), "the unfinished save is visible");
    kd_start(&e.d, e.root, NULL);
    kc_daemon_pid = e.d.pid;
    pending_clean(&e, "the next start");
}

int main(void)
{
    kc_watchdog(110);
    drain_case();
    twice_case();
    if (tl_failures)
        return 1;
    printf("ok: SIGTERM finished the staged saves, let a late rank stage, aborted the rest "
           "at --drain-timeout and exited 0; a second SIGTERM exited at once, the next "
           "start cleaned up\n");
    return 0;
}
