/* Client API, blobs (ck_client_blob), embedded and through ckptd: a zero-length blob,
 * one of exactly CK_BLOB_MAX bytes and small odd-sized ones, behind shards whose
 * sizes are not multiples of 4 KiB, come back byte-identical through the core reader
 * (ck_open + ck_blob_get; the client offers no blob read of its own), and nothing
 * else is listed. A blob over the limit and a blob named like a path are refused
 * with a clear error, and the save goes on without them; a blob name used by two
 * ranks fails that save on both ranks and leaves nothing visible. Both modes commit
 * the same checkpoint (digest of tensors, blobs and data files). */
#include "kc_testlib.h"

static const kc_tensor tensors[] = {
    { CK_F32, 1, { 1001 }, "S(0)" },
    { CK_BF16, 2, { 3, 5 }, "R" },
};
#define NT 2

typedef struct blob {
    uint64_t rank;
    const char *name;
    size_t len;
} blob;

static const blob blobs[] = {
    { 0, "empty", 0 },
    { 0, "rng.rank0", 37 },
    { 1, "big", CK_BLOB_MAX },
    { 1, "rng.rank1", 4097 },
};
#define NB 4

static uint8_t *pattern;        /* CK_BLOB_MAX + 1 bytes */

/* The bytes of blob i: a slice of the pattern that differs per blob. */
static const uint8_t *blob_bytes(size_t i)
{
    return pattern + (i * 4099) % 8192 * (blobs[i].len < CK_BLOB_MAX);
}

static int count_blob(const char *name, const void *data, size_t len, void *arg)
{
    (void)name, (void)data, (void)len;
    ++*(int *)arg;
    return 0;
}

static uint64_t run(bool connected)
{
    kc_env e;
    kc_open(&e, connected, "kcblob", 2, NULL, NULL);
    const char *mode = kc_mode(&e);
    ck_mesh mesh;
    REQUIRE(ck_mesh_parse("2", NULL, &mesh, NULL) == 0, "mesh");
    ck_err err = { 0 };
    ck_client_save *sv[2];
    kc_part parts[2] = { 0 };
    for (uint64_t r = 0; r < 2; r++) {
        REQUIRE(kc_begin(e.cl[r], &sv[r], "blobs", 3, &mesh, r, tensors, NT, &kc_job, &err) == 0,
                "%s: begin: %s", mode, ck_err_msg(&err));
        kc_declare(sv[r], &mesh, r, tensors, NT, &parts[r], false);
        for (size_t i = 0; i < NB; i++)
            if (blobs[i].rank == r)
                REQUIRE(ck_client_blob(sv[r], blobs[i].name, blob_bytes(i), blobs[i].len,
                                       &err) == 0, "%s: blob %s of %zu bytes: %s", mode,
                        blobs[i].name, blobs[i].len, ck_err_msg(&err));
    }
    /* Refused, with the sizes / the reason named; the save goes on. */
    memset(&err, 0, sizeof err);
    int rc = ck_client_blob(sv[0], "toobig", pattern, (size_t)CK_BLOB_MAX + 1, &err);
    CHECK(rc == -EFBIG, "%s: a blob of CK_BLOB_MAX + 1 bytes: %d, expected -EFBIG", mode, rc);
    CHECK(strstr(ck_err_msg(&err), "toobig") && strstr(ck_err_msg(&err), "67108865"),
          "%s: the over-limit error does not name the blob and its size: %s", mode,
          ck_err_msg(&err));
    memset(&err, 0, sizeof err);
    rc = ck_client_blob(sv[1], "../x", pattern, 4, &err);
    CHECK(rc < 0 && ck_err_msg(&err)[0], "%s: a blob named ../x was accepted", mode);

    for (uint64_t r = 0; r < 2; r++)
        REQUIRE(ck_client_submit(sv[r], &kc_copy, &err) == 0, "%s: rank %llu: submit: %s", mode,
                (unsigned long long)r, ck_err_msg(&err));
    REQUIRE(ck_client_commit(sv[0], &err) == 0, "%s: commit: %s", mode, ck_err_msg(&err));
    for (uint64_t r = 0; r < 2; r++) {
        CHECK(ck_client_wait(sv[r], CK_CLIENT_COMMITTED, &err) == 0, "%s: rank %llu: wait: %s", mode,
              (unsigned long long)r, ck_err_msg(&err));
        ck_client_save_free(sv[r]);
        kc_part_free(&parts[r]);
    }

    /* Every blob back, byte for byte, and nothing else. */
    ck_ckpt *ck;
    REQUIRE(ck_open(e.root, "blobs", &ck, &err) == 0, "%s: open: %s", mode, ck_err_msg(&err));
    CHECK(ck_get_info(ck)->n_blobs == NB, "%s: %u blobs listed, %d saved", mode,
          ck_get_info(ck)->n_blobs, NB);
    int listed = 0;
    CHECK(ck_blobs_each(ck, count_blob, &listed, &err) == 0 && listed == NB,
          "%s: ck_blobs_each walked %d blobs, %d saved", mode, listed, NB);
    for (size_t i = 0; i < NB; i++) {
        void *data = NULL;
        size_t len = 12345;
        rc = ck_blob_get(ck, blobs[i].name, &data, &len, &err);
        CHECK(rc == 0, "%s: blob %s: %s", mode, blobs[i].name, ck_err_msg(&err));
        CHECK(rc != 0 || len == blobs[i].len, "%s: blob %s: %zu bytes back, %zu saved", mode,
              blobs[i].name, len, blobs[i].len);
        CHECK(rc != 0 || len != blobs[i].len || memcmp(data, blob_bytes(i), len) == 0,
              "%s: blob %s: bytes differ from the saved ones", mode, blobs[i].name);
        free(data);
    }
    void *data = NULL;
    size_t len;
    CHECK(ck_blob_get(ck, "toobig", &data, &len, &err) == -ENOENT,
          "%s: the refused blob was saved", mode);
    free(data);
    ck_close(ck);
    CHECK(tl_verify_deep(e.root, "blobs", KC_SEED) == 0, "%s: the checkpoint does not verify",
          mode);
    uint64_t digest = kc_digest(e.root, "blobs");
    CHECK(digest != 0, "%s: cannot digest the checkpoint", mode);

    /* One name on two ranks: that save fails on both, nothing is visible. */
    for (uint64_t r = 0; r < 2; r++) {
        REQUIRE(kc_begin(e.cl[r], &sv[r], "dup", 4, &mesh, r, tensors, NT, &kc_job, &err) == 0,
                "%s: begin: %s", mode, ck_err_msg(&err));
        kc_declare(sv[r], &mesh, r, tensors, NT, &parts[r], false);
        REQUIRE(ck_client_blob(sv[r], "same", pattern, 10, &err) == 0, "%s: blob: %s", mode,
                ck_err_msg(&err));
    }
    int async_rc[2];
    for (uint64_t r = 0; r < 2; r++)
        async_rc[r] = ck_client_submit(sv[r], &kc_copy, &err);
    if (async_rc[0] == 0)
        ck_client_commit(sv[0], &err);
    for (uint64_t r = 0; r < 2; r++) {
        memset(&err, 0, sizeof err);
        rc = ck_client_wait(sv[r], CK_CLIENT_COMMITTED, &err);
        CHECK(rc < 0, "%s: rank %llu: a save with a blob name on two ranks succeeded", mode,
              (unsigned long long)r);
        CHECK(rc >= 0 || strstr(ck_err_msg(&err), "same"),
              "%s: rank %llu: the error does not name the duplicate blob: %s", mode,
              (unsigned long long)r, ck_err_msg(&err));
        ck_client_save_free(sv[r]);
        kc_part_free(&parts[r]);
    }
    CHECK(!kd_exists(e.root, "dup"), "%s: the failed save is visible", mode);

    kc_close(&e);
    kc_remove(&e);
    return digest;
}

int main(void)
{
    pattern = malloc((size_t)CK_BLOB_MAX + 1);
    REQUIRE(pattern, "oom");
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i <= CK_BLOB_MAX; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        pattern[i] = (uint8_t)x;
    }
    int rc = kc_both_modes(run, false, "blobs (0 bytes, CK_BLOB_MAX, odd sizes) byte-identical "
                           "in both modes; over-limit, path-named and duplicate blobs "
                           "refused; modes agree");
    free(pattern);
    return rc;
}
