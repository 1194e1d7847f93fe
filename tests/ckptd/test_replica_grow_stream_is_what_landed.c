/* The stream of a PUT begun beside the local write (ckptd/kd_peer_grow.c, decisions
 * 0204 and 0206) is what landed, each file in order and the files in any order, then
 * the committed copy's manifest; and the manifest ends it only when the copy holds the
 * files the stream declared.
 *
 * A partial copy of checkpoint c (rank-00000.dat and rank-00002.dat of four ranks, in
 * blocks of 1 MiB) stands for a node's files being written: its pending directory is
 * gone, so the stream finds them in the committed copy, as after the commit's rename.
 *   1. Nothing is cut before a byte landed. The files then land in steps of 300 KiB
 *      and 100 bytes (not a multiple of 4096), the second file twice as fast as the
 *      first; after each step every piece that can be cut is cut (at most 256 KiB) and
 *      read. Each piece lies within what landed of its file, follows the file's piece
 *      before, is a multiple of 4096 bytes but at its file's end, holds the file's
 *      bytes, and its stream offset is its file's plus its own. The second file is cut
 *      whole before the first is: the stream follows what lands, not the files' order.
 *      A count that goes back, one past the file's end, and one for a file the stream
 *      does not have change nothing.
 *   2. Once every byte landed, nothing is cut until the manifest is attached
 *      (kd_grow_manifest: the copy holds the files declared); its size and SHA-256 are
 *      the manifest file's, its pieces are its bytes at the stream's end, and then the
 *      stream ends.
 *   3. A copy that holds more files than declared, one declared that it lacks, or one
 *      of another size: kd_grow_manifest refuses with -ESTALE, naming what differs.
 */
#include <stdlib.h>
#include <sys/stat.h>

#include "kd_testlib.h"

#include "kd.h"
#include "format/layout.h"
#include "io/hash.h"
#include "ops/copy.h"

#define STEP ((300u << 10) + 100)
#define CUT (256u << 10)

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    REQUIRE(f, "%s: %s", path, strerror(errno));
    REQUIRE(fseek(f, 0, SEEK_END) == 0, "%s: seek", path);
    long n = ftell(f);
    rewind(f);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    REQUIRE(b && fread(b, 1, (size_t)n, f) == (size_t)n, "%s: read", path);
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* Cuts and reads every piece the stream has now; each is checked against want (data
 * file i at want[i], the manifest at want[n]; sizes likewise) and against what landed.
 * off[i]: where item i's pieces are (the manifest's at off[n]); *whole_first: the
 * first data file cut whole (or n). Returns the last cut's result (-EAGAIN: waits for
 * more; 0: the end). */
static int drain(kd_grow *g, uint8_t *const *want, const uint64_t *sizes,
                 const uint64_t *landed, uint32_t n, uint64_t *off, uint32_t *whole_first,
                 void *buf)
{
    ck_err err = { 0 };
    ck__copy_cut k;
    uint64_t at;
    int r;
    while ((r = kd_grow_cut(g, CUT, &k, &at, &err)) == 1) {
        uint32_t i = k.item ? k.item - 1 : n;
        uint64_t base = 0;
        for (uint32_t j = 0; j < i; j++)
            base += sizes[j];
        CHECK(at == base + k.off, "item %u: a piece at stream offset %llu, not %llu", k.item,
              (unsigned long long)at, (unsigned long long)(base + k.off));
        CHECK(k.off == off[i], "item %u: a piece at %llu where %llu was next", k.item,
              (unsigned long long)k.off, (unsigned long long)off[i]);
        CHECK(k.len > 0 && k.len <= CUT, "a piece of %zu bytes", k.len);
        for (uint32_t j = 0; !k.item && j < n; j++)
            CHECK(off[j] == sizes[j], "the manifest was cut before data file %u was whole", j);
        if (k.item) {
            CHECK(k.off + k.len <= landed[i], "file %u: a piece to %llu, past the %llu bytes "
                  "landed", i, (unsigned long long)(k.off + k.len),
                  (unsigned long long)landed[i]);
            CHECK(k.len % CK_COPY_OUT_ALIGN == 0 || k.off + k.len == sizes[i],
                  "file %u: a piece of %zu bytes short of its end", i, k.len);
        }
        REQUIRE(kd_grow_read(g, &k, buf, &err) == 0, "read: %s", ck_err_msg(&err));
        CHECK(!memcmp(buf, want[i] + k.off, k.len), "item %u: bytes %llu-%llu are not the "
              "file's", k.item, (unsigned long long)k.off, (unsigned long long)(k.off + k.len));
        off[i] += k.len;
        if (i < n && off[i] == sizes[i] && *whole_first == n)
            *whole_first = i;
    }
    REQUIRE(r == -EAGAIN || r == 0, "cut: %s", ck_err_msg(&err));
    return r;
}

/* kd_grow_manifest of a stream that declared files[0..n): -ESTALE, saying what. */
static void stale(const char *local, const char *pend, const ck_file *files, uint32_t n,
                  const char *says)
{
    ck_err err = { 0 };
    kd_grow *g;
    ck__copy_out *m = NULL;
    REQUIRE(kd_grow_open(local, pend, "c", files, n, &g, &err) == 0, "open: %s",
            ck_err_msg(&err));
    int r = kd_grow_manifest(g, &m, &err);
    CHECK(r == -ESTALE && strstr(ck_err_msg(&err), says),
          "the manifest of a copy that differs (%s): %d, %s", says, r, ck_err_msg(&err));
    ck__copy_out_close(m);
    kd_grow_free(g);
}

int main(void)
{
    char root[PATH_MAX], src[PATH_MAX + 8], local[PATH_MAX + 8], pend[PATH_MAX + 64];
    char path[PATH_MAX + 64];
    tl_tmpdir(root, sizeof root, "grow");
    snprintf(src, sizeof src, "%s/src", root);
    snprintf(local, sizeof local, "%s/local", root);
    REQUIRE(mkdir(src, 0700) == 0 && mkdir(local, 0700) == 0, "mkdir: %s", strerror(errno));
    const char *synth[] = { CKPT_SYNTH_PATH, src, "--name", "c", "--mesh", "4", "--tensors",
                            "2", "--bytes", "12MiB", "--block-size", "1MiB", "--seed", "5",
                            NULL };
    REQUIRE(kd_run(synth, NULL, 60) == 0, "ckpt-synth failed");
    const char *part[] = { COPY_PARTIAL_PATH, src, "c", local, "A", "rank-00000.dat",
                           "rank-00002.dat", NULL };
    REQUIRE(kd_run(part, NULL, 60) == 0, "copy_partial failed");
    snprintf(pend, sizeof pend, "%s/%s/c.0123456789ab", local, CK_PENDING);

    ck_file f[2] = { { .name = "rank-00000.dat" }, { .name = "rank-00002.dat" } };
    uint8_t *want[3];
    size_t len;
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/c/%s", local, f[i].name);
        want[i] = slurp(path, &len);
        f[i].size = len;
    }
    snprintf(path, sizeof path, "%s/c/%s", local, CK_MANIFEST);
    size_t mlen;
    want[2] = slurp(path, &mlen);
    const uint64_t sizes[3] = { f[0].size, f[1].size, mlen };
    REQUIRE(f[0].size > 2 * STEP && f[1].size > 2 * STEP, "files of %llu and %llu bytes",
            (unsigned long long)f[0].size, (unsigned long long)f[1].size);

    ck_err err = { 0 };
    kd_grow *g;
    REQUIRE(kd_grow_open(local, pend, "c", f, 2, &g, &err) == 0, "open: %s", ck_err_msg(&err));
    CHECK(kd_grow_data_bytes(g) == f[0].size + f[1].size, "the data bytes");
    void *buf = aligned_alloc(CK_COPY_OUT_ALIGN, CUT);
    REQUIRE(buf, "out of memory");
    uint64_t landed[2] = { 0, 0 }, off[3] = { 0, 0, 0 };
    uint32_t whole_first = 2;

    /* 1. What landed, each file in order, the files as they land. */
    CHECK(drain(g, want, sizes, landed, 2, off, &whole_first, buf) == -EAGAIN &&
          !off[0] && !off[1], "a piece was cut before any byte landed");
    unsigned steps = 0;
    while (landed[0] < f[0].size || landed[1] < f[1].size) {
        for (int i = 1; i >= 0; i--) {     /* the second file ahead of the first */
            uint64_t to = landed[i] + (i ? 2 * STEP : STEP);
            landed[i] = to < f[i].size ? to : f[i].size;
            kd_grow_landed(g, (uint32_t)i, landed[i]);
        }
        /* Counts that must change nothing. */
        kd_grow_landed(g, 0, landed[0] / 2);
        if (landed[0] < f[0].size)
            kd_grow_landed(g, 0, f[0].size + CK_COPY_OUT_ALIGN);
        kd_grow_landed(g, 2, STEP);
        CHECK(drain(g, want, sizes, landed, 2, off, &whole_first, buf) == -EAGAIN,
              "the stream ended before its manifest");
        steps++;
    }
    CHECK(steps > 4, "the files landed in %u steps", steps);
    CHECK(off[0] == f[0].size && off[1] == f[1].size, "the data files were not sent whole: "
          "%llu and %llu bytes", (unsigned long long)off[0], (unsigned long long)off[1]);
    CHECK(whole_first == 1, "the file that landed first was not cut whole first (file %u "
          "was)", whole_first);

    /* 2. The manifest, once attached, and the end. */
    CHECK(drain(g, want, sizes, landed, 2, off, &whole_first, buf) == -EAGAIN,
          "a cut past the data files before the manifest was attached");
    ck__copy_out *m;
    REQUIRE(kd_grow_manifest(g, &m, &err) == 0, "manifest: %s", ck_err_msg(&err));
    kd_grow_attach(g, m);
    uint64_t msize;
    uint8_t sha[CK_SHA256_LEN], mine[CK_SHA256_LEN];
    REQUIRE(ck__sha256(want[2], mlen, mine) == 0, "sha256");
    CHECK(kd_grow_attached(g, &msize, sha) && msize == mlen && !memcmp(sha, mine, sizeof sha),
          "the attached manifest is not the copy's (%llu bytes, %zu on disk)",
          (unsigned long long)msize, mlen);
    CHECK(drain(g, want, sizes, landed, 2, off, &whole_first, buf) == 0,
          "the stream did not end");
    CHECK(off[2] == mlen, "the manifest was not sent whole: %llu of %zu bytes",
          (unsigned long long)off[2], mlen);
    kd_grow_free(g);

    /* 3. A committed copy that is not what the stream declared. */
    stale(local, pend, f, 1, "holds 2 data file(s); 1 were sent");
    ck_file other[2] = { f[0], { .name = "rank-00001.dat", .size = f[1].size } };
    stale(local, pend, other, 2, "data file rank-00001.dat is not in it");
    ck_file bigger[2] = { f[0], f[1] };
    bigger[1].size += CK_COPY_OUT_ALIGN;
    stale(local, pend, bigger, 2, "data file rank-00002.dat has another size");

    free(buf);
    for (int i = 0; i < 3; i++)
        free(want[i]);
    if (tl_failures)
        return 1;
    tl_rmtree(root);
    printf("ok: a growing stream is what landed, each file in order, in %u steps, then the "
           "manifest; "
           "a copy that differs from its declaration is refused\n", steps);
    return 0;
}
