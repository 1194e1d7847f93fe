/* copy_testlib.h - a copy's whole stream in memory (ops/copy.h): what a sender would
 * send of the checkpoint "src" in a root, for the tests that feed it to copies in
 * pieces. Header-only, as ckpt_testlib.h. */
#ifndef COPY_TESTLIB_H
#define COPY_TESTLIB_H

#include "ckpt_testlib.h"
#include "ops/copy.h"

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

static inline void ct_stream_free(ct_stream *s)
{
    free(s->bytes);
    free(s->files);
}

#endif
