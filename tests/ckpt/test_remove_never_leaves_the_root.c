/* ck_root_remove refuses what is no committed checkpoint and never reaches outside the
 * root (docs/FORMAT.md, "Removing a checkpoint"):
 *   - a name that does not exist is -ENOENT, and nothing is made in the root;
 *   - a hostile name (empty, ".", "..", "../X", "a/b", an absolute path, ".pending",
 *     256 bytes) is -EINVAL;
 *   - a link planted as ROOT/NAME, even to a directory that looks like a checkpoint,
 *     and a plain file are -ENOTDIR; a directory without a manifest is -ENOENT; what
 *     they point to or hold is untouched;
 *   - a name whose save lock a live process holds is -EBUSY, naming it, and the
 *     checkpoint stays whole; so is a name being saved, not yet committed;
 *   - a root whose .pending is a link out of it is -ENOTDIR: the checkpoint is never
 *     moved there;
 *   - removing a checkpoint with a link and a directory planted inside removes the link
 *     and the directory, never what the link points to;
 *   - every error names the thing, every other checkpoint deep-verifies after each
 *     case, and a real removal leaves no debris and no catalog entry. */
#include <sys/file.h>

#include "ck/catalog.h"
#include "crash_testlib.h"
#include "format/layout.h"

static char root[PATH_MAX], outside[PATH_MAX];

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    REQUIRE(f && fputs(text, f) >= 0 && fclose(f) == 0, "write %s", path);
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* The count of entries in ROOT, so that a refused removal is seen to make nothing. */
static int root_entries(void)
{
    DIR *d = opendir(root);
    int n = 0;
    while (d && readdir(d))
        n++;
    if (d)
        closedir(d);
    return n;
}

static void expect_refused(const char *name, int code, const char *must_name)
{
    ck_err err = { 0 };
    int before = root_entries();
    int r = ck_root_remove(root, name, NULL, &err);
    CHECK(r == code, "remove \"%.40s\": %d, want %d (%s)", name, r, code, ck_err_msg(&err));
    CHECK(err.msg[0] && strstr(err.msg, must_name), "remove \"%.40s\": the message \"%s\" "
          "does not name %s", name, err.msg, must_name);
    CHECK(root_entries() == before, "remove \"%.40s\": a refused removal changed the root", name);
    CHECK(tl_verify_deep(root, "A", seed) == 0, "remove \"%.40s\": A was damaged", name);
}

int main(void)
{
    tl_tmpdir(root, sizeof root, "remove");
    tl_tmpdir(outside, sizeof outside, "remove-outside");
    ck_err err = { 0 };
    gen g;
    REQUIRE(save(root, "A", NULL, &g, &err) == 0, "save A: %s", ck_err_msg(&err));

    expect_refused("nope", -ENOENT, "nope");
    char longname[300];
    memset(longname, 'x', 256);
    longname[256] = '\0';
    const char *hostile[] = { "", ".", "..", "../A", "A/../A", "a/b", "/etc", ".pending",
                              CK_CATALOG "-lock/..", longname };
    for (size_t i = 0; i < sizeof hostile / sizeof *hostile; i++)
        expect_refused(hostile[i], -EINVAL, "checkpoint");

    /* A link to a copy of A outside the root: a checkpoint in every way but its place. */
    char path[2 * PATH_MAX], cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "cp -a '%s/A' '%s/A'", root, outside);
    REQUIRE(system(cmd) == 0, "%s", cmd);
    snprintf(path, sizeof path, "%s/L", root);
    char target[PATH_MAX + 8];
    snprintf(target, sizeof target, "%s/A", outside);
    REQUIRE(symlink(target, path) == 0, "symlink %s", path);
    expect_refused("L", -ENOTDIR, "L");
    CHECK(tl_verify_deep(outside, "A", seed) == 0, "the link's target was damaged");
    CHECK(exists(path), "the planted link was removed");
    unlink(path);

    snprintf(path, sizeof path, "%s/F", root);
    write_file(path, "not a checkpoint\n");
    expect_refused("F", -ENOTDIR, "F");
    CHECK(exists(path), "the plain file was removed");
    unlink(path);

    snprintf(path, sizeof path, "%s/D", root);
    REQUIRE(mkdir(path, 0755) == 0, "mkdir %s", path);
    snprintf(path, sizeof path, "%s/D/keep", root);
    write_file(path, "data\n");
    expect_refused("D", -ENOENT, "D");
    CHECK(exists(path), "a file of a directory that is no checkpoint was removed");
    unlink(path);
    snprintf(path, sizeof path, "%s/D", root);
    rmdir(path);

    /* .pending planted as a link to a directory outside: A must not be moved there. */
    char pend[PATH_MAX + 16], aside[PATH_MAX + 16];
    snprintf(pend, sizeof pend, "%s/%s", root, CK_PENDING);
    snprintf(aside, sizeof aside, "%s/pending-aside", root);
    REQUIRE(rename(pend, aside) == 0 && symlink(outside, pend) == 0, "plant %s", pend);
    ck_err_clear(&err);
    int r = ck_root_remove(root, "A", NULL, &err);
    CHECK(r == -ENOTDIR && strstr(err.msg, CK_PENDING), "remove A beside a planted %s: %d (%s)",
          CK_PENDING, r, ck_err_msg(&err));
    CHECK(tl_verify_deep(root, "A", seed) == 0, "A was damaged beside a planted %s", CK_PENDING);
    DIR *od = opendir(outside);
    int n_out = 0;
    while (od && readdir(od))
        n_out++;
    if (od)
        closedir(od);
    CHECK(n_out == 3, "something was moved or made outside the root (%d entries)", n_out - 2);
    REQUIRE(unlink(pend) == 0 && rename(aside, pend) == 0, "restore %s", pend);

    /* A live save of B holds its lock (a second open file description, as another
     * process would hold it). */
    REQUIRE(save(root, "B", NULL, &g, &err) == 0, "save B: %s", ck_err_msg(&err));
    snprintf(path, sizeof path, "%s/%s/B.lock", root, CK_PENDING);
    int lk = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    REQUIRE(lk >= 0 && flock(lk, LOCK_EX | LOCK_NB) == 0, "lock %s", path);
    REQUIRE(write(lk, "pid 4242 on testhost\n", 21) == 21, "write %s", path);
    ck_err_clear(&err);
    r = ck_root_remove(root, "B", NULL, &err);
    CHECK(r == -EBUSY && strstr(err.msg, "pid 4242 on testhost"),
          "remove of a name another process holds: %d (%s)", r, ck_err_msg(&err));
    CHECK(tl_verify_deep(root, "B", seed) == 0, "B was damaged by a refused removal");
    unlink(path);
    close(lk);

    /* A save of C in progress (its lock held, nothing committed yet): refused as busy,
     * naming the saver, not as a name that does not exist. */
    snprintf(path, sizeof path, "%s/%s/C.lock", root, CK_PENDING);
    lk = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    REQUIRE(lk >= 0 && flock(lk, LOCK_EX | LOCK_NB) == 0, "lock %s", path);
    REQUIRE(write(lk, "pid 4343 on testhost\n", 21) == 21, "write %s", path);
    ck_err_clear(&err);
    r = ck_root_remove(root, "C", NULL, &err);
    CHECK(r == -EBUSY && strstr(err.msg, "being saved") && strstr(err.msg, "pid 4343"),
          "remove of a name being saved: %d (%s)", r, ck_err_msg(&err));
    unlink(path);
    close(lk);

    /* Planted inside B: a link to a file outside, and a directory with a file. */
    char victim[PATH_MAX + 16];
    snprintf(victim, sizeof victim, "%s/victim", outside);
    write_file(victim, "must survive\n");
    snprintf(path, sizeof path, "%s/B/evil", root);
    REQUIRE(symlink(outside, path) == 0, "symlink %s", path);
    snprintf(path, sizeof path, "%s/B/sub", root);
    REQUIRE(mkdir(path, 0755) == 0, "mkdir %s", path);
    snprintf(path, sizeof path, "%s/B/sub/x", root);
    write_file(path, "planted\n");
    ck_err_clear(&err);
    r = ck_root_remove(root, "B", NULL, &err);
    CHECK(r == 0, "remove B: %s", ck_err_msg(&err));
    snprintf(path, sizeof path, "%s/B", root);
    CHECK(!exists(path), "B is still there");
    CHECK(exists(victim) && tl_verify_deep(outside, "A", seed) == 0,
          "removing B followed a link out of the root");

    ck_scan sc;
    REQUIRE(ck_root_scan(root, &sc, &err) == 0, "scan: %s", ck_err_msg(&err));
    CHECK(sc.n_committed == 1 && !strcmp(sc.committed[0], "A") && sc.n_pending == 0,
          "after removing B: %zu committed, %zu pending entries", sc.n_committed, sc.n_pending);
    ck_scan_free(&sc);
    ck_cat_entry *ents;
    size_t n;
    REQUIRE(ck_catalog_list(root, &ents, &n, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(n == 1 && !strcmp(ents[0].name, "A"), "the catalog lists %zu after removing B", n);
    free(ents);
    CHECK(ck_name_probe(root, "B", NULL, 0, &err) == CK_NAME_FREE, "B is not free after removal");
    CHECK(ck_name_probe(root, "A", NULL, 0, &err) == CK_NAME_COMMITTED, "A is not committed");

    /* The last one goes too. */
    CHECK(ck_root_remove(root, "A", NULL, &err) == 0, "remove A: %s", ck_err_msg(&err));
    snprintf(path, sizeof path, "%s/A", root);
    CHECK(!exists(path), "A is still there");
    tl_rmtree(root);
    tl_rmtree(outside);
    if (tl_failures)
        return 1;
    printf("ok: refused 14 names that are no checkpoint, a planted %s and a name a live "
           "process holds; followed no link\n", CK_PENDING);
    return 0;
}
