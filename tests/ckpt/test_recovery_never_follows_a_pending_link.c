/* Recovery never follows a link out of the root (issue 21, defect 1; docs/FORMAT.md,
 * "Links and special files"):
 *   - ROOT/.pending planted as a link to a home directory: recovery (ckptd's start),
 *     a scan, a catalog rebuild and a save are all refused with a message naming
 *     ROOT/.pending, and every byte of the home directory is as it was (on the build
 *     this test was written against, recovery deleted its .bashrc and docs/thesis.tex);
 *   - ROOT/.pending a plain file: refused the same way, naming it;
 *   - inside a real .pending: a save's entry that is a link to the home directory is
 *     left alone; a dead save's directory whose data file and manifest are links into
 *     it loses the links, never their targets; a name no save makes (a link to the
 *     home's docs) keeps the directory, logged, and nothing is descended into. */
#include "ck/catalog.h"
#include "outside_testlib.h"

static char logbuf[1 << 14];

static void logger(void *arg, const char *msg)
{
    (void)arg;
    size_t n = strlen(logbuf);
    snprintf(logbuf + n, sizeof logbuf - n, "%s\n", msg);
}

/* Everything that reaches ROOT/.pending refuses it, naming it; home is untouched. */
static void refused_everywhere(const char *root, const char *home, const char *kind)
{
    char *before = ol_snapshot(home), want[PATH_MAX + 32];
    snprintf(want, sizeof want, "%s/.pending is %s", root, kind);
    ck_err err = { 0 };
    size_t removed = 99;
    int r = ck_root_recover(root, &removed, logger, NULL, &err);
    CHECK(r < 0, "recovery through a .pending that is %s succeeded (removed %zu)", kind, removed);
    CHECK(strstr(ck_err_msg(&err), want), "recovery's error does not name it: %s",
          ck_err_msg(&err));
    ol_same(home, before, "recovery");

    ck_scan sc;
    ck_err_clear(&err);
    CHECK(ck_root_scan(root, &sc, &err) < 0 && strstr(ck_err_msg(&err), want),
          "a scan did not refuse it: %s", ck_err_msg(&err));
    ck_rebuild_report rep;
    ck_err_clear(&err);
    CHECK(ck_catalog_rebuild(root, &rep, NULL, NULL, &err) < 0 && strstr(ck_err_msg(&err), want),
          "a catalog rebuild did not refuse it: %s", ck_err_msg(&err));
    ck_err_clear(&err);
    CHECK(ol_save(root, "next", &err) < 0 && strstr(ck_err_msg(&err), ".pending"),
          "a save did not refuse it: %s", ck_err_msg(&err));
    ol_same(home, before, "the scan, rebuild and save");
    free(before);
}

int main(void)
{
    char base[PATH_MAX], root[PATH_MAX], home[PATH_MAX], pend[PATH_MAX + 16], p[PATH_MAX + 64];
    tl_tmpdir(base, sizeof base, "pendlink");
    snprintf(root, sizeof root, "%s/root", base);
    snprintf(home, sizeof home, "%s/home", base);
    snprintf(pend, sizeof pend, "%s/.pending", root);
    REQUIRE(mkdir(root, 0755) == 0, "mkdir %s", root);
    ol_outside(home);
    ck_err err = { 0 };
    REQUIRE(ol_save(root, "c", &err) == 0, "save c: %s", ck_err_msg(&err));

    /* .pending is a link to the home directory. */
    tl_rmtree(pend);
    ol_link(home, pend);
    refused_everywhere(root, home, "a symbolic link");

    /* .pending is a file. */
    REQUIRE(unlink(pend) == 0, "unlink");
    ol_write(pend, "x");
    refused_everywhere(root, home, "a regular file");

    /* A real .pending with links inside. */
    REQUIRE(unlink(pend) == 0 && mkdir(pend, 0755) == 0, "mkdir %s", pend);
    snprintf(p, sizeof p, "%s/ghost.0123456789ab", pend);
    ol_link(home, p);                                   /* an entry that is a link */
    snprintf(p, sizeof p, "%s/dead.aaaaaaaaaaaa", pend);
    REQUIRE(mkdir(p, 0755) == 0, "mkdir %s", p);
    char q[PATH_MAX + 128], t[PATH_MAX + 64];
    snprintf(q, sizeof q, "%s/rank-00000.dat", p);
    snprintf(t, sizeof t, "%s/.bashrc", home);
    ol_link(t, q);
    snprintf(q, sizeof q, "%s/manifest.mdb", p);
    snprintf(t, sizeof t, "%s/manifest.mdb", home);
    ol_link(t, q);
    snprintf(p, sizeof p, "%s/odd.bbbbbbbbbbbb", pend);
    REQUIRE(mkdir(p, 0755) == 0, "mkdir %s", p);
    snprintf(q, sizeof q, "%s/docs", p);
    snprintf(t, sizeof t, "%s/docs", home);
    ol_link(t, q);                                      /* no save makes "docs" */
    char *before = ol_snapshot(home);
    size_t removed = 0;
    logbuf[0] = '\0';
    CHECK(ck_root_recover(root, &removed, logger, NULL, &err) == 0, "recover: %s",
          ck_err_msg(&err));
    ol_same(home, before, "recovery inside a real .pending");
    CHECK(removed == 1, "recovery removed %zu saves, expected the dead one only", removed);
    struct stat st;
    snprintf(p, sizeof p, "%s/dead.aaaaaaaaaaaa", pend);
    CHECK(lstat(p, &st) < 0, "the dead save %s is still there", p);
    snprintf(p, sizeof p, "%s/ghost.0123456789ab", pend);
    CHECK(lstat(p, &st) == 0 && S_ISLNK(st.st_mode), "the link %s was not left alone", p);
    CHECK(strstr(logbuf, "ghost.0123456789ab alone: it is a symbolic link"),
          "the log does not say the link was left alone:\n%s", logbuf);
    snprintf(p, sizeof p, "%s/odd.bbbbbbbbbbbb/docs", pend);
    CHECK(lstat(p, &st) == 0, "recovery removed %s, which no save makes", p);
    CHECK(strstr(logbuf, "it holds docs, which no save makes"),
          "the log does not name the foreign entry docs:\n%s", logbuf);
    CHECK(tl_verify_deep(root, "c", 5) == 0, "the committed checkpoint c was damaged");
    free(before);
    tl_rmtree(base);
    if (tl_failures)
        return 1;
    printf("ok: a .pending link or file is refused by recovery, scan, rebuild and save; "
           "links inside .pending are removed as links or left, never followed\n");
    return 0;
}
