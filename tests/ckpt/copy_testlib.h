/* copy_testlib.h - a copy's whole stream in memory (ops/copy.h): what a sender would
 * send of the checkpoint "src" (three tensors of three dtypes and placements, 64 KiB
 * blocks, on a mesh of 3) in a root, for the tests that feed it to copies in pieces.
 * Header-only, as ckpt_testlib.h. */
#ifndef COPY_TESTLIB_H
#define COPY_TESTLIB_H

#include "ck/save.h"
#include "ckpt_testlib.h"
#include "ops/copy.h"

#define CT_BLOCK (64u << 10)

typedef struct ct_stream {
    uint8_t *bytes;
    uint64_t total, msize;
    uint8_t sha[CK_SHA256_LEN];    /* the manifest's, as the sender declares it */
    ck_file *files;
    uint32_t n;
} ct_stream;

static inline void ct_read_stream(const char *root, ct_stream *s)
{
    ck__copy_out *o;
    ck_err err = { 0 };
    REQUIRE(ck__copy_out_open(root, "src", NULL, 0, &o, &err) == 0, "%s", ck_err_msg(&err));
    s->total = o->total;
    s->msize = o->manifest_size;
    memcpy(s->sha, o->manifest_sha256, sizeof s->sha);
    s->n = o->n_files;
    s->files = malloc(s->n * sizeof *s->files);
    s->bytes = malloc(s->total);
    REQUIRE(s->files && s->bytes, "out of memory");
    memcpy(s->files, o->files, s->n * sizeof *s->files);
    size_t got;
    REQUIRE(ck__copy_out_read(o, s->bytes, s->total, &got, &err) == 0 && got == s->total,
            "reading the stream: %s", ck_err_msg(&err));
    ck__copy_out_close(o);
}

/* A fresh directory DIR (tl_tmpdir, tag) whose DIR/src root holds checkpoint "src" saved
 * with seed, and its stream, into s. */
static inline void ct_source(char *dir, size_t len, const char *tag, uint64_t seed,
                             ct_stream *s)
{
    static const uint64_t shapes[3][2] = { { 3000, 100 }, { 77, 1023 }, { 64, 64 } };
    static const ck_dtype dt[3] = { CK_F32, CK_BF16, CK_F64 };
    static const char *const pls[3] = { "S(0)", "S(1)", "R" };
    char src[PATH_MAX + 8];
    tl_tmpdir(dir, len, tag);
    snprintf(src, sizeof src, "%s/src", dir);
    REQUIRE(mkdir(src, 0755) == 0, "mkdir %s", src);
    ck_save_opts so = { .block_size = CT_BLOCK };
    tl_save_formula_opts(src, "src", "3", NULL, shapes, dt, pls, 3, seed, &so);
    ct_read_stream(src, s);
}

/* Whether root holds a committed "src". */
static inline bool ct_committed(const char *root)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/src", root);
    return access(p, F_OK) == 0;
}

/* Where data file f's bytes start in the stream. */
static inline uint64_t ct_file_at(const ct_stream *s, uint32_t f)
{
    uint64_t at = s->msize;
    for (uint32_t i = 0; i < f; i++)
        at += s->files[i].size;
    return at;
}

/* A writer ("n1") that joins the copy of "src" in root's pending directory token and
 * writes data file f: the manifest (man: its bytes, sha: declared), then the file's
 * bytes from the stream (flip: a byte of it to flip, or -1), then its commit. */
static inline int ct_join(const ct_stream *s, const char *root, const char *token, uint32_t f,
                          const uint8_t *man, const uint8_t *sha, int64_t flip, ck_err *err)
{
    ck__copy_in_opts o = { .root = root, .name = "src", .source = "n1",
                           .manifest_size = s->msize, .manifest_sha256 = sha,
                           .files = s->files + f, .n_files = 1, .join = token };
    ck__copy_in *c;
    *err = (ck_err){ 0 };
    int r = ck__copy_in_begin(&o, &c, err);
    uint8_t *data = malloc(s->files[f].size);
    REQUIRE(data, "out of memory");
    memcpy(data, s->bytes + ct_file_at(s, f), s->files[f].size);
    if (flip >= 0)
        data[flip] ^= 0x20;
    if (r == 0)
        r = ck__copy_in_write(c, man, s->msize, err);
    for (uint64_t at = 0; r == 0 && at < s->files[f].size; at += 100003) {
        uint64_t left = s->files[f].size - at;
        r = ck__copy_in_write(c, data + at, left < 100003 ? (size_t)left : 100003, err);
    }
    if (r == 0)
        r = ck__copy_in_commit(c, err);
    ck__copy_in_free(c);
    free(data);
    return r;
}

/* Whether root's pending directory of "src" with token holds file. */
static inline bool ct_pending_has(const char *root, const char *token, const char *file)
{
    char p[PATH_MAX * 2];
    snprintf(p, sizeof p, "%s/.pending/src.%s/%s", root, token, file);
    return access(p, F_OK) == 0;
}

/* DIR/NAME, made, into out. */
static inline char *ct_mkroot(const char *dir, const char *name, char *out, size_t len)
{
    snprintf(out, len, "%s/%s", dir, name);
    REQUIRE(mkdir(out, 0755) == 0, "mkdir %s", out);
    return out;
}

static inline void ct_stream_free(ct_stream *s)
{
    free(s->bytes);
    free(s->files);
}

#endif
