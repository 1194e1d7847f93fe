/* ckptd's reply about a commit is the truth, whichever I/O operation of the save fails:
 * for every k, a daemon with --inject-fault eio@k serves one save, and
 *  - a save reported committed is visible and deep-verifies;
 *  - a save reported failed is not visible (nothing under ROOT/NAME);
 * and k walks past the rename, into the fsync of the root and the catalog update that
 * follow it: there the save is reported committed (it is complete and visible) with
 * the warning in ckptd's log, and the next ckptd start puts it in the catalog. The
 * walk ends at the first k that touches no operation of the save. */
#include "kd_testlib.h"

#include "ck/catalog.h"

static bool in_catalog(const char *root, const char *name)
{
    ck_cat_entry *e = NULL;
    size_t n = 0;
    bool found = false;
    if (ck_catalog_list(root, &e, &n, NULL) == 0)
        for (size_t i = 0; i < n && !found; i++)
            found = !strcmp(e[i].name, name);
    free(e);
    return found;
}

int main(void)
{
    int failed = 0, committed = 0, warned = 0, last = -1;
    for (int k = 0; k < 400 && last < 0 && !tl_failures; k++) {
        char root[PATH_MAX], out[PATH_MAX + 8], spec[32];
        tl_tmpdir(root, sizeof root, "kdtruth");
        snprintf(out, sizeof out, "%s.out", root);
        snprintf(spec, sizeof spec, "eio@%d", k);
        kd_proc d;
        kd_start(&d, root, (const char *const[]){ "--inject-fault", spec, NULL });
        int rc = kd_wait_pid(kd_synth(root, d.sock, "truth", "1", "2", "256KiB", out), 60);
        CHECK(kd_term(&d, 30) == 0, "%s: ckptd did not exit 0 (see %s)", spec, d.log);
        bool visible = kd_exists(root, "truth");
        bool warning = kd_log_has(d.log, "committed, but");
        if (rc == 0) {
            committed++;
            CHECK(visible && tl_verify_deep(root, "truth", 7) == 0, "%s: reported committed, "
                  "but %s", spec, visible ? "it does not verify" : "it is not visible");
            if (warning) {
                warned++;
                CHECK(kd_log_has(d.log, "not yet in the catalog") ||
                      kd_log_has(d.log, "may not survive"), "%s: the warning does not say "
                      "what is missing (see %s)", spec, d.log);
                /* The next start reconciles the catalog. */
                bool listed = in_catalog(root, "truth");
                kd_start(&d, root, NULL);
                CHECK(kd_term(&d, 30) == 0, "%s: the next ckptd did not exit 0", spec);
                CHECK(in_catalog(root, "truth"), "%s: the next start did not put the "
                      "checkpoint in the catalog", spec);
                printf("%s: committed, with a warning; in the catalog: %s, after the next "
                       "start: yes\n", spec, listed ? "yes" : "no");
            } else {
                last = k;       /* nothing failed: k is past the save's last operation */
            }
        } else {
            failed++;
            CHECK(rc == 2 && !visible, "%s: ckpt-synth exit %d, and the save is %s", spec, rc,
                  visible ? "visible: a save reported failed must never be" : "absent");
            CHECK(!warning, "%s: a failed save was logged as committed", spec);
        }
        if (!tl_failures) {
            tl_rmtree(root);
            unlink(out);
            unlink(d.log);
        }
    }
    printf("%d faults: %d saves reported failed and invisible, %d committed and deep-verified "
           "(%d of them with a warning: a failure after the rename)\n", last + 1, failed,
           committed, warned);
    CHECK(last > 0, "the walk never got past the save's operations");
    CHECK(warned > 0, "no fault hit an operation after the rename (the catalog update)");
    return tl_failures ? 1 : 0;
}
