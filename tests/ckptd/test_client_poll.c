/* Client API, ck_client_poll / ck_client_wait, embedded and through ckptd.
 *
 * A good save of two ranks: before submit, poll says BUILDING and wait and commit
 * are refused. After submit returns, every poll says STAGED, DURABLE or COMMITTED
 * (never BUILDING or FAILED), states only move forward, and COMMITTED never shows
 * before rank 0 asked for the commit; polling alone (no wait) sees the part become
 * DURABLE, while the checkpoint is still invisible. After the commit, wait returns 0
 * on both ranks, poll says COMMITTED, and the checkpoint is visible and deep-verifies.
 *
 * A failed save of four ranks (an injected EIO on the first fsync: --inject-fault
 * fsync@0 for ckptd, a fault engine for the embedded engine): wait returns the error
 * on every rank, poll says FAILED with the same error, nothing is visible, and a retry
 * of the same name on the same clients commits. Both modes agree on the outcome. */
#include "kc_testlib.h"
#include "test_engines.h"
#include "format/layout.h"

static const kc_tensor good_tensors[] = {
    { CK_F32, 2, { 2048, 1027 }, "S(0)" },
    { CK_BF16, 1, { 333 }, "R" },
};

static const kc_tensor fail_tensors[] = {
    { CK_F32, 2, { 1024, 1024 }, "R,S(0)" },
    { CK_I16, 2, { 77, 3 }, "S(1),R" },
};

typedef struct tracker {
    ck_client_state last;
    bool commit_asked;
    int polls;
} tracker;

/* One poll of a save whose submit returned 0: a sane state, never backwards. */
static ck_client_state poll_ok(const char *mode, ck_client_save *sv, uint64_t rank, tracker *t)
{
    ck_client_state st = (ck_client_state)-1;
    ck_err err = { 0 };
    int rc = ck_client_poll(sv, &st, &err);
    t->polls++;
    CHECK(rc == 0, "%s: rank %llu: poll of a good save: %d (%s)", mode, (unsigned long long)rank,
          rc, ck_err_msg(&err));
    CHECK(kc_state_in_flight_or_done(st), "%s: rank %llu: poll after submit says %s",
          mode, (unsigned long long)rank, kc_state_name(st));
    CHECK(st >= t->last, "%s: rank %llu: poll went back from %s to %s", mode,
          (unsigned long long)rank, kc_state_name(t->last), kc_state_name(st));
    CHECK(st != CK_CLIENT_COMMITTED || t->commit_asked, "%s: rank %llu: COMMITTED before the "
          "commit was asked for", mode, (unsigned long long)rank);
    if (st > t->last && kc_state_in_flight_or_done(st))
        t->last = st;
    return st;
}

static void good_save(kc_env *e, uint64_t *digest)
{
    const char *mode = kc_mode(e);
    ck_mesh mesh;
    REQUIRE(ck_mesh_parse("2", NULL, &mesh, NULL) == 0, "mesh");
    ck_err err = { 0 };
    ck_client_save *sv[2];
    kc_part parts[2] = { 0 };
    tracker tr[2] = { 0 };
    for (uint64_t r = 0; r < 2; r++) {
        REQUIRE(kc_begin(e->cl[r], &sv[r], "pw", 21, &mesh, r, good_tensors, 2, &kc_job, &err) == 0,
                "%s: begin: %s", mode, ck_err_msg(&err));
        kc_declare(sv[r], &mesh, r, good_tensors, 2, &parts[r], false);
        ck_client_state st = (ck_client_state)-1;
        CHECK(ck_client_poll(sv[r], &st, &err) == 0 && st == CK_CLIENT_BUILDING,
              "%s: rank %llu: poll before the submit says %s", mode, (unsigned long long)r,
              kc_state_name(st));
        memset(&err, 0, sizeof err);
        CHECK(ck_client_wait(sv[r], CK_CLIENT_COMMITTED, &err) == -EINVAL &&
                  strstr(ck_err_msg(&err), "before the submit"),
              "%s: rank %llu: wait before the submit: \"%s\"", mode, (unsigned long long)r,
              ck_err_msg(&err));
    }
    memset(&err, 0, sizeof err);
    CHECK(ck_client_commit(sv[0], &err) == -EINVAL, "%s: commit before the submit accepted",
          mode);

    REQUIRE(ck_client_submit(sv[0], &kc_copy, &err) == 0, "%s: rank 0: submit: %s", mode,
            ck_err_msg(&err));
    poll_ok(mode, sv[0], 0, &tr[0]);
    /* Polling alone moves it on: rank 0's part becomes durable without rank 1. */
    double t0 = kd_now();
    while (poll_ok(mode, sv[0], 0, &tr[0]) < CK_CLIENT_DURABLE && kd_now() - t0 < 60)
        kd_sleep_ms(1);
    CHECK(tr[0].last == CK_CLIENT_DURABLE, "%s: rank 0: polling never saw its part durable "
          "(last %s)", mode, kc_state_name(tr[0].last));
    CHECK(!kd_exists(e->root, "pw"), "%s: visible before rank 1 saved", mode);

    REQUIRE(ck_client_submit(sv[1], &kc_copy, &err) == 0, "%s: rank 1: submit: %s", mode,
            ck_err_msg(&err));
    poll_ok(mode, sv[1], 1, &tr[1]);
    memset(&err, 0, sizeof err);
    CHECK(ck_client_commit(sv[1], &err) == -EINVAL && strstr(ck_err_msg(&err), "rank 0"),
          "%s: rank 1 asked for the commit: \"%s\"", mode, ck_err_msg(&err));
    for (int i = 0; i < 50; i++)
        poll_ok(mode, sv[i & 1], (uint64_t)(i & 1), &tr[i & 1]);
    CHECK(!kd_exists(e->root, "pw"), "%s: visible before the commit was asked for", mode);

    tr[0].commit_asked = tr[1].commit_asked = true;
    REQUIRE(ck_client_commit(sv[0], &err) == 0, "%s: commit: %s", mode, ck_err_msg(&err));
    for (int i = 0; i < 20; i++)
        poll_ok(mode, sv[i & 1], (uint64_t)(i & 1), &tr[i & 1]);
    for (uint64_t r = 0; r < 2; r++) {
        CHECK(ck_client_wait(sv[r], CK_CLIENT_COMMITTED, &err) == 0, "%s: rank %llu: wait: %s", mode,
              (unsigned long long)r, ck_err_msg(&err));
        CHECK(poll_ok(mode, sv[r], r, &tr[r]) == CK_CLIENT_COMMITTED, "%s: rank %llu: poll "
              "after wait says %s", mode, (unsigned long long)r, kc_state_name(tr[r].last));
        CHECK(ck_client_wait(sv[r], CK_CLIENT_COMMITTED, &err) == 0, "%s: rank %llu: a second wait: %s", mode,
              (unsigned long long)r, ck_err_msg(&err));
    }
    CHECK(kd_exists(e->root, "pw"), "%s: not visible after wait returned", mode);
    CHECK(tl_verify_deep(e->root, "pw", KC_SEED) == 0, "%s: the checkpoint is bad", mode);
    *digest = kc_digest(e->root, "pw");
    for (uint64_t r = 0; r < 2; r++) {
        ck_client_save_free(sv[r]);
        kc_part_free(&parts[r]);
    }
}

/* Four ranks; returns the error code every rank got (0 if they disagree). */
static int failed_save(kc_env *e, const char *name, bool expect_fail)
{
    const char *mode = kc_mode(e);
    ck_mesh mesh;
    REQUIRE(ck_mesh_parse("2x2", NULL, &mesh, NULL) == 0, "mesh");
    ck_err err = { 0 };
    ck_client_save *sv[4];
    kc_part parts[4] = { 0 };
    int async_rc[4], code = 1;
    for (uint64_t r = 0; r < 4; r++) {
        REQUIRE(kc_begin(e->cl[r], &sv[r], name, 22, &mesh, r, fail_tensors, 2, &kc_job, &err) == 0,
                "%s: begin: %s", mode, ck_err_msg(&err));
        kc_declare(sv[r], &mesh, r, fail_tensors, 2, &parts[r], true);
        memset(&err, 0, sizeof err);
        async_rc[r] = ck_client_submit(sv[r], &kc_copy, &err);
        CHECK(async_rc[r] == 0 || expect_fail, "%s: %s: rank %llu: submit: %s", mode, name,
              (unsigned long long)r, ck_err_msg(&err));
    }
    if (expect_fail) {
        /* Ask for the commit only once another rank has heard of the failure: through
         * ckptd, rank 0's COMMIT then crosses it on the wire. (ckptd answered it with a
         * second ERROR naming the save, which failed rank 0's retry of that name.) */
        double t0 = kd_now();
        bool heard = false;
        while (!heard && kd_now() - t0 < 30) {
            for (uint64_t r = 1; r < 4 && !heard; r++) {
                ck_client_state st = CK_CLIENT_BUILDING;
                ck_err perr = { 0 };
                ck_client_poll(sv[r], &st, &perr);
                heard = st == CK_CLIENT_FAILED;
            }
            if (!heard)
                kd_sleep_ms(1);
        }
        CHECK(heard, "%s: %s: no rank heard of the injected failure", mode, name);
    }
    if (async_rc[0] == 0) {
        int rc = ck_client_commit(sv[0], &err);
        CHECK(rc == 0 || expect_fail, "%s: %s: commit: %s", mode, name, ck_err_msg(&err));
    }
    if (expect_fail && e->connected) {
        /* Two STATUS round trips: ckptd has handled that COMMIT, and whatever it
         * answered is in rank 0's socket behind the failure's ERROR. */
        kc_status(e->d.sock);
        kc_status(e->d.sock);
    }
    bool all_async = true;
    for (uint64_t r = 0; r < 4; r++)
        all_async &= async_rc[r] == 0;
    for (uint64_t r = 0; r < 4; r++) {
        if (!expect_fail && !all_async) {
            /* A rank did not stage: the others would wait for it forever. */
            ck_client_save_free(sv[r]);
            kc_part_free(&parts[r]);
            code = 0;
            continue;
        }
        memset(&err, 0, sizeof err);
        int rc = ck_client_wait(sv[r], CK_CLIENT_COMMITTED, &err);
        char msg[CK_ERR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", ck_err_msg(&err));
        /* Rank 0 does not poll the failed save: a poll would read (and so hide) any
         * further message about it that ckptd sent, which must not reach the retry. */
        bool polls = !(expect_fail && r == 0);
        ck_client_state st = (ck_client_state)-1;
        ck_err perr = { 0 };
        int prc = polls ? ck_client_poll(sv[r], &st, &perr) : 0;
        if (expect_fail) {
            CHECK(rc == -EIO && strstr(msg, "Input/output error"), "%s: %s: rank %llu: wait "
                  "on the failed save returned %d: \"%s\"", mode, name, (unsigned long long)r,
                  rc, msg);
            CHECK(!polls || (st == CK_CLIENT_FAILED && prc == rc &&
                             !strcmp(ck_err_msg(&perr), msg)),
                  "%s: %s: rank %llu: poll after the failure says %s, %d \"%s\"", mode, name,
                  (unsigned long long)r, kc_state_name(st), prc, ck_err_msg(&perr));
        } else {
            CHECK(rc == 0, "%s: %s: rank %llu: wait: %s", mode, name, (unsigned long long)r,
                  msg);
            CHECK(st == CK_CLIENT_COMMITTED, "%s: %s: rank %llu: poll says %s", mode, name,
                  (unsigned long long)r, kc_state_name(st));
        }
        code = code == 1 ? rc : code == rc ? code : 0;
        ck_client_save_free(sv[r]);
        kc_part_free(&parts[r]);
    }
    return code;
}

static int run(bool connected, uint64_t *digest)
{
    kc_env e;
    kc_open(&e, connected, "kcpoll", 2, NULL, NULL);
    good_save(&e, digest);
    kc_close(&e);
    kc_remove(&e);

    ck_engine *fault = NULL;
    if (!connected) {
        ck_fault f;
        REQUIRE(ck_fault_parse("fsync@0", &f) == 0, "fault");
        REQUIRE(ck_engine_fault_new(ck_engine_default(), f, &fault) == 0, "fault engine");
    }
    kc_open(&e, connected, "kcpollf", 4, (const char *const[]){ "--inject-fault", "fsync@0",
                                                                NULL }, fault);
    const char *mode = kc_mode(&e);
    int code = failed_save(&e, "pw-fail", true);
    char pend[PATH_MAX + 16];
    snprintf(pend, sizeof pend, "%s/%s", e.root, CK_PENDING);
    CHECK(!kd_exists(e.root, "pw-fail"), "%s: the failed save is visible", mode);
    CHECK(kd_count_entries(pend, true) == 0, "%s: debris under .pending", mode);
    /* The fault fired once: the same clients retry the same name, and it commits. */
    CHECK(failed_save(&e, "pw-fail", false) == 0, "%s: the retry failed", mode);
    CHECK(tl_verify_deep(e.root, "pw-fail", KC_SEED) == 0, "%s: the retry is bad", mode);
    kc_close(&e);
    kc_remove(&e);
    ck_engine_destroy(fault);
    return code;
}

int main(void)
{
    kc_watchdog(100);
    uint64_t de = 0, dc = 0;
    int ce = run(false, &de);
    int cc = run(true, &dc);
    CHECK(de && de == dc, "the two modes committed different checkpoints");
    CHECK(ce == -EIO && ce == cc, "the failed save: error %d embedded, %d connected (every rank "
          "alike, -EIO)", ce, cc);
    if (tl_failures)
        return 1;
    printf("ok: poll sane and monotone, wait 0 then visible and verified; an injected fsync "
           "EIO reaches every rank through wait and poll, nothing visible, the retry commits; "
           "both modes\n");
    return 0;
}
