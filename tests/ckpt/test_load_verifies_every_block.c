/* Every load checks the SHA-256 of every hash block it reads. One bit flipped in block
 * 1 of a committed checkpoint's data file (64 KiB blocks; t0's bytes span blocks 0-2,
 * t1 lies in block 2): every loader of t0 fails with -EBADMSG naming the checkpoint,
 * the data file, the tensor and the block - the reader, a batch, a shard read, the
 * readers of many threads, and a load onto 2 ranks whose box ends mid-block before the
 * flipped bit (the whole block is checked, not only the bytes wanted). Boxes that lie
 * in good blocks load. With verification off the same load succeeds and returns the
 * flipped value; a checkpoint saved without hashes has nothing to check and loads. */
#include <fcntl.h>

#include "ck/load.h"
#include "ck/save.h"
#include "ckpt_testlib.h"

#define N0 40000u            /* t0: 160000 bytes, blocks 0-2 */
#define N1 1000u             /* t1: at 163840, in block 2 */
#define BLOCK (64u << 10)
#define FLIP 100000u         /* a byte of block 1: element 25000 of t0 */

static float v0[N0], v1[N1];

static void save(const char *root, const char *name, bool hashed)
{
    ck_mesh m;
    ck_placement rep[1] = { { .kind = CK_REPLICATE } };
    REQUIRE(ck_mesh_parse("1", NULL, &m, NULL) == 0, "mesh");
    ck_save_opts o = { .block_size = BLOCK, .no_hash = !hashed };
    ck_err err = { 0 };
    ck_save *s;
    uint64_t n1 = N1;
    ck_decl *d = tl_decl1(&m, "t0", CK_F32, 1, (uint64_t[]){ N0 }, rep);
    REQUIRE(ck_decl_tensor(d, "t1", CK_F32, 1, &n1, rep, &err) == 0 &&
            ck_save_begin(&s, root, name, 1, d, &o, &err) == 0 &&
            ck_save_shard(s, "t0", 0, v0, &err) == 0 &&
            ck_save_shard(s, "t1", 0, v1, &err) == 0 &&
            ck_save_commit(s, NULL, &err) == 0, "%s: %s", name, ck_err_msg(&err));
    ck_decl_free(d);
}

/* Flips the lowest bit of byte FLIP of the checkpoint's one data file; its name. */
static const char *flip(const char *root, const char *name)
{
    static char file[CK_FILE_NAME_MAX];
    ck_err err = { 0 };
    ck_ckpt *ck;
    char path[PATH_MAX];
    REQUIRE(ck_open(root, name, &ck, &err) == 0, "%s", ck_err_msg(&err));
    REQUIRE(ck_get_info(ck)->n_files == 1, "one data file");
    snprintf(file, sizeof file, "%s", ck_file_get(ck, 0)->name);
    ck_file_path(ck, 0, path, sizeof path);
    ck_close(ck);
    int fd = open(path, O_RDWR);
    uint8_t b;
    REQUIRE(fd >= 0 && pread(fd, &b, 1, FLIP) == 1, "%s: %s", path, strerror(errno));
    b ^= 1;
    REQUIRE(pwrite(fd, &b, 1, FLIP) == 1 && fsync(fd) == 0, "%s: %s", path, strerror(errno));
    close(fd);
    return file;
}

/* rc is -EBADMSG and the message names the checkpoint, file, tensor and block 1. */
static void bad(const char *what, int rc, const ck_err *err, const char *dir, const char *file)
{
    const char *m = ck_err_msg(err);
    char blk[64];
    snprintf(blk, sizeof blk, "block 1 (bytes %u-%u)", BLOCK, 2 * BLOCK);
    CHECK(rc == -EBADMSG && strstr(m, dir) && strstr(m, file) && strstr(m, "tensor t0") &&
          strstr(m, blk) && strstr(m, "SHA-256"),
          "%s: %d, '%s' (want -EBADMSG naming %s, %s, tensor t0, %s)", what, rc, m, dir, file,
          blk);
}

int main(void)
{
    char root[PATH_MAX], dir[PATH_MAX + 8];
    tl_tmpdir(root, sizeof root, "vload");
    for (uint32_t i = 0; i < N0; i++)
        v0[i] = (float)i;
    for (uint32_t i = 0; i < N1; i++)
        v1[i] = -(float)i;
    save(root, "c", true);
    save(root, "plain", false);
    const char *file = flip(root, "c");
    flip(root, "plain");
    snprintf(dir, sizeof dir, "%s/c", root);

    ck_err err = { 0 };
    ck_ckpt *ck;
    REQUIRE(ck_open(root, "c", &ck, &err) == 0, "%s", ck_err_msg(&err));
    static float got[N0];
    ck_box all0 = { .ndim = 1, .len = { N0 } }, all1 = { .ndim = 1, .len = { N1 } };

    /* The reader: all of t0; a few elements of block 1 before the flipped byte. */
    ck_reader *rd;
    REQUIRE(ck_reader_open(ck, "t0", CK_AS_SAVED, &rd, &err) == 0, "%s", ck_err_msg(&err));
    bad("reader, all of t0", ck_reader_read(rd, &all0, 0, sizeof got, got, &err), &err, dir, file);
    ck_err_clear(&err);
    ck_box some = { .ndim = 1, .off = { BLOCK / 4 }, .len = { 10 } };
    bad("reader, 10 elements of block 1", ck_reader_read(rd, &some, 0, 40, got, &err), &err,
        dir, file);
    ck_err_clear(&err);
    ck_box head = { .ndim = 1, .len = { 100 } };
    CHECK(ck_reader_read(rd, &head, 0, 400, got, &err) == 0 && got[99] == 99.0f,
          "t0's first elements, in good block 0: %s", ck_err_msg(&err));
    /* Onto 2 ranks: rank 0's box ends at byte 80000, inside block 1, before the flip. */
    ck_mesh two;
    ck_placement s0[1] = { { .kind = CK_SHARD, .dim = 0 } };
    REQUIRE(ck_mesh_parse("2", NULL, &two, NULL) == 0, "mesh");
    bad("rank 0 of 2, whose box ends mid-block before the flip",
        ck_reader_read_shard(rd, &two, s0, 0, got, &err), &err, dir, file);
    ck_err_clear(&err);
    ck_reader_close(rd);
    REQUIRE(ck_reader_open(ck, "t1", CK_AS_SAVED, &rd, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(ck_reader_read(rd, &all1, 0, N1 * 4, got, &err) == 0 && got[N1 - 1] == -(float)(N1 - 1),
          "t1, in good block 2: %s", ck_err_msg(&err));
    ck_reader_close(rd);

    /* A batch, a shard read, the readers of many threads. */
    ck_load_item it = { .tensor = "t0", .box = all0, .dst = got, .len = sizeof got };
    bad("batch", ck_load_many(ck, &it, 1, &err), &err, dir, file);
    ck_err_clear(&err);
    ck_tensor t;
    ck_shard *sh;
    uint32_t nsh;
    REQUIRE(ck_tensor_get(ck, "t0", &t, &err) == 0 && ck_shards_get(ck, &t, &sh, &nsh, &err) == 0,
            "%s", ck_err_msg(&err));
    int rc = ck_shard_read(ck, &sh[0], 0, sizeof got, got, &err);
    CHECK(rc == -EBADMSG && strstr(ck_err_msg(&err), file) && strstr(ck_err_msg(&err), "block 1"),
          "shard read: %d, '%s'", rc, ck_err_msg(&err));
    ck_err_clear(&err);
    free(sh);
    ck_readers *rs;
    REQUIRE(ck_readers_open_ckpt(ck, &rs, &err) == 0, "%s", ck_err_msg(&err));
    bad("readers", ck_readers_read(rs, "t0", &all0, 0, sizeof got, got, &err), &err, dir, file);
    ck_err_clear(&err);
    ck_readers_close(rs);

    /* Verification off: the load takes the bytes as they are. */
    ck_load_verify(ck, false);
    REQUIRE(ck_reader_open(ck, "t0", CK_AS_SAVED, &rd, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(ck_reader_read(rd, &all0, 0, sizeof got, got, &err) == 0, "unverified: %s",
          ck_err_msg(&err));
    float flipped = v0[FLIP / 4];
    uint8_t *fb = (uint8_t *)&flipped;
    fb[FLIP % 4] ^= 1;
    CHECK(memcmp(&got[FLIP / 4], &flipped, 4) == 0 && got[FLIP / 4] != v0[FLIP / 4],
          "the unverified load did not return the flipped value");
    ck_reader_close(rd);
    ck_close(ck);

    /* Saved without hashes: nothing to check. */
    REQUIRE(ck_open(root, "plain", &ck, &err) == 0 &&
            ck_reader_open(ck, "t0", CK_AS_SAVED, &rd, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(ck_reader_read(rd, &all0, 0, sizeof got, got, &err) == 0 &&
          got[FLIP / 4] != v0[FLIP / 4], "a checkpoint without hashes: %s", ck_err_msg(&err));
    ck_reader_close(rd);
    ck_close(ck);
    tl_rmtree(root);
    if (tl_failures)
        return 1;
    printf("ok: a flipped bit fails every verified load of its block, named\n");
    return 0;
}
