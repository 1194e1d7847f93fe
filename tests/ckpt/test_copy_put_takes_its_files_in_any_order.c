/* A copy whose manifest comes last (a PUT's) takes its data files in any order, each
 * file's bytes in order (ck__copy_in_write_at, decision 0206): the stream of a node's
 * files sent as each lands. Fed its files interleaved (a piece of each in turn) or the
 * last file first, in pieces that cut blocks anywhere, with 0, 1 or 3 checkers taking
 * the pieces in the writer's order (ck__copy_in_check_at), it commits and deep-verifies
 * as saved. And each rule of the order holds, the copy failing with -EPROTO that names
 * what broke it, nothing committed:
 *   - a file's bytes past a gap in it (a piece skipped);
 *   - the manifest's bytes before every data file ended;
 *   - a checker given a file's bytes out of the order the writer took them;
 *   - a data file begun while CK_COPY_BEGUN_MAX others are (the descriptors held open).
 * A byte flipped in an interleaved stream fails its commit, naming its file and block. */
#include "copy_testlib.h"

static const uint64_t seed = 31;

/* The pieces of a PUT's stream (data files at their stream offsets, then the manifest)
 * in the order they are fed: file by file in the order given by files[], or, with
 * interleave, a piece of each file in that order in turn. */
typedef struct feed {
    uint64_t at[4096];
    size_t len[4096];
    unsigned n;
} feed;

static void pieces(const ct_stream *s, const uint32_t *files, bool interleave, size_t step,
                   feed *fd)
{
    uint64_t data = s->total - s->msize, base[8] = { 0 }, off[8] = { 0 };
    for (uint32_t f = 1; f <= s->n; f++)
        base[f] = base[f - 1] + s->files[f - 1].size;
    fd->n = 0;
    for (bool more = true; more;) {
        more = false;
        for (uint32_t i = 0; i < s->n; i++) {
            uint32_t f = files[i];
            while (off[f] < s->files[f].size) {
                size_t len = s->files[f].size - off[f] < step ? s->files[f].size - off[f] : step;
                REQUIRE(fd->n < 4096, "too many pieces");
                fd->at[fd->n] = base[f] + off[f];
                fd->len[fd->n++] = len;
                off[f] += len;
                more = true;
                if (interleave)
                    break;
            }
        }
    }
    for (uint64_t at = data; at < s->total; at += step) {
        fd->at[fd->n] = at;
        fd->len[fd->n++] = s->total - at < step ? (size_t)(s->total - at) : step;
    }
}

/* Feeds put (the PUT's stream) into a copy in root with k checkers, in fd's order, the
 * manifest declared before its first byte; skip: a piece not written (or -1); swap:
 * checker 0 given the first two pieces the other way round. Returns the first error. */
static int receive(const ct_stream *s, const uint8_t *put, const char *root, unsigned k,
                   const feed *fd, int skip, bool swap, ck_err *err)
{
    ck__copy_in_opts o = { .manifest_last = true, .block_size = CT_BLOCK, .root = root,
                           .name = "src", .source = "n1", .files = s->files,
                           .n_files = s->n, .checkers = k };
    ck__copy_in *c;
    int r = ck__copy_in_begin(&o, &c, err);
    if (r == 0)
        r = ck__copy_in_manifest(c, s->msize, s->sha, err);
    for (unsigned i = 0; r == 0 && i < fd->n; i++) {
        if ((int)i == skip)
            continue;
        r = ck__copy_in_write_at(c, fd->at[i], put + fd->at[i], fd->len[i], err);
        for (unsigned j = 0; r == 0 && j < k; j++) {
            unsigned p = swap && j == 0 && i < 2 ? 1 - i : i;
            r = ck__copy_in_check_at(c, j, fd->at[p], put + fd->at[p], fd->len[p], err);
        }
    }
    if (r == 0)
        r = ck__copy_in_commit(c, err);
    ck__copy_in_free(c);
    return r;
}

/* Expects r to be code with a message holding want, and nothing committed in dst. */
static void refused(int r, int code, const ck_err *err, const char *want, const char *dst,
                    const char *what)
{
    CHECK(r == code && strstr(ck_err_msg(err), want), "%s: want %d naming '%s'; got %d: %s",
          what, code, want, r, ck_err_msg(err));
    CHECK(!ct_committed(dst), "%s: the copy was committed", what);
}

int main(void)
{
    char dir[PATH_MAX], dst[PATH_MAX + 32];
    ct_stream s = { 0 };
    ct_source(dir, sizeof dir, "copy-any-order", seed, &s);
    REQUIRE(s.n == 3, "the source has %u data files, not 3", s.n);
    ck_err err = { 0 };
    uint64_t data = s.total - s.msize;
    uint8_t *put = malloc(s.total);
    REQUIRE(put, "out of memory");
    memcpy(put, s.bytes + s.msize, data);
    memcpy(put + data, s.bytes, s.msize);
    static feed fd;

    /* Interleaved, and the last file first, with 0, 1 and 3 checkers. */
    static const uint32_t in_order[3] = { 0, 1, 2 }, backwards[3] = { 2, 0, 1 };
    static const size_t steps[3] = { 65536 + 17, 1u << 20, 4096 };
    for (unsigned k = 0; k < 3; k++) {
        for (int way = 0; way < 2; way++) {
            unsigned chk = k == 2 ? 3 : k;
            pieces(&s, way ? backwards : in_order, !way, steps[k], &fd);
            snprintf(dst, sizeof dst, "%s/ok-%u-%s", dir, chk, way ? "backwards" : "interleaved");
            REQUIRE(mkdir(dst, 0755) == 0, "mkdir %s", dst);
            int r = receive(&s, put, dst, chk, &fd, -1, false, &err);
            CHECK(r == 0, "%u checkers, %s: %s", chk, way ? "the last file first" : "interleaved",
                  ck_err_msg(&err));
            CHECK(r < 0 || tl_verify_deep(dst, "src", seed) == 0, "%u checkers, %s: the copy "
                  "does not verify as saved", chk, way ? "the last file first" : "interleaved");
        }
    }

    /* A gap in a file: its second piece skipped (interleaved: piece 3 is file 0's). */
    pieces(&s, in_order, true, 65536, &fd);
    snprintf(dst, sizeof dst, "%s/gap", dir);
    REQUIRE(mkdir(dst, 0755) == 0, "mkdir %s", dst);
    int r = receive(&s, put, dst, 1, &fd, 3, false, &err);
    char want[CK_FILE_NAME_MAX + 64];
    snprintf(want, sizeof want, "at offset 131072 of data file %s, where 65536 of it were taken",
             s.files[0].name);
    refused(r, -EPROTO, &err, want, dst, "a file's bytes past a gap");

    /* The manifest before every data file ended: its first piece moved to the front. */
    pieces(&s, in_order, false, 1u << 20, &fd);
    unsigned first_m = 0;
    while (fd.at[first_m] < data)
        first_m++;
    uint64_t mat = fd.at[first_m];
    size_t mlen = fd.len[first_m];
    memmove(&fd.at[1], &fd.at[0], first_m * sizeof fd.at[0]);
    memmove(&fd.len[1], &fd.len[0], first_m * sizeof fd.len[0]);
    fd.at[0] = mat;
    fd.len[0] = mlen;
    snprintf(dst, sizeof dst, "%s/manifest-first", dir);
    REQUIRE(mkdir(dst, 0755) == 0, "mkdir %s", dst);
    r = receive(&s, put, dst, 1, &fd, -1, false, &err);
    refused(r, -EPROTO, &err, "bytes of its manifest at stream offset", dst,
            "the manifest before the data files ended");
    CHECK(strstr(ck_err_msg(&err), "before every data file ended"), "the manifest first: %s",
          ck_err_msg(&err));

    /* A checker given a file's second piece before its first. */
    pieces(&s, in_order, false, 65536, &fd);
    snprintf(dst, sizeof dst, "%s/checker-out-of-order", dir);
    REQUIRE(mkdir(dst, 0755) == 0, "mkdir %s", dst);
    r = receive(&s, put, dst, 2, &fd, -1, true, &err);
    snprintf(want, sizeof want, "checker 0: bytes at offset 65536 of data file %s, where it "
             "took 0", s.files[0].name);
    refused(r, -EPROTO, &err, want, dst, "a checker's bytes out of order");

    /* A byte flipped in the middle of file 1, interleaved: its block named at the commit. */
    uint8_t *bad = malloc(s.total);
    REQUIRE(bad, "out of memory");
    memcpy(bad, put, s.total);
    uint64_t off = s.files[1].size / 2 + 5;
    bad[s.files[0].size + off] ^= 0x20;
    pieces(&s, in_order, true, 100003, &fd);
    snprintf(dst, sizeof dst, "%s/flipped", dir);
    REQUIRE(mkdir(dst, 0755) == 0, "mkdir %s", dst);
    r = receive(&s, bad, dst, 3, &fd, -1, false, &err);
    snprintf(want, sizeof want, "data file %s, block %llu ", s.files[1].name,
             (unsigned long long)(off / CT_BLOCK));
    refused(r, -EBADMSG, &err, want, dst, "a flipped byte, interleaved");

    /* More files begun at once than a copy holds open: CK_COPY_BEGUN_MAX + 1 files of
     * 8 KiB, the first 4 KiB of each. */
    enum { MANY = CK_COPY_BEGUN_MAX + 1 };
    static ck_file many[MANY];
    for (unsigned i = 0; i < MANY; i++) {
        snprintf(many[i].name, sizeof many[i].name, "rank-%05u.dat", i);
        many[i].size = 8192;
    }
    snprintf(dst, sizeof dst, "%s/many", dir);
    REQUIRE(mkdir(dst, 0755) == 0, "mkdir %s", dst);
    ck__copy_in_opts o = { .manifest_last = true, .block_size = CT_BLOCK, .root = dst,
                           .name = "src", .source = "n1", .files = many, .n_files = MANY };
    ck__copy_in *c;
    REQUIRE(ck__copy_in_begin(&o, &c, &err) == 0, "%s", ck_err_msg(&err));
    r = 0;
    for (unsigned i = 0; r == 0 && i < MANY; i++)
        r = ck__copy_in_write_at(c, (uint64_t)i * 8192, put, 4096, &err);
    ck__copy_in_free(c);
    snprintf(want, sizeof want, "data file rank-%05u.dat begun while %u others are",
             MANY - 1, CK_COPY_BEGUN_MAX);
    refused(r, -EPROTO, &err, want, dst, "one file too many begun at once");

    free(bad);
    free(put);
    ct_stream_free(&s);
    if (!tl_failures)
        tl_rmtree(dir);
    return tl_failures ? 1 : 0;
}
