/* fuzz_manifest.c - the manifest reader on any records (docs/FORMAT.md, "The manifest").
 *
 * The input's records (fz_mdb.h) become a manifest.mdb in a scratch checkpoint
 * directory, which is opened and read through everything a tool reads: every tensor,
 * its shards, the hashes of the first blocks of every file, the blobs, and the
 * structural verification. Each must refuse what is wrong with an error, never crash,
 * leak or run without bound.
 */
#include <stdio.h>
#include <stdlib.h>

#include "ck/ckpt.h"
#include "ck/verify.h"
#include "format/manifest.h"
#include "fz_mdb.h"
#include "format/layout.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const dbs[] = { CK_DB_META, CK_DB_TENSORS, CK_DB_SHARDS,
                                   CK_DB_FILES, CK_DB_HASHES, CK_DB_BLOBS };

static int each_tensor(const ck_tensor *t, void *arg)
{
    ck_ckpt *ck = arg;
    ck_shard *s;
    uint32_t n;
    ck_err err = { 0 };
    if (ck_shards_get(ck, t, &s, &n, &err) == 0)
        free(s);
    return 0;
}

static int each_blob(const char *name, const void *p, size_t len, void *arg)
{
    (void)name, (void)p, (void)len, (void)arg;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fz_mdb_build(CK_MANIFEST, dbs, 6, data, size) < 0)
        return 0;
    ck_ckpt *ck;
    ck_err err = { 0 };
    if (ck_open_dir(fz_scratch(), &ck, &err) < 0)
        return 0;
    ck_tensors_each(ck, each_tensor, ck, &err);
    const ck_info *in = ck_get_info(ck);
    uint8_t h[CK_HASH_LEN];
    for (uint32_t f = 0; f < in->n_files && f < 4; f++)
        for (uint64_t b = 0; b < 4; b++)
            ck_hash_get(ck, f, b, h, &err);
    ck_blobs_each(ck, each_blob, NULL, &err);
    ck_verify_opts o = { .threads = 1 };
    ck_verify_result res;
    ck_verify(ck, &o, &res, &err);
    ck_close(ck);
    return 0;
}
