/* A new attempt at a copy of several writers (ops/copy.h, opts.again and
 * ck__copy_in_carry; decision 0199): the first attempt's committer streams the
 * manifest and data file 0 and a joiner writes file 1, but the joiner of file 2 fails
 * (a flipped byte). The second attempt takes over the first's lock (no other writer of
 * the copy gets in between, nor while it runs), in a new pending directory; files 0
 * and 1 are carried into it by hard link and file 2 is written by a joiner of the new
 * directory; freeing the first attempt removes its directory and leaves the lock; the
 * commit is one checkpoint that deep-verifies as saved. A carry of a file the attempt
 * does not declare as another writer's, or that the old directory lacks, is refused by
 * name, and so is a planted link in the old directory, which is never followed nor
 * carried (nothing of it reaches the commit). An attempt that follows a joiner is
 * refused. */
#include <sys/stat.h>

#include "copy_testlib.h"
#include "format/layout.h"

static const uint64_t seed = 31;

/* A committer in root: it streams the manifest and the first n_own data files, the
 * others are joined; again: the attempt it follows, or NULL. */
static ck__copy_in *begin(const ct_stream *s, const char *root, uint32_t n_own,
                          ck__copy_in *again)
{
    ck__copy_in_opts o = { .root = root, .name = "src", .source = "n0",
                           .manifest_size = s->msize, .manifest_sha256 = s->sha,
                           .files = s->files, .n_files = n_own, .joined = s->files + n_own,
                           .n_joined = s->n - n_own, .again = again };
    ck__copy_in *c;
    ck_err err = { 0 };
    REQUIRE(ck__copy_in_begin(&o, &c, &err) == 0, "committer: %s", ck_err_msg(&err));
    REQUIRE(ck__copy_in_write(c, s->bytes, ct_file_at(s, n_own), &err) == 0,
            "committer's stream: %s", ck_err_msg(&err));
    return c;
}

/* Whether another committer of "src" in root is refused for the lock. */
static bool locked_out(const ct_stream *s, const char *root)
{
    ck__copy_in_opts o = { .root = root, .name = "src", .source = "n9",
                           .manifest_size = s->msize, .files = s->files, .n_files = s->n };
    ck__copy_in *c;
    ck_err err = { 0 };
    int r = ck__copy_in_begin(&o, &c, &err);
    ck__copy_in_free(c);
    return r == -EBUSY;
}

int main(void)
{
    char dir[PATH_MAX], dst[PATH_MAX + 16], tok1[CK_TOKEN_MAX], tok2[CK_TOKEN_MAX];
    ct_stream s = { 0 };
    ct_source(dir, sizeof dir, "copy-again", seed, &s);
    REQUIRE(s.n == 3, "the checkpoint has %u data files, not 3", s.n);
    ck_err err = { 0 };

    /* The first attempt: file 0 streamed, file 1 joined, file 2's joiner fails. */
    ck__copy_in *a = begin(&s, ct_mkroot(dir, "ok", dst, sizeof dst), 1, NULL);
    snprintf(tok1, sizeof tok1, "%s", ck__copy_in_token(a));
    CHECK(ct_join(&s, dst, tok1, 1, s.bytes, s.sha, -1, &err) == 0, "joiner of %s: %s",
          s.files[1].name, ck_err_msg(&err));
    CHECK(ct_join(&s, dst, tok1, 2, s.bytes, s.sha, 7, &err) == -EBADMSG,
          "a flipped byte in %s was not refused: %s", s.files[2].name, ck_err_msg(&err));

    /* The second: every data file another writer's, two of them carried. */
    ck__copy_in *b = begin(&s, dst, 0, a);
    snprintf(tok2, sizeof tok2, "%s", ck__copy_in_token(b));
    CHECK(strcmp(tok1, tok2) != 0, "the new attempt reuses the directory %s", tok1);
    CHECK(locked_out(&s, dst), "another writer got the copy's lock between two attempts");
    for (uint32_t f = 0; f < 2; f++)
        CHECK(ck__copy_in_carry(b, a, s.files[f].name, &err) == 0, "carrying %s: %s",
              s.files[f].name, ck_err_msg(&err));
    int r = ck__copy_in_carry(b, a, s.files[2].name, &err);
    CHECK(r == -ENOENT && strstr(ck_err_msg(&err), s.files[2].name) &&
          strstr(ck_err_msg(&err), tok1),
          "carrying a file the old directory lacks: want -ENOENT naming it; got %d: %s", r,
          ck_err_msg(&err));
    r = ck__copy_in_carry(b, a, "rank-99999.dat", &err);
    CHECK(r == -EINVAL && strstr(ck_err_msg(&err), "rank-99999.dat"),
          "carrying an undeclared file: want -EINVAL naming it; got %d: %s", r,
          ck_err_msg(&err));
    ck__copy_in_free(a);
    CHECK(!ct_pending_has(dst, tok1, ""), "the first attempt's directory was left behind");
    CHECK(locked_out(&s, dst), "freeing the first attempt dropped the lock the second holds");
    CHECK(ct_join(&s, dst, tok2, 2, s.bytes, s.sha, -1, &err) == 0, "joiner of %s: %s",
          s.files[2].name, ck_err_msg(&err));
    r = ck__copy_in_commit(b, &err);
    CHECK(r == 0, "the second attempt's commit: %d: %s", r, ck_err_msg(&err));
    ck__copy_in_free(b);
    CHECK(ct_committed(dst) && tl_verify_deep(dst, "src", seed) == 0,
          "the copy of the second attempt does not verify as saved");
    CHECK(!locked_out(&s, dst), "the lock outlived the commit");

    /* A planted link in the old directory is refused at its carry, by name, and never
     * reaches the new one: the commit then finds the file missing. */
    a = begin(&s, ct_mkroot(dir, "link", dst, sizeof dst), 1, NULL);
    snprintf(tok1, sizeof tok1, "%s", ck__copy_in_token(a));
    char link[PATH_MAX * 2];
    snprintf(link, sizeof link, "%s/.pending/src.%s/%s", dst, tok1, s.files[1].name);
    REQUIRE(symlink("/etc/passwd", link) == 0, "symlink %s", link);
    b = begin(&s, dst, 0, a);
    snprintf(tok2, sizeof tok2, "%s", ck__copy_in_token(b));
    CHECK(ck__copy_in_carry(b, a, s.files[0].name, &err) == 0, "carrying %s: %s",
          s.files[0].name, ck_err_msg(&err));
    r = ck__copy_in_carry(b, a, s.files[1].name, &err);
    CHECK(r == -ELOOP && strstr(ck_err_msg(&err), s.files[1].name),
          "carrying a planted link: want -ELOOP naming it; got %d: %s", r, ck_err_msg(&err));
    CHECK(!ct_pending_has(dst, tok2, s.files[1].name),
          "the planted link was carried into the new directory");
    ck__copy_in_free(a);
    CHECK(ct_join(&s, dst, tok2, 2, s.bytes, s.sha, -1, &err) == 0, "joiner of %s: %s",
          s.files[2].name, ck_err_msg(&err));
    r = ck__copy_in_commit(b, &err);
    CHECK(r == -ENOENT && strstr(ck_err_msg(&err), s.files[1].name),
          "a commit without the refused file: want -ENOENT naming it; got %d: %s", r,
          ck_err_msg(&err));
    ck__copy_in_free(b);
    CHECK(!ct_committed(dst), "a copy without a carried file was committed");

    /* A new attempt follows a committer's, never a joiner's. */
    a = begin(&s, ct_mkroot(dir, "joiner", dst, sizeof dst), 1, NULL);
    ck__copy_in_opts jo = { .root = dst, .name = "src", .source = "n1",
                            .manifest_size = s.msize, .manifest_sha256 = s.sha,
                            .files = s.files + 1, .n_files = 1,
                            .join = ck__copy_in_token(a) };
    ck__copy_in *j, *c;
    REQUIRE(ck__copy_in_begin(&jo, &j, &err) == 0, "joiner: %s", ck_err_msg(&err));
    ck__copy_in_opts ao = { .root = dst, .name = "src", .source = "n0",
                            .manifest_size = s.msize, .files = s.files, .n_files = s.n,
                            .again = j };
    r = ck__copy_in_begin(&ao, &c, &err);
    CHECK(r == -EINVAL && strstr(ck_err_msg(&err), "new attempt"),
          "an attempt after a joiner: want -EINVAL; got %d: %s", r, ck_err_msg(&err));
    ck__copy_in_free(c);
    ck__copy_in_free(j);
    ck__copy_in_free(a);

    ct_stream_free(&s);
    tl_rmtree(dir);
    return tl_failures ? 1 : 0;
}
