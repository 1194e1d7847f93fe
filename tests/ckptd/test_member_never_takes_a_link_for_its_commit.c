/* A member engine of a shared save (two embedded engines of one job, nodes = 2) learns
 * the commit only from ROOT/NAME being the very directory it wrote into, reached
 * beneath the root and never through a link. Here someone who may write in the root
 * plants ROOT/NAME as a symbolic link to the save's pending directory once the member's
 * part is durable: the member must not report the save committed (before, its stat()
 * followed the link to its own directory and told its rank "committed"), rank 0's
 * commit then fails (the name is taken), and both ranks are told it failed; the link
 * is left as it was and nothing is visible as a checkpoint. */
#include <glob.h>

#include "kc_testlib.h"
#include "format/layout.h"

#define NAME "linked"

static const kc_tensor ts[] = { { CK_F32, 1, { 4096 }, "S(0)" } };

/* Rank r's part of NAME on an engine of its own (two engines of one process meet
 * through the root as two processes' engines do). */
static ck_client_save *rank_part(const char *root, uint64_t r, ck_client **cl, kc_part *part)
{
    ck_mesh mesh;
    ck_mesh_parse("2", NULL, &mesh, NULL);
    ck_client_opts o = { .embedded = true, .nodes = 2, .writers = 2, .hash_threads = 2,
                         .part_timeout = 30, .dead_after = 5 };
    ck_client_save *sv;
    ck_err err = { 0 };
    REQUIRE(ck_client_open(cl, root, &o, &err) == 0 &&
            kc_begin(*cl, &sv, NAME, 1, &mesh, r, ts, 1, &kc_job, &err) == 0,
            "rank %llu: %s", (unsigned long long)r, ck_err_msg(&err));
    kc_declare(sv, &mesh, r, ts, 1, part, false);
    return sv;
}

int main(void)
{
    kc_watchdog(120);
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "member-link");
    ck_client *cl[2];
    kc_part part[2] = { 0 };
    ck_client_save *sv[2] = { rank_part(root, 0, &cl[0], &part[0]),
                              rank_part(root, 1, &cl[1], &part[1]) };
    ck_err err = { 0 };
    for (int r = 2; r-- > 0;)
        REQUIRE(ck_client_submit(sv[r], &kc_copy, &err) == 0, "rank %d: submit: %s", r,
                ck_err_msg(&err));
    ck_client_state st = CK_CLIENT_STAGED;
    for (int i = 0; i < 3000 && st != CK_CLIENT_DURABLE && st != CK_CLIENT_FAILED; i++) {
        ck_client_poll(sv[1], &st, &err);
        kd_sleep_ms(10);
    }
    REQUIRE(st == CK_CLIENT_DURABLE, "the member's part is not durable: %s (%s)",
            kc_state_name(st), ck_err_msg(&err));

    char pat[PATH_MAX + 64], link_path[PATH_MAX + 16];
    snprintf(pat, sizeof pat, "%s/%s/%s.????????????", root, CK_PENDING, NAME);
    glob_t g;
    REQUIRE(glob(pat, 0, NULL, &g) == 0 && g.gl_pathc == 1, "the pending directory %s",
            pat);
    snprintf(link_path, sizeof link_path, "%s/%s", root, NAME);
    REQUIRE(symlink(g.gl_pathv[0], link_path) == 0, "symlink: %s", strerror(errno));
    globfree(&g);
    /* The member polls every 20 ms: a second is many chances to be fooled. */
    for (int i = 0; i < 100 && st == CK_CLIENT_DURABLE; i++) {
        kd_sleep_ms(10);
        ck_client_poll(sv[1], &st, &err);
    }
    CHECK(st == CK_CLIENT_DURABLE, "with ROOT/%s a link to its pending directory, the member "
          "reports %s (%s) before rank 0 asked for the commit", NAME, kc_state_name(st),
          ck_err_msg(&err));

    CHECK(ck_client_commit(sv[0], &err) == 0, "commit: %s", ck_err_msg(&err));
    for (int r = 0; r < 2; r++) {
        int rc = ck_client_wait(sv[r], CK_CLIENT_COMMITTED, &err);
        CHECK(rc < 0, "rank %d was told the save committed, with %s a planted link", r,
              link_path);
        ck_client_save_free(sv[r]);
        kc_part_free(&part[r]);
    }
    for (int r = 2; r-- > 0;)
        ck_client_close(cl[r]);
    struct stat lst;
    CHECK(lstat(link_path, &lst) == 0 && S_ISLNK(lst.st_mode), "the planted link %s was "
          "touched", link_path);
    ck_ckpt *ck;
    CHECK(ck_open(root, NAME, &ck, &err) < 0, "%s opens as a checkpoint", link_path);
    if (tl_failures)
        return 1;
    tl_rmtree(root);
    printf("ok: a link planted at ROOT/NAME to the pending directory is never taken for the "
           "commit: both ranks are told the save failed, the link stays\n");
    return 0;
}
