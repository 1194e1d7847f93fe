/* Injected I/O faults in ckptd (--inject-fault): EIO, ENOSPC and fsync failures fail
 * the save with the error reported to every client, nothing partial is visible, and
 * the same daemon then serves a good save. A short write is continued by the engine,
 * so that save commits intact. */
#include "kd_testlib.h"
#include "format/layout.h"

int main(void)
{
    static const struct { const char *spec, *needle; bool fails; } cases[] = {
        { "eio@12", "Input/output error", true },
        { "enospc@12", "No space left", true },
        { "fsync@0", "Input/output error", true },
        { "short@0", NULL, false },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char root[PATH_MAX], out[PATH_MAX + 8], pend[PATH_MAX + 16];
        tl_tmpdir(root, sizeof root, "kdfault");
        snprintf(out, sizeof out, "%s.out", root);
        snprintf(pend, sizeof pend, "%s/%s", root, CK_PENDING);
        kd_proc d;
        kd_start(&d, root, (const char *const[]){ "--inject-fault", cases[i].spec, NULL });
        int rc = kd_wait_pid(kd_synth(root, d.sock, "hit", "2x2", "4", "8MiB", out), 60);
        if (cases[i].fails) {
            CHECK(rc == 2, "%s: ckpt-synth exit %d, expected 2", cases[i].spec, rc);
            int told = kd_count_in(out, cases[i].needle);
            CHECK(told == 4, "%s: %d of 4 ranks got an error naming it (see %s)", cases[i].spec,
                  told, out);
            CHECK(!kd_exists(root, "hit"), "%s: the failed save is visible", cases[i].spec);
            CHECK(kd_count_entries(pend, true) == 0, "%s: .pending debris", cases[i].spec);
        } else {
            CHECK(rc == 0, "%s: ckpt-synth exit %d", cases[i].spec, rc);
            CHECK(tl_verify_deep(root, "hit", 7) == 0, "%s: the save is bad", cases[i].spec);
        }
        rc = kd_wait_pid(kd_synth(root, d.sock, "after", "2x2", "4", "8MiB", out), 60);
        CHECK(rc == 0, "%s: the next save failed", cases[i].spec);
        CHECK(tl_verify_deep(root, "after", 7) == 0, "%s: the next save is bad", cases[i].spec);
        CHECK(kd_term(&d, 10) == 0, "%s: ckptd did not exit 0", cases[i].spec);
        if (tl_failures)
            return 1;
        tl_rmtree(root);
        unlink(out);
        unlink(d.log);
    }
    printf("ok: eio, enospc, fsync faults reported to every rank, nothing visible, daemon "
           "served the next save; short write continued\n");
    return 0;
}
