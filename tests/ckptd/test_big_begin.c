/* Bounded work per message. One BEGIN of ~130 bytes can declare a plan of millions of
 * shard records; ckptd used to compute it inline (13 s with every other client
 * waiting) and keep its 6 GiB after the client left. Now:
 *   - a BEGIN whose plan can never fit in --plan-memory (the 1024x1024 mesh with 4
 *     tensors of 2^20 rows: 4M shard records) gets an ERROR naming the save and the
 *     limit, and costs nothing;
 *   - a large plan that fits (256x256 mesh, 262144 shard records) is computed by the
 *     planner thread: another client's STATUS is answered meanwhile (within a second,
 *     a bound on a hang, not a timing), the ADMIT follows;
 *   - when that client goes away without staging, the save is abandoned and the
 *     daemon's RSS falls back near where it started (printed);
 *   - a BEGIN over the hard limit of shard records per save is refused and closed. */
#include <sys/mman.h>

#include "kc_testlib.h"

static int conn(const char *sock)
{
    int fd;
    ck_err err = { 0 };
    REQUIRE(ck__conn_connect(sock, &fd, &err) == 0, "%s", ck_err_msg(&err));
    return fd;
}

/* BEGIN of rank 0 of NAME: 4 f32 tensors of 2^20 x 16, S(0) on every mesh dim. */
static void send_begin(int fd, const char *name, const char *mesh, uint64_t staging)
{
    kc_wire_tensor t[4];
    kc_wire d = { .step = 1, .ntensors = 4, .tensors = t, .staging_size = staging,
                   .job = kc_job };
    snprintf(d.name, sizeof d.name, "%s", name);
    REQUIRE(ck_mesh_parse(mesh, NULL, &d.mesh, NULL) == 0, "mesh %s", mesh);
    for (int i = 0; i < 4; i++) {
        t[i] = (kc_wire_tensor){ .dtype = CK_F32, .ndim = 2, .shape = { 1u << 20, 16 } };
        snprintf(t[i].name, sizeof t[i].name, "t%d", i);
        for (int k = 0; k < d.mesh.ndim; k++)
            t[i].pl[k] = (ck_placement){ .kind = CK_SHARD, .dim = 0 };
    }
    int mfd = memfd_create("big", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    REQUIRE(mfd >= 0 && ftruncate(mfd, (off_t)staging) == 0 &&
            fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK) == 0, "memfd");
    ck__wbuf w = { 0 };
    ck__proto_start(&w, CK_MSG_BEGIN);
    kc_put_wire(&w, &d);
    ck__proto_end(&w);
    ck_err err = { 0 };
    REQUIRE(ck__conn_send(fd, &w, mfd, &err) == 0, "BEGIN %s: %s", name, ck_err_msg(&err));
    ck__wbuf_free(&w);
    close(mfd);
}

/* The next reply within secs: its type (0 on a timeout or a close), the message of
 * an ERROR into msg. */
static uint16_t reply(int fd, double secs, char *msg, size_t len)
{
    struct timeval tv = { .tv_sec = (time_t)secs, .tv_usec = (long)((secs - (double)(time_t)secs) * 1e6) };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return kc_reply(fd, msg, len);
}

/* Sends STATUS on a fresh connection; whether STATUS_OK came within a second, and the
 * saves in flight it listed. */
static bool status_within_1s(const char *sock, uint32_t *n)
{
    int fd = conn(sock);
    ck__wbuf w = { 0 };
    ck__proto_start(&w, CK_MSG_STATUS);
    ck__proto_end(&w);
    ck__conn_send(fd, &w, -1, NULL);
    ck__wbuf_free(&w);
    struct timeval tv = { .tv_sec = 1 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ck__msg m = { 0 };
    bool ok = ck__conn_recv(fd, true, &m, NULL) > 0 && m.type == CK_MSG_STATUS_OK;
    ck__proto_status st = { 0 };
    if (ok && ck__proto_get_status(m.payload, m.len, &st, NULL) == 0) {
        *n = st.n;
        free(st.ckpts);
    }
    free(m.payload);
    close(fd);
    return ok;
}

int main(void)
{
    char root[PATH_MAX], msg[CK_ERR_MSG_MAX];
    tl_tmpdir(root, sizeof root, "kdbig");
    kd_proc d;
    kd_start(&d, root, NULL);
    uint32_t n = 0;
    REQUIRE(status_within_1s(d.sock, &n), "no STATUS at start");
    long rss0 = kd_rss_kib(d.pid);

    /* Never fits: refused at once, the connection stays. */
    int a = conn(d.sock);
    send_begin(a, "absurd", "1024x1024", 16384);
    CHECK(status_within_1s(d.sock, &n), "STATUS waited more than a second behind the "
          "1024x1024 BEGIN");
    msg[0] = '\0';
    CHECK(reply(a, 10, msg, sizeof msg) == CK_MSG_ERROR && strstr(msg, "absurd") &&
          strstr(msg, "--plan-memory"), "the 1024x1024 BEGIN was not refused naming the save "
          "and --plan-memory: '%s'", msg);
    long rss_absurd = kd_rss_kib(d.pid);

    /* Fits: planned beside the loop, which answers STATUS meanwhile. */
    send_begin(a, "large", "256x256", 16384);
    double t0 = kd_now();
    CHECK(status_within_1s(d.sock, &n), "STATUS waited more than a second behind a large plan");
    double t_status = kd_now() - t0;
    msg[0] = '\0';
    uint16_t got = reply(a, 120, msg, sizeof msg);
    double t_admit = kd_now() - t0;
    CHECK(got == CK_MSG_ADMIT, "the 256x256 BEGIN got no ADMIT (type %u: %s)", got, msg);
    long rss1 = kd_rss_kib(d.pid);
    close(a);
    for (int i = 0; i < 500 && status_within_1s(d.sock, &n) && n; i++)
        kd_sleep_ms(20);
    CHECK(n == 0, "the large save is still in flight after its client left");
    for (int i = 0; i < 3000 && !kd_log_has(d.log, "checkpoint large failed"); i++)
        kd_sleep_ms(10);
    kd_sleep_ms(100);
    long rss2 = kd_rss_kib(d.pid);
    printf("daemon RSS: %ld MiB at start, %ld MiB after the refused 1024x1024 BEGIN, %ld MiB "
           "with the 256x256 plan (ADMIT after %.2f s; STATUS meanwhile in %.3f s), %ld MiB "
           "after its client left\n", rss0 >> 10, rss_absurd >> 10, rss1 >> 10, t_admit,
           t_status, rss2 >> 10);
    CHECK(rss_absurd - rss0 < 16 << 10, "the refused BEGIN cost %ld MiB", (rss_absurd - rss0) >> 10);
    if (!KD_RSS_CHECKED)
        printf("(RSS not checked under ASan: its allocator keeps freed memory)\n");
    CHECK(!KD_RSS_CHECKED || rss2 - rss0 < 32 << 10 || rss2 - rss0 < (rss1 - rss0) / 4,
          "the daemon kept %ld MiB of the %ld MiB the large plan took", (rss2 - rss0) >> 10,
          (rss1 - rss0) >> 10);
    CHECK(kd_log_has(d.log, "checkpoint large: abandoned"), "the abandon is not logged");

    /* Over the hard limit of shard records per save: refused, the connection closed. */
    a = conn(d.sock);
    kc_wire_tensor t = { .name = "w", .dtype = CK_U8, .ndim = 1, .shape = { 1u << 20 },
                          .pl = { { CK_SHARD, 0 }, { CK_SHARD, 0 } } };
    kc_wire_tensor many[20];
    for (int i = 0; i < 20; i++) {
        many[i] = t;
        snprintf(many[i].name, sizeof many[i].name, "w%d", i);
    }
    kc_wire dl = { .name = "toomany", .step = 1, .ntensors = 20, .tensors = many,
                    .staging_size = 4096, .job = kc_job };
    ck_mesh_parse("1024x1024", NULL, &dl.mesh, NULL);
    int mfd = memfd_create("m", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    REQUIRE(mfd >= 0 && ftruncate(mfd, 4096) == 0 && fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK) == 0,
            "memfd");
    ck__wbuf w = { 0 };
    ck__proto_start(&w, CK_MSG_BEGIN);
    kc_put_wire(&w, &dl);
    ck__proto_end(&w);
    ck__conn_send(a, &w, mfd, NULL);
    ck__wbuf_free(&w);
    close(mfd);
    msg[0] = '\0';
    CHECK(reply(a, 10, msg, sizeof msg) == CK_MSG_ERROR && strstr(msg, "shard records"),
          "20M shard records were not refused: '%s'", msg);
    CHECK(reply(a, 10, NULL, 0) == 0, "the connection stayed open after an out-of-limit BEGIN");
    close(a);

    /* The new options refuse bad values with a message and exit 2. */
    static const char *bad[][2] = { { "--plan-memory", "1KiB" }, { "--plan-memory", "lots" },
                                    { "--drain-timeout", "-5" }, { "--drain-timeout", "1e9" },
                                    { "--rank-timeout", "soon" }, { "--rank-timeout", "-1" } };
    char out[PATH_MAX + 16];
    snprintf(out, sizeof out, "%s.usage", root);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        unlink(out);
        const char *argv[] = { CKPTD_PATH, "--root", root, "--socket", out, "--foreground",
                               bad[i][0], bad[i][1], NULL };
        int rc = kd_run(argv, out, 10);
        CHECK(rc == 2 && kd_log_has(out, bad[i][0]), "ckptd %s %s: exit %d without naming "
              "the option", bad[i][0], bad[i][1], rc);
    }
    unlink(out);

    CHECK(kd_wait_pid(kd_synth(root, d.sock, "fine", "2", "2", "1MiB", NULL), 60) == 0,
          "a normal save failed after the large BEGINs");
    CHECK(tl_verify_deep(root, "fine", 7) == 0, "the normal save is bad");
    CHECK(kd_term(&d, 30) == 0, "ckptd did not exit 0");
    if (tl_failures)
        return 1;
    tl_rmtree(root);
    unlink(d.log);
    printf("ok: an absurd plan refused at once, a large one planned off the event loop, "
           "its memory given back\n");
    return 0;
}
