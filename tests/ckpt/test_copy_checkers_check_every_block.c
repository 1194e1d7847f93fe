/* A copy is checked block for block through one check path (ops/copy.h), whether the
 * writer checks what it wrote (0 checkers: the drain, copy_partial) or 1, 2 or 3
 * checkers apart from it do (opts.checkers; the peer receiver's threads, decision
 * 0190): fed in chunks that cut blocks and files anywhere, it commits and deep-verifies
 * with the saved content. A byte flipped anywhere in a data file fails the check of its
 * block, naming the file and the block, whichever checker owns it (with 0 and with 2),
 * and nothing is committed. A copy whose every byte was
 * written but not taken by every checker is never committed: its commit names the
 * checker and the bytes it did not check. The manifest is checked against the SHA-256
 * its sender declared (ck__copy_out reads it): every copy above declares it, and a
 * manifest with one byte flipped where the manifest's own checks do not look (its
 * last byte) is refused before it is opened, and nothing is committed.
 * The same holds for a stream whose manifest comes last (a PUT's, decision 0204): each
 * block's SHA-256 is kept as it arrives and compared with the manifest's at the commit,
 * so a whole copy commits and verifies, and a flipped byte fails the commit naming its
 * file and block. Such a copy cut at another block size than its manifest's, or whose
 * manifest never came, is never committed. */
#include "copy_testlib.h"

static const uint64_t seed = 23;

/* How a stream is fed: its manifest first, or last in blocks of bs bytes (the manifest
 * declared before its first byte, or, with never, not at all). */
typedef struct order {
    bool mlast, never;
    uint32_t bs;
} order;

/* Feeds bytes[0, total) into a copy in root with k checkers, in chunks of step bytes,
 * checker skip (if < k) missing the last chunk; returns the first error, into err. */
static int receive(const ct_stream *s, const uint8_t *bytes, const char *root, unsigned k,
                   size_t step, unsigned skip, order how, ck_err *err)
{
    ck__copy_in_opts o = { .root = root, .name = "src", .source = "n1",
                           .manifest_size = how.mlast ? 0 : s->msize,
                           .manifest_sha256 = how.mlast ? NULL : s->sha,
                           .manifest_last = how.mlast, .block_size = how.bs,
                           .files = s->files, .n_files = s->n, .checkers = k };
    ck__copy_in *c;
    uint64_t data = s->total - s->msize, end = how.never ? data : s->total;
    bool declared = !how.mlast;
    int r = ck__copy_in_begin(&o, &c, err);
    for (uint64_t at = 0; r == 0 && at < end; at += step) {
        size_t len = end - at < step ? (size_t)(end - at) : step;
        bool last = at + len == end;
        if (!declared && at + len > data) {
            r = ck__copy_in_manifest(c, s->msize, s->sha, err);
            declared = true;
        }
        if (r == 0)
            r = ck__copy_in_write(c, bytes + at, len, err);
        for (unsigned i = 0; r == 0 && i < k; i++)
            if (!(last && i == skip))
                r = ck__copy_in_check(c, i, bytes + at, len, err);
    }
    if (r == 0)
        r = ck__copy_in_commit(c, err);
    ck__copy_in_free(c);
    return r;
}

int main(void)
{
    char dir[PATH_MAX], dst[PATH_MAX + 16];
    ct_stream s = { 0 };
    ct_source(dir, sizeof dir, "copy-checkers", seed, &s);
    ck_err err = { 0 };
    const order first = { 0 }, lastly = { .mlast = true, .bs = CT_BLOCK };
    /* The stream of a PUT: the data files, then the manifest. */
    uint64_t data = s.total - s.msize;
    uint8_t *put = malloc(s.total);
    REQUIRE(put, "out of memory");
    memcpy(put, s.bytes + s.msize, data);
    memcpy(put + data, s.bytes, s.msize);

    /* Whole copies: every checker count (0: the writer checks what it wrote), chunks
     * that cut blocks and files anywhere. */
    const size_t steps[4] = { 65536 + 17, 100003, 4096, 1u << 20 };
    for (unsigned k = 0; k <= 3; k++) {
        snprintf(dst, sizeof dst, "%s/ok%u", dir, k);
        REQUIRE(mkdir(dst, 0755) == 0, "mkdir %s", dst);
        int r = receive(&s, s.bytes, dst, k, steps[k], k, first, &err);
        CHECK(r == 0, "%u checkers: %s", k, ck_err_msg(&err));
        CHECK(r < 0 || tl_verify_deep(dst, "src", seed) == 0, "%u checkers: the copy does "
              "not verify as saved", k);
        snprintf(dst, sizeof dst, "%s/last%u", dir, k);
        REQUIRE(mkdir(dst, 0755) == 0, "mkdir %s", dst);
        r = receive(&s, put, dst, k, steps[k], k, lastly, &err);
        CHECK(r == 0, "%u checkers, the manifest last: %s", k, ck_err_msg(&err));
        CHECK(r < 0 || tl_verify_deep(dst, "src", seed) == 0, "%u checkers, the manifest "
              "last: the copy does not verify as saved", k);
    }

    /* A flipped byte: first byte, a middle block's, the last byte of the last file. */
    uint8_t *bad = malloc(s.total);
    REQUIRE(bad, "out of memory");
    const uint64_t at[3] = { s.msize, s.msize + data / 2 + 17, s.total - 1 };
    for (int i = 0; i < 12; i++) {
        unsigned k = i % 6 < 3 ? 2 : 0;
        bool mlast = i >= 6;
        uint64_t off = at[i % 3] - s.msize;
        uint32_t f = 0;
        while (off >= s.files[f].size)
            off -= s.files[f++].size;
        char want[CK_FILE_NAME_MAX + 64];
        snprintf(want, sizeof want, "data file %s, block %llu ", s.files[f].name,
                 (unsigned long long)(off / CT_BLOCK));
        memcpy(bad, mlast ? put : s.bytes, s.total);
        bad[mlast ? at[i % 3] - s.msize : at[i % 3]] ^= 0x10;
        snprintf(dst, sizeof dst, "%s/bad%d", dir, i);
        REQUIRE(mkdir(dst, 0755) == 0, "mkdir %s", dst);
        int r = receive(&s, bad, dst, k, 65536 + 4096, k, mlast ? lastly : first, &err);
        CHECK(r == -EBADMSG && strstr(ck_err_msg(&err), want) &&
              strstr(ck_err_msg(&err), "its SHA-256 is not the manifest's"),
              "%u checkers, byte %llu flipped%s: want -EBADMSG naming '%s'; got %d: %s", k,
              (unsigned long long)at[i % 3], mlast ? " (the manifest last)" : "", want, r,
              ck_err_msg(&err));
        CHECK(!ct_committed(dst), "%u checkers, byte %llu flipped: the copy was committed", k,
              (unsigned long long)at[i % 3]);
    }

    /* The manifest's last byte flipped: not the manifest declared. */
    memcpy(bad, s.bytes, s.total);
    bad[s.msize - 1] ^= 0x01;
    snprintf(dst, sizeof dst, "%s/other-manifest", dir);
    REQUIRE(mkdir(dst, 0755) == 0, "mkdir %s", dst);
    int r = receive(&s, bad, dst, 2, 100003, 2, first, &err);
    CHECK(r == -EBADMSG && strstr(ck_err_msg(&err), "its manifest's SHA-256 is not the one "
                                  "declared with it"),
          "a manifest byte flipped: want -EBADMSG naming the manifest; got %d: %s", r,
          ck_err_msg(&err));
    CHECK(!ct_committed(dst), "a copy of another manifest was committed");

    /* Written whole, not checked whole. */
    snprintf(dst, sizeof dst, "%s/unchecked", dir);
    REQUIRE(mkdir(dst, 0755) == 0, "mkdir %s", dst);
    r = receive(&s, s.bytes, dst, 2, 100003, 1, first, &err);
    CHECK(r == -EPROTO && strstr(ck_err_msg(&err), "checker 1 of 2 has") &&
          strstr(ck_err_msg(&err), "still to check"),
          "a checker short of the stream: got %d: %s", r, ck_err_msg(&err));
    CHECK(!ct_committed(dst), "a copy not checked whole was committed");

    /* The manifest last: cut at another block size than the manifest's; never sent. */
    snprintf(dst, sizeof dst, "%s/other-blocks", dir);
    REQUIRE(mkdir(dst, 0755) == 0, "mkdir %s", dst);
    r = receive(&s, put, dst, 2, 100003, 2, (order){ .mlast = true, .bs = 2 * CT_BLOCK }, &err);
    CHECK(r == -EBADMSG && strstr(ck_err_msg(&err), "its data came in blocks of 131072 bytes; "
                                  "its manifest's are of 65536"),
          "blocks of another size: want -EBADMSG naming both sizes; got %d: %s", r,
          ck_err_msg(&err));
    CHECK(!ct_committed(dst), "a copy cut at another block size was committed");
    snprintf(dst, sizeof dst, "%s/no-manifest", dir);
    REQUIRE(mkdir(dst, 0755) == 0, "mkdir %s", dst);
    r = receive(&s, put, dst, 2, 100003, 2,
                (order){ .mlast = true, .never = true, .bs = CT_BLOCK }, &err);
    CHECK(r == -EPROTO && strstr(ck_err_msg(&err), "its manifest never came"),
          "no manifest: want -EPROTO; got %d: %s", r, ck_err_msg(&err));
    CHECK(!ct_committed(dst), "a copy whose manifest never came was committed");

    free(put);
    free(bad);
    ct_stream_free(&s);
    tl_rmtree(dir);
    return tl_failures ? 1 : 0;
}
