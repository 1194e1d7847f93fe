/* A save that waits for a rank that never comes fails, naming the rank, and frees its
 * state (ckptd --rank-timeout). World 3, ckptd with --rank-timeout 1:
 *   rank 0 stages its part and asks for the commit;
 *   rank 1 never connects (a rank that died before its first BEGIN: no client of it
 *          ever goes away, so nothing else would end the save);
 *   rank 2 sends BEGIN, is admitted, and never stages (a hung rank).
 * Rank 0's save must fail with an error naming rank 1 as never begun and rank 2 as
 * not staged, the daemon must hold no save afterwards, and nothing may be visible.
 * While rank 0's client (which held the failed save) is connected, a late rank 1 of
 * that attempt gets its failure; once no client of it is left, a retry of the same
 * name from new clients commits, whatever order its ranks arrive in (rank 1 first:
 * ckptd used to refuse a rank that was not part of the failed attempt).
 * Without the timeout the first wait never returned. */

#include "kc_testlib.h"

#define NAME "step-7"

static const kc_tensor ts[] = { { CK_F32, 2, { 384, 64 }, "S(0)" } };

/* Begins and stages rank's part (rank 0 asks for the commit); the error of submit
 * or of the commit, else 0. */
static int begin(ck_client *cl, uint64_t rank, kc_part *part, ck_client_save **sv,
                 ck_err *err)
{
    ck_mesh mesh;
    ck_mesh_parse("3", NULL, &mesh, NULL);
    REQUIRE(kc_begin(cl, sv, NAME, 7, &mesh, rank, ts, 1, &kc_job, err) == 0, "begin rank %llu: %s",
            (unsigned long long)rank, ck_err_msg(err));
    kc_declare(*sv, &mesh, rank, ts, 1, part, false);
    int r = ck_client_submit(*sv, &kc_copy, err);
    if (r == 0 && rank == 0)
        r = ck_client_commit(*sv, err);
    return r;
}

/* Rank 2 by hand: BEGIN with a staging memfd, wait for ADMIT, never STAGED. Returns
 * the connection, which stays open. */
static int hung_rank(const char *sock)
{
    ck_err err = { 0 };
    kc_wire_tensor t = { .name = "t0", .dtype = CK_F32, .ndim = 2, .shape = { 384, 64 } };
    kc_wire d = { .name = NAME, .step = 7, .rank = 2, .ntensors = 1,
                   .tensors = &t, .staging_size = 4 << 20 };
    ck_mesh_parse("3", NULL, &d.mesh, NULL);
    REQUIRE(ck_placements_parse("S(0)", 1, 2, t.pl, &err) == 0, "%s", ck_err_msg(&err));
    int fd = kc_raw_begin(sock, &d);
    ck__msg m;
    REQUIRE(ck__conn_recv(fd, true, &m, &err) > 0 && m.type == CK_MSG_ADMIT,
            "rank 2's BEGIN was not admitted (type %u): %s", m.type, ck_err_msg(&err));
    free(m.payload);
    return fd;
}

int main(void)
{
    kc_watchdog(100);
    const char *extra[] = { "--rank-timeout", "1", NULL };
    kc_env e;
    kc_open(&e, true, "kdlost", 3, extra, NULL);
    ck_client_close(e.cl[1]);          /* rank 1 never comes */
    e.cl[1] = NULL;
    kc_part part[3] = { 0 };
    ck_err err = { 0 };
    ck_client_save *sv0;
    REQUIRE(begin(e.cl[0], 0, &part[0], &sv0, &err) == 0, "rank 0: %s", ck_err_msg(&err));
    int hung = hung_rank(e.d.sock);
    int r = ck_client_wait(sv0, CK_CLIENT_COMMITTED, &err);
    CHECK(r < 0, "rank 0's save did not fail although rank 1 never came");
    CHECK(strstr(ck_err_msg(&err), "rank-timeout") &&
          strstr(ck_err_msg(&err), "rank(s) 1 never began") &&
          strstr(ck_err_msg(&err), "rank(s) 2 began but never staged"),
          "the failure does not name the missing ranks: %s", ck_err_msg(&err));
    printf("rank 0 was told: %s\n", ck_err_msg(&err));
    ck_client_save_free(sv0);
    kc_part_free(&part[0]);
    /* The hung rank's connection hears it too. */
    ck__msg m;
    CHECK(ck__conn_recv(hung, true, &m, &err) > 0 && m.type == CK_MSG_ERROR,
          "the hung rank 2 was not told that the save failed");
    free(m.payload);
    close(hung);

    ck__proto_status st = kc_status(e.d.sock);
    CHECK(st.n == 0 && st.staging_used == 0, "ckptd still holds %u save(s) and %llu bytes of "
          "staging after the failure", st.n, (unsigned long long)st.staging_used);
    CHECK(!kd_exists(e.root, NAME), "the failed save is visible");
    CHECK(kd_log_has(e.d.log, "rank(s) 1 never began"), "the failure is not logged: see %s",
          e.d.log);

    /* A late rank of the failed attempt, while rank 0's client is still connected. */
    ck_client *late;
    ck_client_opts o = { .socket = e.d.sock };
    REQUIRE(ck_client_open(&late, NULL, &o, &err) == 0, "%s", ck_err_msg(&err));
    ck_client_save *svl;
    r = begin(late, 1, &part[1], &svl, &err);
    CHECK((r < 0 || ck_client_wait(svl, CK_CLIENT_COMMITTED, &err) < 0) && strstr(ck_err_msg(&err), "never began"),
          "a late rank of the failed attempt was not told of its failure: %s",
          ck_err_msg(&err));
    ck_client_save_free(svl);
    kc_part_free(&part[1]);
    ck_client_close(late);

    /* The retry: new clients only; rank 1, which the failed attempt never saw, first. */
    ck_client_close(e.cl[0]);
    ck_client_close(e.cl[2]);
    ck_client *cl[3];
    ck_client_save *sv[3];
    static const int order[3] = { 1, 2, 0 };
    for (int i = 0; i < 3; i++) {
        int k = order[i];
        REQUIRE(ck_client_open(&cl[k], NULL, &o, &err) == 0, "%s", ck_err_msg(&err));
        REQUIRE(begin(cl[k], (uint64_t)k, &part[k], &sv[k], &err) == 0,
                "the retry of %s, rank %d: %s", NAME, k, ck_err_msg(&err));
    }
    for (int k = 0; k < 3; k++) {
        r = ck_client_wait(sv[k], CK_CLIENT_COMMITTED, &err);
        CHECK(r == 0, "the retry of %s, rank %d: %s", NAME, k, ck_err_msg(&err));
        ck_client_save_free(sv[k]);
        kc_part_free(&part[k]);
    }
    CHECK(kd_verify_tool(e.root, NAME) == 0, "the retried %s does not verify", NAME);
    for (int k = 2; k >= 0; k--)
        ck_client_close(cl[k]);
    memset(e.cl, 0, sizeof e.cl);
    kc_close(&e);
    if (tl_failures)
        return 1;
    kc_remove(&e);
    printf("ok: a save waiting for a rank that never came failed naming it, its state was "
           "freed, and a retry of the name from new clients committed\n");
    return 0;
}
