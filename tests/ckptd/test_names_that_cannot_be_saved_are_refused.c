/* The name check admits only names a save can use (issue 21, defect 9; docs/FORMAT.md,
 * "Names"): the longest file name a save makes of NAME is .pending/NAME.TOKEN-meet, 21
 * bytes longer, and a file name holds 255 bytes, so a checkpoint name has at most 234.
 * On the build this test was written against, names of 243-255 bytes passed the check
 * and then failed deep in the save ("ckpt-synth: no error", rc 2, or a cut-off path).
 *   - ck_name_check takes 234 bytes, refuses 235, 243 and 255 saying the limit;
 *   - a 234-byte name saves: embedded, through one ckptd, and shared by two ckptd (the
 *     meeting's name is the longest); 243 and 255 are refused, naming the limit, by the
 *     client, by ckptd itself (a BEGIN sent by hand) and by ckpt-synth;
 *   - a checkpoint already on disk under a longer name (an older release took up to
 *     255) still opens, lists and verifies. */
#include "ck/catalog.h"
#include "kc_testlib.h"

static void name_of(char *out, size_t len)
{
    memset(out, 'n', len);
    memcpy(out, "long-", 5);
    out[len] = '\0';
}

/* ckpt-synth ROOT --name NAME, world ranks through socks (NULL: embedded): its status;
 * its output in out. */
static int synth(const char *root, const char *name, const char *socks, const char *world,
                 const char *out)
{
    const char *argv[24] = { CKPT_SYNTH_PATH, root, "--name", name, "--mesh", world,
                             "--tensors", "2", "--bytes", "256KiB", "--hash-threads", "2",
                             "--world", world };
    int n = 14;
    if (socks) {
        argv[n++] = "--daemon";
        argv[n++] = socks;
    }
    argv[n] = NULL;
    unlink(out);
    return kd_run(argv, out, 60);
}

static bool file_has(const char *path, const char *needle)
{
    return kd_log_has(path, needle);
}

static void raw_begin_refused(const char *sock, const char *name)
{
    kc_wire_tensor t = { .name = "t0", .dtype = CK_F32, .ndim = 2, .shape = { 64, 16 } };
    kc_wire d = { .step = 1, .rank = 0, .ntensors = 1, .tensors = &t,
                   .staging_size = 1 << 20 };
    snprintf(d.name, sizeof d.name, "%s", name);
    ck_mesh_parse("1", NULL, &d.mesh, NULL);
    ck_placements_parse("R", 1, 2, t.pl, NULL);
    int fd = kc_raw_begin(sock, &d);
    ck__msg m = { 0 };
    ck_err err = { 0 };
    CHECK(ck__conn_recv(fd, true, &m, &err) > 0 && m.type == CK_MSG_ERROR &&
          memmem(m.payload, m.len, "1 to 234 bytes", 14),
          "ckptd did not refuse a BEGIN of a %zu-byte name naming the limit (type %u)",
          strlen(name), m.type);
    free(m.payload);
    close(fd);
}

int main(void)
{
    kc_watchdog(200);
    char root[PATH_MAX], out[PATH_MAX + 16], ok[CK_NAME_MAX], bad[CK_NAME_MAX];
    tl_tmpdir(root, sizeof root, "names");
    snprintf(out, sizeof out, "%s.out", root);
    ck_err err = { 0 };
    size_t lens[] = { 235, 243, 255 };
    name_of(ok, CK_CKPT_NAME_LEN);
    CHECK(CK_CKPT_NAME_LEN == 234, "the limit is %d", CK_CKPT_NAME_LEN);
    CHECK(ck_name_check("checkpoint", ok, &err) == 0, "234 bytes refused: %s", ck_err_msg(&err));
    for (int i = 0; i < 3; i++) {
        name_of(bad, lens[i]);
        ck_err_clear(&err);
        CHECK(ck_name_check("checkpoint", bad, &err) == -EINVAL &&
              strstr(ck_err_msg(&err), "1 to 234 bytes"),
              "a %zu-byte name: %s", lens[i], ck_err_msg(&err));
    }

    /* Embedded, through ckpt-synth. */
    CHECK(synth(root, ok, NULL, "2", out) == 0, "ckpt-synth: a 234-byte name (see %s)", out);
    CHECK(kd_verify_tool(root, ok) == 0, "the 234-byte checkpoint does not verify");
    for (int i = 0; i < 3; i++) {
        name_of(bad, lens[i]);
        CHECK(synth(root, bad, NULL, "2", out) == 2 && file_has(out, "1 to 234 bytes"),
              "ckpt-synth took a %zu-byte name, or did not say the limit (see %s)", lens[i],
              out);
    }
    char path[PATH_MAX + CK_NAME_MAX];
    snprintf(path, sizeof path, "%s/%s", root, ok);
    tl_rmtree(path);

    /* One ckptd, then two sharing the root (the meeting's name is the longest). */
    kd_proc a, b;
    kd_start_id(&a, root, "A", NULL);
    kd_start_id(&b, root, "B", NULL);
    CHECK(synth(root, ok, a.sock, "2", out) == 0, "one ckptd: a 234-byte name (see %s)", out);
    tl_rmtree(path);
    char socks[2 * PATH_MAX + 2];
    snprintf(socks, sizeof socks, "%s,%s", a.sock, b.sock);
    CHECK(synth(root, ok, socks, "2", out) == 0, "two ckptd: a 234-byte name (see %s)", out);
    CHECK(kd_verify_tool(root, ok) == 0, "the shared 234-byte save does not verify");
    for (int i = 0; i < 3; i++) {
        name_of(bad, lens[i]);
        raw_begin_refused(a.sock, bad);
        CHECK(synth(root, bad, a.sock, "2", out) == 2 && file_has(out, "1 to 234 bytes"),
              "through ckptd, a %zu-byte name was not refused naming the limit (see %s)",
              lens[i], out);
    }
    CHECK(kc_end_two(&a, &b, root) == 0 || tl_failures, "daemons");

    /* A checkpoint an older release saved under 240 bytes still reads. */
    char old[CK_NAME_MAX], from[PATH_MAX + CK_NAME_MAX];
    tl_tmpdir(root, sizeof root, "names");
    name_of(old, 240);
    CHECK(synth(root, "short", NULL, "2", out) == 0, "ckpt-synth short (see %s)", out);
    snprintf(from, sizeof from, "%s/short", root);
    snprintf(path, sizeof path, "%s/%s", root, old);
    REQUIRE(rename(from, path) == 0, "rename to a 240-byte name");
    ck_scan sc;
    REQUIRE(ck_root_scan(root, &sc, &err) == 0, "scan: %s", ck_err_msg(&err));
    CHECK(sc.n_committed == 1 && !strcmp(sc.committed[0], old), "the scan lists %zu",
          sc.n_committed);
    ck_scan_free(&sc);
    CHECK(kd_verify_tool(root, old) == 0, "a 240-byte checkpoint on disk no longer verifies");
    unlink(out);
    if (tl_failures)
        return 1;
    tl_rmtree(root);
    printf("ok: 234-byte names save embedded, through one and two ckptd; 235-255 are refused "
           "by the check, the client, ckptd and ckpt-synth, naming the limit\n");
    return 0;
}
