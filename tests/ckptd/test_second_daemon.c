/* One ckptd per id and root. While a first ckptd has a save in flight (rank 0 of 2
 * staged, rank 1 not yet), a second ckptd on the same root (another socket) with the
 * same id (the default, the host name) refuses to start: exit 3, naming the first
 * one's pid, and touching nothing. A third with another id (another node's daemon)
 * starts beside it, and its recovery keeps the first one's save in flight, whose
 * owner lives. The first one's save then commits and verifies. */
#include "kc_testlib.h"
#include "format/layout.h"

static const kc_tensor ts[] = { { CK_F32, 2, { 256, 96 }, "S(0)" },
                                { CK_BF16, 1, { 5000 }, "S(0)" } };

int main(void)
{
    kc_watchdog(100);
    kc_env e;
    kc_open(&e, true, "kdsecond", 2, NULL, NULL);
    ck_mesh mesh;
    REQUIRE(ck_mesh_parse("2", NULL, &mesh, NULL) == 0, "mesh");
    ck_client_save *sv[2];
    kc_part part[2] = { 0 };
    ck_err err = { 0 };
    for (uint64_t r = 0; r < 2; r++) {
        REQUIRE(kc_begin(e.cl[r], &sv[r], "s1", 1, &mesh, r, ts, 2, &kc_job, &err) == 0,
                "begin rank %llu: %s", (unsigned long long)r, ck_err_msg(&err));
        kc_declare(sv[r], &mesh, r, ts, 2, &part[r], false);
    }
    REQUIRE(ck_client_submit(sv[0], &kc_copy, &err) == 0, "submit rank 0: %s", ck_err_msg(&err));
    REQUIRE(ck_client_commit(sv[0], &err) == 0, "commit: %s", ck_err_msg(&err));

    char sock2[PATH_MAX + 16], log2[PATH_MAX + 16], pend[PATH_MAX + 16];
    snprintf(sock2, sizeof sock2, "%s/.second.sock", e.root);
    snprintf(log2, sizeof log2, "%s.second.log", e.root);
    snprintf(pend, sizeof pend, "%s/%s", e.root, CK_PENDING);
    int before = kd_count_entries(pend, true);
    const char *argv[] = { CKPTD_PATH, "--root", e.root, "--socket", sock2, "--foreground",
                           "--log", log2, NULL };
    int rc = kd_run(argv, NULL, 20);
    CHECK(rc == 3, "a second ckptd on the root exited %d, not 3 (see %s)", rc, log2);
    char pid[32];
    snprintf(pid, sizeof pid, "pid %d", (int)e.d.pid);
    CHECK(kd_log_has(log2, "served by another ckptd") && kd_log_has(log2, pid),
          "the second ckptd's refusal does not name the first one (%s): see %s", pid, log2);
    CHECK(!kd_log_has(log2, "removed incomplete save"),
          "the second ckptd removed a save in flight: see %s", log2);
    CHECK(kd_count_entries(pend, true) == before, "the second ckptd changed %s", pend);
    CHECK(!kd_sock_alive(sock2), "the second ckptd listens on %s", sock2);

    kd_proc other;
    kd_start_id(&other, e.root, "other-node", NULL);
    CHECK(kd_log_has(other.log, "kept save in progress") &&
          !kd_log_has(other.log, "removed incomplete save"),
          "a daemon of another id did not keep the save in flight: see %s", other.log);
    CHECK(kd_count_entries(pend, true) == before, "the daemon of another id changed %s", pend);
    CHECK(kd_term(&other, 30) == 0, "the daemon of another id did not exit 0 (see %s)",
          other.log);

    CHECK(ck_client_submit(sv[1], &kc_copy, &err) == 0, "submit rank 1: %s", ck_err_msg(&err));
    for (uint64_t r = 0; r < 2; r++) {
        CHECK(ck_client_wait(sv[r], CK_CLIENT_COMMITTED, &err) == 0, "rank %llu: the first ckptd's save failed "
              "after a second ckptd tried the root: %s", (unsigned long long)r,
              ck_err_msg(&err));
        ck_client_save_free(sv[r]);
        kc_part_free(&part[r]);
    }
    CHECK(kd_verify_tool(e.root, "s1") == 0, "s1 does not verify");
    kc_close(&e);
    kc_remove(&e);
    if (tl_failures)
        return 1;
    unlink(log2);
    unlink(other.log);
    printf("ok: a second ckptd of the same id exits 3 naming the first; one of another id "
           "serves beside it and keeps its save in flight, which commits\n");
    return 0;
}
