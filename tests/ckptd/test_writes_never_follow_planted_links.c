/* A save never writes through a link planted in the root (issue 21, defect 2;
 * docs/FORMAT.md, "Links and special files"). On the build this test was written
 * against, each of these wrote outside the root:
 *   - ROOT/.pending/NAME.lock, a link to a home's .bashrc: a save of NAME, embedded or
 *     through ckptd, overwrote it with "pid N on HOST";
 *   - ROOT/.ckptd.ID.lock, a link: ckptd --id ID did the same;
 *   - the pending directory's manifest.mdb, planted as a link between the data files
 *     and the commit: the commit wrote the manifest outside the root, and the
 *     committed checkpoint held a link as its manifest.
 * Now each is refused with a message naming the planted path, the home directory is
 * the same byte for byte, no checkpoint is visible, and a save of another name still
 * works. A FIFO planted as the lock is refused the same way, without hanging. */
#include "ck/catalog.h"
#include "kc_testlib.h"
#include "outside_testlib.h"
#include "format/catalog.h"

static char home[PATH_MAX], root[PATH_MAX], out[PATH_MAX + 16];

static void planted(const char *rel, bool fifo)
{
    char p[PATH_MAX + 64], t[PATH_MAX + 16];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    snprintf(t, sizeof t, "%s/.bashrc", home);
    if (fifo)
        REQUIRE(mkfifo(p, 0644) == 0, "mkfifo %s", p);
    else
        ol_link(t, p);
}

/* The save lock of n1 planted: refused embedded and through ckptd, naming it. */
static void save_lock(bool fifo)
{
    const char *what = fifo ? "a FIFO" : "a link";
    char *before = ol_snapshot(home);
    planted(".pending/n1.lock", fifo);
    ck_err err = { 0 };
    CHECK(ol_save(root, "n1", &err) < 0 && strstr(ck_err_msg(&err), ".pending/n1.lock"),
          "an embedded save through a lock that is %s: %s", what, ck_err_msg(&err));
    kd_proc d;
    kd_start(&d, root, NULL);
    const char *argv[] = { CKPT_SYNTH_PATH, root, "--name", "n1", "--mesh", "1", "--tensors",
                           "1", "--bytes", "64KiB", "--world", "1", "--daemon", d.sock, NULL };
    unlink(out);
    CHECK(kd_run(argv, out, 60) == 2 && kd_log_has(out, ".pending/n1.lock"),
          "a save through ckptd with a lock that is %s was not refused naming it (see %s)",
          what, out);
    CHECK(ol_save(root, "n2", &err) == 0, "a save of another name failed: %s", ck_err_msg(&err));
    CHECK(kd_term(&d, 30) == 0, "ckptd did not exit 0 (see %s)", d.log);
    ol_same(home, before, fifo ? "saves through a FIFO lock" : "saves through a lock link");
    CHECK(!kd_exists(root, "n1"), "n1 is visible");
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/.pending/n1.lock", root);
    unlink(p);
    snprintf(p, sizeof p, "%s/n2", root);
    tl_rmtree(p);
    ck__catalog_del(root, "n2", NULL);
    free(before);
}

/* ROOT/.ckptd.X.lock planted: ckptd --id X refuses to start, naming it. */
static void daemon_lock(void)
{
    char *before = ol_snapshot(home), sock[PATH_MAX + 32];
    planted(".ckptd.X.lock", false);
    snprintf(sock, sizeof sock, "%s/.ckptd-X.sock", root);
    const char *argv[] = { CKPTD_PATH, "--root", root, "--id", "X", "--socket", sock,
                           "--foreground", NULL };
    unlink(out);
    int rc = kd_run(argv, out, 30);
    CHECK(rc != 0 && rc != -1 && kd_log_has(out, ".ckptd.X.lock") &&
          kd_log_has(out, "symbolic link"),
          "ckptd --id X started (exit %d) or did not name its planted lock (see %s)", rc, out);
    ol_same(home, before, "ckptd with a planted root lock");
    free(before);
}

/* A save whose pending directory gets a manifest.mdb link after its data is written. */
static void manifest_link(void)
{
    char *before = ol_snapshot(home);
    ck_save *s;
    ck_synth_src src;
    ck_err err = { 0 };
    REQUIRE(ol_begin(root, "m1", &s, &src, &err) == 0, "begin m1: %s", ck_err_msg(&err));
    REQUIRE(ck__save_write_rank(s, 0, &err) == 0, "write m1: %s", ck_err_msg(&err));
    ck_scan sc;
    REQUIRE(ck_root_scan(root, &sc, &err) == 0 && sc.n_pending == 1, "scan: %s",
            ck_err_msg(&err));
    char pend[PATH_MAX + CK_NAME_MAX], t[PATH_MAX + 32];
    snprintf(pend, sizeof pend, "%s/.pending/%s/manifest.mdb", root, sc.pending[0]);
    snprintf(t, sizeof t, "%s/manifest.mdb", home);
    ol_link(t, pend);
    ck_scan_free(&sc);
    CHECK(ck_save_commit(s, NULL, &err) < 0 && strstr(ck_err_msg(&err), pend),
          "the commit through a manifest link: %s", ck_err_msg(&err));
    ol_same(home, before, "a commit through a manifest link");
    CHECK(!kd_exists(root, "m1"), "m1 is visible");
    ck_err_clear(&err);
    CHECK(ol_save(root, "m2", &err) == 0, "a save after it failed: %s", ck_err_msg(&err));
    CHECK(tl_verify_deep(root, "m2", 5) == 0, "m2 does not verify");
    free(before);
}

int main(void)
{
    kc_watchdog(200);
    char base[PATH_MAX];
    tl_tmpdir(base, sizeof base, "plantw");
    snprintf(root, sizeof root, "%s/root", base);
    snprintf(home, sizeof home, "%s/home", base);
    snprintf(out, sizeof out, "%s/out.txt", base);
    char pend[PATH_MAX + 16];
    snprintf(pend, sizeof pend, "%s/.pending", root);
    REQUIRE(mkdir(root, 0755) == 0 && mkdir(pend, 0755) == 0, "mkdir %s", pend);
    ol_outside(home);
    save_lock(false);
    save_lock(true);
    daemon_lock();
    manifest_link();
    if (tl_failures)
        return 1;
    tl_rmtree(base);
    printf("ok: a lock (link or FIFO), a daemon's lock and a manifest planted in the root "
           "are refused by name; nothing outside the root changed\n");
    return 0;
}
