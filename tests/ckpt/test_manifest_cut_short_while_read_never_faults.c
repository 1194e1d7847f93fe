/* A manifest cut short while it is read costs the reader nothing (issue 21, defect 9;
 * docs/decisions/0118-manifest-private-copy.md): LMDB maps the file it
 * opens, and a mapped file that shrinks raises SIGBUS on the next access past its new
 * end (rc 135 in ckpt-verify, -consolidate and -reshard on the build this test was
 * written against). The reader maps a sealed private copy instead, so:
 *   - a checkpoint opened, then its manifest truncated to 0 bytes and to one page:
 *     every tensor, shard, hash and byte of data still reads and matches the formula,
 *     and handles of its worker readers (ck_readers_open_ckpt) too;
 *   - opening it again is a clear error naming the manifest, not a fault;
 *   - the catalog cut short the same way lists nothing wrong either: a clear error. */
#include <sys/wait.h>

#include "ck/catalog.h"
#include "outside_testlib.h"
#include "format/layout.h"

static const uint64_t seed = 5;

/* Everything the handle can read, once the file under it is gone. */
static void read_all_of(ck_ckpt *ck, const char *ctx)
{
    CHECK(tl_check_content(ck, seed) == 0, "%s: the content no longer matches", ctx);
    ck_verify_opts o = { .deep = true, .problem = tl_print_problem, .cb_arg = (void *)ctx };
    ck_verify_result res;
    ck_err err = { 0 };
    CHECK(ck_verify(ck, &o, &res, &err) == 0 && res.problems == 0,
          "%s: verify --deep: %s, %llu problems", ctx, ck_err_msg(&err),
          (unsigned long long)res.problems);
    ck_readers *rs;
    REQUIRE(ck_readers_open_ckpt(ck, &rs, &err) == 0, "%s: readers: %s", ctx, ck_err_msg(&err));
    ck_tensor t;
    REQUIRE(ck_tensor_get(ck, "t0", &t, &err) == 0, "%s: tensor t0: %s", ctx, ck_err_msg(&err));
    ck_box box = { .ndim = 2, .off = { 3, 0 }, .len = { 5, 48 } };
    float got[5 * 48];
    CHECK(ck_readers_read(rs, "t0", &box, 0, sizeof got, got, &err) == 0,
          "%s: a worker reader: %s", ctx, ck_err_msg(&err));
    for (uint64_t i = 0; i < 5 * 48; i++) {
        uint8_t want[4];
        tl_elem(seed, 0, 4, 3 * 48 + i, want);
        CHECK(!memcmp(&got[i], want, 4), "%s: element %llu differs", ctx, (unsigned long long)i);
        if (tl_failures)
            break;
    }
    ck_readers_close(rs);
}

/* Runs fn in a child, so that a SIGBUS is a failed check here rather than the end of
 * the test. */
static void in_child(void (*fn)(const char *root, off_t cut), const char *root, off_t cut,
                     const char *ctx)
{
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        fn(root, cut);
        _exit(tl_failures ? 1 : 0);
    }
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: %s %d", ctx,
          WIFSIGNALED(st) ? "killed by signal" : "failed with status",
          WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
}

static void cut_while_open(const char *root, off_t cut)
{
    char mf[PATH_MAX + 32], ctx[64];
    snprintf(mf, sizeof mf, "%s/c/%s", root, CK_MANIFEST);
    snprintf(ctx, sizeof ctx, "manifest cut to %lld bytes", (long long)cut);
    ck_ckpt *ck;
    ck_err err = { 0 };
    REQUIRE(ck_open(root, "c", &ck, &err) == 0, "open: %s", ck_err_msg(&err));
    REQUIRE(truncate(mf, cut) == 0, "truncate %s", mf);
    read_all_of(ck, ctx);
    ck_close(ck);
    ck_err_clear(&err);
    CHECK(ck_open(root, "c", &ck, &err) == -EBADMSG && strstr(ck_err_msg(&err), mf),
          "%s: opening it again gave %s", ctx, ck_err_msg(&err));
}

static void catalog_cut(const char *root, off_t cut)
{
    char cat[PATH_MAX + 32];
    snprintf(cat, sizeof cat, "%s/%s", root, CK_CATALOG);
    REQUIRE(truncate(cat, cut) == 0, "truncate %s", cat);
    ck_cat_entry *e;
    size_t n;
    ck_err err = { 0 };
    int r = ck_catalog_list(root, &e, &n, &err);
    CHECK(cut == 0 ? r == 0 && n == 0 : r == -EBADMSG && strstr(ck_err_msg(&err), cat),
          "the catalog cut to %lld bytes: %d, %s", (long long)cut, r, ck_err_msg(&err));
    if (r == 0)
        free(e);
}

int main(void)
{
    char root[PATH_MAX], copy[PATH_MAX + 32];
    tl_tmpdir(root, sizeof root, "mfcut");
    ck_err err = { 0 };
    REQUIRE(ol_save(root, "c", &err) == 0, "save: %s", ck_err_msg(&err));
    snprintf(copy, sizeof copy, "%s/c.keep", root);
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "cp -a '%s/c' '%s'", root, copy);
    REQUIRE(system(cmd) == 0, "%s", cmd);
    off_t cuts[] = { 0, 4096 };
    for (int i = 0; i < 2; i++) {
        char ctx[64];
        snprintf(ctx, sizeof ctx, "a reader whose manifest was cut to %lld bytes",
                 (long long)cuts[i]);
        in_child(cut_while_open, root, cuts[i], ctx);
        snprintf(cmd, sizeof cmd, "rm -rf '%s/c' && cp -a '%s' '%s/c'", root, copy, root);
        REQUIRE(system(cmd) == 0, "%s", cmd);
    }
    in_child(catalog_cut, root, 4096, "the catalog cut to one page");
    in_child(catalog_cut, root, 0, "the catalog cut to nothing");
    tl_rmtree(root);
    if (tl_failures)
        return 1;
    printf("ok: a manifest cut short under an open reader reads whole; reopening it is a "
           "clear error; so is a catalog cut short\n");
    return 0;
}
