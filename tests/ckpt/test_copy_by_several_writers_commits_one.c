/* One copy by several writers (ops/copy.h, opts.joined and opts.join; decision 0197):
 * a committer streams the manifest and one data file, two joiners write the two other
 * files into its pending directory, and the commit is one checkpoint that deep-verifies
 * as saved. A joiner checks what it joins and what it writes: a flipped byte fails its
 * block, naming it, and leaves nothing of the joiner's (the committer's commit then
 * names the file it lacks, and nothing is committed); a directory whose manifest is not
 * the one declared, a token that names no pending directory or another kind of
 * directory, and a file that is there already are refused by name, the file that was
 * there kept. A joined file planted as a link is refused at the commit. */
#include <sys/stat.h>

#include "copy_testlib.h"
#include "format/layout.h"

static const uint64_t seed = 29;

/* The committer of a copy in root: it streams file 0, files 1 and 2 are joined. Begun
 * with its manifest written, so that joiners can join. */
static ck__copy_in *committer(const ct_stream *s, const char *root)
{
    ck__copy_in_opts o = { .root = root, .name = "src", .source = "n0",
                           .manifest_size = s->msize, .manifest_sha256 = s->sha,
                           .files = s->files, .n_files = 1,
                           .joined = s->files + 1, .n_joined = 2 };
    ck__copy_in *c;
    ck_err err = { 0 };
    REQUIRE(ck__copy_in_begin(&o, &c, &err) == 0, "committer: %s", ck_err_msg(&err));
    REQUIRE(ck__copy_in_write(c, s->bytes, s->msize, &err) == 0, "committer's manifest: %s",
            ck_err_msg(&err));
    return c;
}

/* The committer's own file and its commit. */
static int commit(const ct_stream *s, ck__copy_in *c, ck_err *err)
{
    *err = (ck_err){ 0 };
    int r = ck__copy_in_write(c, s->bytes + ct_file_at(s, 0), s->files[0].size, err);
    if (r == 0)
        r = ck__copy_in_commit(c, err);
    ck__copy_in_free(c);
    return r;
}

int main(void)
{
    char dir[PATH_MAX], dst[PATH_MAX + 16], tok[CK_TOKEN_MAX];
    ct_stream s = { 0 };
    ct_source(dir, sizeof dir, "copy-writers", seed, &s);
    REQUIRE(s.n == 3, "the checkpoint has %u data files, not 3", s.n);
    ck_err err = { 0 };

    /* Three writers, one checkpoint. */
    ck__copy_in *c = committer(&s, ct_mkroot(dir, "ok", dst, sizeof dst));
    snprintf(tok, sizeof tok, "%s", ck__copy_in_token(c));
    for (uint32_t f = 2; f >= 1; f--)
        CHECK(ct_join(&s, dst, tok, f, s.bytes, s.sha, -1, &err) == 0, "joiner of %s: %s",
              s.files[f].name, ck_err_msg(&err));
    CHECK(commit(&s, c, &err) == 0, "the committer: %s", ck_err_msg(&err));
    CHECK(ct_committed(dst) && tl_verify_deep(dst, "src", seed) == 0,
          "the copy of three writers does not verify as saved");

    /* A flipped byte in a joiner's file. */
    c = committer(&s, ct_mkroot(dir, "flipped", dst, sizeof dst));
    snprintf(tok, sizeof tok, "%s", ck__copy_in_token(c));
    char want[CK_FILE_NAME_MAX + 64];
    snprintf(want, sizeof want, "data file %s, block 1 ", s.files[1].name);
    int r = ct_join(&s, dst, tok, 1, s.bytes, s.sha, CT_BLOCK + 5, &err);
    CHECK(r == -EBADMSG && strstr(ck_err_msg(&err), want),
          "a flipped byte: want -EBADMSG naming '%s'; got %d: %s", want, r, ck_err_msg(&err));
    CHECK(!ct_pending_has(dst, tok, s.files[1].name), "the failed joiner left %s behind",
          s.files[1].name);
    CHECK(ct_join(&s, dst, tok, 2, s.bytes, s.sha, -1, &err) == 0, "joiner of %s: %s",
          s.files[2].name, ck_err_msg(&err));
    r = commit(&s, c, &err);
    CHECK(r == -ENOENT && strstr(ck_err_msg(&err), s.files[1].name) &&
          strstr(ck_err_msg(&err), "written by another writer of the copy"),
          "a joined file missing: want -ENOENT naming %s; got %d: %s", s.files[1].name, r,
          ck_err_msg(&err));
    CHECK(!ct_committed(dst), "a copy missing a joined file was committed");

    /* Another checkpoint's manifest: the joiner's stream and declaration agree, the
     * directory's manifest does not. */
    c = committer(&s, ct_mkroot(dir, "other", dst, sizeof dst));
    snprintf(tok, sizeof tok, "%s", ck__copy_in_token(c));
    uint8_t *man = malloc(s.msize), sha[CK_SHA256_LEN];
    REQUIRE(man, "out of memory");
    memcpy(man, s.bytes, s.msize);
    man[s.msize - 1] ^= 0x01;
    REQUIRE(ck__sha256(man, s.msize, sha) == 0, "sha256");
    r = ct_join(&s, dst, tok, 1, man, sha, -1, &err);
    CHECK(r == -EBADMSG && strstr(ck_err_msg(&err), "not the manifest of the copy this writer "
                                  "joins"),
          "another manifest: want -EBADMSG; got %d: %s", r, ck_err_msg(&err));
    CHECK(!ct_pending_has(dst, tok, s.files[1].name), "a joiner of another manifest wrote %s",
          s.files[1].name);
    free(man);

    /* A file that is there already: refused, and kept. */
    snprintf(want, sizeof want, "%s", s.files[0].name);
    CHECK(ck__copy_in_write(c, s.bytes + ct_file_at(&s, 0), s.files[0].size, &err) == 0,
          "committer's file: %s", ck_err_msg(&err));
    r = ct_join(&s, dst, tok, 0, s.bytes, s.sha, -1, &err);
    CHECK(r == -EEXIST && strstr(ck_err_msg(&err), want), "a file there already: want "
          "-EEXIST naming %s; got %d: %s", want, r, ck_err_msg(&err));
    CHECK(ct_pending_has(dst, tok, want), "a joiner refused at %s removed the committer's file",
          want);

    /* A joined file planted as a link. */
    CHECK(ct_join(&s, dst, tok, 1, s.bytes, s.sha, -1, &err) == 0, "joiner: %s",
          ck_err_msg(&err));
    char link[PATH_MAX * 2];
    snprintf(link, sizeof link, "%s/.pending/src.%s/%s", dst, tok, s.files[2].name);
    REQUIRE(symlink("/etc/passwd", link) == 0, "symlink %s", link);
    err = (ck_err){ 0 };
    r = ck__copy_in_commit(c, &err);
    CHECK(r == -ELOOP && strstr(ck_err_msg(&err), s.files[2].name),
          "a joined file that is a link: want -ELOOP naming it; got %d: %s", r,
          ck_err_msg(&err));
    ck__copy_in_free(c);
    CHECK(!ct_committed(dst), "a copy with a linked file was committed");

    /* Tokens that name no pending directory of a copy. */
    const char *tokens[3] = { "000000000000", "../../../tmp", "0123456789ab-removed" };
    for (int i = 0; i < 3; i++) {
        r = ct_join(&s, dst, tokens[i], 1, s.bytes, s.sha, -1, &err);
        CHECK(r == (i ? -EINVAL : -ENOENT) && strstr(ck_err_msg(&err), i ? tokens[i] : "this "
                                                     "writer joins"),
              "token '%s': got %d: %s", tokens[i], r, ck_err_msg(&err));
    }

    ct_stream_free(&s);
    tl_rmtree(dir);
    return tl_failures ? 1 : 0;
}
