/* Client API, ck_client_close right after submit, embedded and through ckptd: a
 * rank process saves from memory, asks for the commit, junks its buffers, closes its
 * client without waiting for (or freeing) the save, and exits. The checkpoint commits
 * with the original bytes: close waits until every part the client staged is durable,
 * and embedded, the engine finishes the commit before close returns. (Embedded, close
 * unmapped the staging areas while the engine still wrote from them: SIGSEGV.) Both
 * modes commit the same checkpoint. */
#include "kc_testlib.h"

static const kc_tensor tensors[] = {
    { CK_F32, 2, { 2048, 1031 }, "S(0)" },
    { CK_I16, 1, { 999 }, "R" },
};

/* The rank process: exits 0 once close returned, 2 on an error. */
static void rank_main(kc_env *e)
{
    ck_err err = { 0 };
    ck_mesh mesh;
    ck_mesh_parse("1", NULL, &mesh, NULL);
    ck_client_save *sv;
    kc_part p = { 0 };
    if (kc_begin(e->cl[0], &sv, "closed", 9, &mesh, 0, tensors, 2, &kc_job, &err) < 0)
        goto fail;
    kc_declare(sv, &mesh, 0, tensors, 2, &p, true);
    if (ck_client_submit(sv, &kc_copy, &err) < 0 || ck_client_commit(sv, &err) < 0)
        goto fail;
    for (int t = 0; t < 2; t++)
        memset(p.buf[t], 0x5a, p.bytes[t]);
    ck_client_close(e->cl[0]);
    _exit(0);      /* sv and p stay allocated: the point is a rank that just leaves */
fail:
    fprintf(stderr, "%s: rank 0: %s\n", kc_mode(e), ck_err_msg(&err));
    _exit(2);
}

static uint64_t run(bool connected)
{
    char root[PATH_MAX];
    kd_proc d = { 0 };
    tl_tmpdir(root, sizeof root, "kcclose");
    if (connected) {
        kd_start(&d, root, NULL);
        kc_daemon_pid = d.pid;
    }
    const char *mode = connected ? "connected" : "embedded";
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        /* The client is opened in the child: the embedded engine's threads are its own. */
        kc_env e = { .connected = connected, .world = 1 };
        snprintf(e.root, sizeof e.root, "%s", root);
        ck_client_opts o = { .writers = 2, .hash_threads = 2, .embedded = !connected,
                             .socket = connected ? d.sock : NULL };
        ck_err err = { 0 };
        if (ck_client_open(&e.cl[0], root, &o, &err) < 0) {
            fprintf(stderr, "%s: open: %s\n", mode, ck_err_msg(&err));
            _exit(2);
        }
        rank_main(&e);
    }
    int rc = kd_wait_pid(pid, 60);
    CHECK(rc == 0, "%s: the rank process exited %d (139: SIGSEGV)", mode, rc);
    if (connected) {
        /* ckptd commits on its own once the part is staged and the commit asked for. */
        double t0 = kd_now();
        while (!kd_exists(root, "closed") && kd_now() - t0 < 30)
            kd_sleep_ms(5);
    }
    CHECK(kd_exists(root, "closed"), "%s: not committed after the rank closed its client", mode);
    CHECK(tl_verify_deep(root, "closed", KC_SEED) == 0, "%s: the checkpoint is bad (junk "
          "written after submit leaked in?)", mode);
    uint64_t h = kc_digest(root, "closed");
    if (connected) {
        CHECK(kd_term(&d, 30) == 0, "ckptd did not exit 0 on SIGTERM");
        kc_daemon_pid = 0;
    }
    if (!tl_failures) {
        tl_rmtree(root);
        if (connected)
            unlink(d.log);
    }
    return h;
}

int main(void)
{
    return kc_both_modes(run, true, "a rank that closes its client right after submit "
                         "and exits still commits the original bytes, in both modes");
}
