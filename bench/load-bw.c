/* load-bw - load throughput of the core beside a raw sequential read of the same
 * bytes on the same file system, and with hash verification beside in-memory SHA-256.
 *
 * Setup (untimed): the shards are filled with a pattern, saved through the core with
 * hashes, and written raw to one file. Each run then does, every file evicted from the
 * page cache first: the raw read; a load; SHA-256 of the loaded bytes in memory; a
 * verified load, which also hashes every block of every data file on the core's hash
 * pool while the next shards are read, and compares the digests with the manifest.
 * The destination is one buffer of SIZE bytes, faulted in beforehand, as a model's
 * tensors are when a checkpoint is loaded into them. After each load, outside the
 * timing, every byte is checked against the pattern and the buffer is poisoned, so
 * that a load which leaves stale or wrong bytes fails the bench (exit 1).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "ck/ckpt.h"
#include "ck/load.h"
#include "tool.h"

static const char *prog = "load-bw";

enum { F_RAW, F_PLAIN, F_SHA, F_HASHED, F_N };

#define POISON 0xA5
#define CKPT "ckpt"

typedef struct load {
    const bench_opts *o;
    const bench_layout *L;
    uint8_t *buf;
    ck_ckpt *ck;
    bench_hasher *h;           /* NULL: no verification */
    uint32_t block;
    uint32_t *file_of;         /* rank -> data file id */
    uint64_t *queued;          /* per rank: bytes of its file whose hashes are queued */
    uint8_t *digests;          /* per rank, per block */
    uint64_t blocks_per_file;
    bool bad;                  /* the checkpoint is not what was saved */
    ck_err err;
} load;

static uint64_t file_bytes(const bench_layout *L)
{
    return (uint64_t)L->tensors * L->shard;
}

/* Queues the hashes of rank's blocks that lie wholly in its first `loaded` bytes.
 * Shards arrive in tensor order, which is the order of the file, so each file's
 * loaded bytes grow as a prefix. */
static int queue_hashes(load *ld, unsigned rank, uint64_t loaded)
{
    uint64_t size = file_bytes(ld->L);
    const uint8_t *mem = ld->buf + bench_shard_off(ld->L, 0, rank);
    while (ld->queued[rank] < size) {
        uint64_t b0 = ld->queued[rank], len = size - b0 < ld->block ? size - b0 : ld->block;
        if (b0 + len > loaded)
            break;
        uint8_t *out = ld->digests + (rank * ld->blocks_per_file + b0 / ld->block) * CK_HASH_LEN;
        int r = bench_hasher_submit(ld->h, mem + b0, len, out);
        if (r < 0)
            return ck_err_set(&ld->err, r, "queueing a hash: %s", strerror(-r));
        ld->queued[rank] = b0 + len;
    }
    return 0;
}

static int mismatch(load *ld, const char *fmt, const char *tensor, uint32_t idx)
{
    ld->bad = true;
    return ck_err_set(&ld->err, -EBADMSG, fmt, tensor, idx);
}

static int load_tensor(const ck_tensor *t, void *arg)
{
    load *ld = arg;
    const bench_layout *L = ld->L;
    if (t->id >= L->tensors || t->n_shards != L->ranks)
        return mismatch(ld, "tensor %s: not the saved tensor (%u shards)", t->name, t->n_shards);
    ck_shard *sh = NULL;
    uint32_t n = 0;
    int r = ck_shards_get(ld->ck, t, &sh, &n, &ld->err);
    for (uint32_t i = 0; r == 0 && i < n; i++) {
        unsigned rank = sh[i].coord[0];
        const ck_file *f = ck_file_get(ld->ck, sh[i].ext[0].file);
        /* The verified load hashes file blocks in place, so it relies on the buffer
         * being the image of the files (bench_shard_off); say so if the core ever
         * lays files out otherwise. */
        if (rank >= L->ranks || sh[i].n_extents != 1 || sh[i].ext[0].len != L->shard ||
            sh[i].ext[0].off != (uint64_t)t->id * L->shard ||
            !f || f->rank != rank) {
            r = mismatch(ld, "tensor %s: shard %u is not where the bench expects it", t->name,
                         sh[i].idx);
            break;
        }
        r = ck_shard_read(ld->ck, &sh[i], 0, L->shard,
                          ld->buf + bench_shard_off(L, t->id, rank), &ld->err);
        ld->file_of[rank] = sh[i].ext[0].file;
        if (r == 0 && ld->h)
            r = queue_hashes(ld, rank, ((uint64_t)t->id + 1) * L->shard);
    }
    free(sh);
    return r;
}

/* Compares the digests of every block with the manifest's. */
static int compare_hashes(load *ld)
{
    bench_hasher_wait(ld->h);
    for (unsigned rank = 0; rank < ld->L->ranks; rank++)
        for (uint64_t b = 0; b < ld->blocks_per_file; b++) {
            uint8_t want[CK_HASH_LEN];
            int r = ck_hash_get(ld->ck, ld->file_of[rank], b, want, &ld->err);
            if (r < 0)
                return r;
            if (memcmp(want, ld->digests + (rank * ld->blocks_per_file + b) * CK_HASH_LEN,
                       CK_HASH_LEN)) {
                ld->bad = true;
                return ck_err_set(&ld->err, -EBADMSG, "data file of rank %u: block %llu does "
                                  "not match its SHA-256 in the manifest", rank,
                                  (unsigned long long)b);
            }
        }
    return 0;
}

/* One timed load: open, every shard of every tensor, (verify), close. Returns 0, 1
 * (wrong data) or 2. */
static int core_load(const bench_opts *o, const bench_layout *L, const char *dir, uint8_t *buf,
                     bench_hasher *h, double *secs)
{
    load ld = { .o = o, .L = L, .buf = buf, .h = h };
    ld.file_of = calloc(L->ranks, sizeof *ld.file_of);
    ld.queued = calloc(L->ranks, sizeof *ld.queued);
    double t0 = bench_now();
    int r = ck_open(dir, CKPT, &ld.ck, &ld.err);
    if (r == 0 && h) {
        ld.block = ck_get_info(ld.ck)->block_size;
        ld.blocks_per_file = (file_bytes(L) + ld.block - 1) / ld.block;
        ld.digests = malloc(L->ranks * ld.blocks_per_file * CK_HASH_LEN);
        if (!ld.digests)
            r = -ENOMEM;
    }
    if (r == 0 && (!ld.file_of || !ld.queued))
        r = -ENOMEM;
    if (r == 0)
        r = ck_tensors_each(ld.ck, load_tensor, &ld, &ld.err);
    if (h)
        bench_hasher_wait(h);   /* before anything is freed, even after an error */
    if (r == 0 && h)
        r = compare_hashes(&ld);
    ck_close(ld.ck);
    *secs = bench_now() - t0;
    free(ld.digests);
    free(ld.queued);
    free(ld.file_of);
    if (r < 0)
        tool_error(prog, "loading %s/%s: %s", dir, CKPT, ck_err_msg(&ld.err));
    if (ld.bad || r == -EBADMSG)
        return EXIT_BAD;
    if (r < 0)
        return EXIT_USAGE;
    return bench_check_all(o, L, buf) ? EXIT_OK : EXIT_BAD;
}

static int evict(const char *path)
{
    int r = bench_evict(path);
    if (r < 0)
        tool_error(prog, "%s: evicting from the page cache: %s", path, strerror(-r));
    return r;
}

static int run(const bench_opts *o, const bench_layout *L, const char *dir, const char *raw,
               const char *ckpt, uint8_t *buf, bench_hasher *h, unsigned k, double *secs[F_N])
{
    bool direct;
    if (evict(raw) < 0 || bench_raw_read(o, raw, buf, L->total, &secs[F_RAW][k], &direct) < 0)
        return EXIT_USAGE;
    if (!direct)
        tool_error(prog, "the file system refused O_DIRECT: the raw reference is buffered");
    /* The raw file holds the same bytes: without this a load that read nothing
     * would pass the check. */
    memset(buf, POISON, L->total);
    if (evict(ckpt) < 0)
        return EXIT_USAGE;
    int rc = core_load(o, L, dir, buf, NULL, &secs[F_PLAIN][k]);
    if (rc == EXIT_OK && bench_sha(o, h, buf, L->total, &secs[F_SHA][k]) < 0)
        rc = EXIT_USAGE;
    memset(buf, POISON, L->total);
    if (rc == EXIT_OK && evict(ckpt) < 0)
        rc = EXIT_USAGE;
    if (rc == EXIT_OK)
        rc = core_load(o, L, dir, buf, h, &secs[F_HASHED][k]);
    memset(buf, POISON, L->total);
    if (rc == EXIT_OK)
        fprintf(stderr, "%s: run %u/%u: raw %.3f, load %.3f, SHA-256 %.3f, verified load %.3f "
                "GB/s\n", prog, k + 1, o->repeat, (double)L->total / secs[F_RAW][k] / 1e9,
                (double)L->total / secs[F_PLAIN][k] / 1e9, (double)L->total / secs[F_SHA][k] / 1e9,
                (double)L->total / secs[F_HASHED][k] / 1e9);
    return rc;
}

/* The checkpoint and the raw file, both holding the pattern. */
static int setup(const bench_opts *o, const bench_layout *L, const char *dir, const char *raw,
                 uint8_t *buf)
{
    bench_fill_all(L, buf);
    ck_save_stats st;
    double secs;
    bool direct;
    if (bench_save(o, L, dir, CKPT, buf, true, &st) < 0 ||
        bench_raw_write(o, raw, buf, L->total, &secs, &direct) < 0)
        return EXIT_USAGE;
    memset(buf, POISON, L->total);
    return EXIT_OK;
}

int main(int argc, char **argv)
{
    bench_opts o;
    int rc = bench_parse(argc, argv, prog,
        "Saves SIZE bytes of f32 shards through the core and writes the same bytes raw to\n"
        "one file (untimed); then loads the checkpoint through the core (ck_open,\n"
        "ck_tensors_each, ck_shards_get, ck_shard_read into one 4 KiB-aligned buffer) and\n"
        "reads the raw file the way fio would: O_DIRECT, io_uring, 1 MiB reads, 32 in\n"
        "flight. The page cache is emptied of both before each timed read. Repeats with\n"
        "verification on: every data block hashed on the core's hash pool and compared\n"
        "with the manifest, beside the pool's in-memory SHA-256 throughput over the same\n"
        "bytes. Every load's bytes are checked against what was saved, outside the timing.\n",
        &o);
    if (rc >= 0)
        return rc;
    bench_layout L;
    uint8_t *buf;
    double *secs[F_N];
    if (bench_prepare(&o, &L, &buf, secs, F_N) < 0)
        return EXIT_USAGE;

    double loadavg = bench_loadavg();
    char dir[PATH_MAX], raw[PATH_MAX + 16], ckpt[PATH_MAX + 16];
    const char *fstype;
    if (bench_workdir(&o, dir, &fstype) < 0)
        return EXIT_USAGE;
    snprintf(raw, sizeof raw, "%s/raw.dat", dir);
    snprintf(ckpt, sizeof ckpt, "%s/%s", dir, CKPT);
    bench_hasher *h = NULL;
    rc = bench_hasher_new(&o, &h) < 0 ? EXIT_USAGE : setup(&o, &L, dir, raw, buf);
    for (unsigned k = 0; rc == EXIT_OK && k < o.repeat; k++)
        rc = run(&o, &L, dir, raw, ckpt, buf, h, k, secs);
    bench_remove(dir);
    if (rc == EXIT_OK) {
        char sha_note[96];
        snprintf(sha_note, sizeof sha_note, "ck__hashpool, %u threads, 4 MiB blocks, in memory",
                 bench_hasher_threads(h));
        const bench_fig figs[F_N] = {
            [F_RAW] = { "raw_read", "raw read", "O_DIRECT, io_uring, 1 MiB x QD 32",
                        { -1, -1 }, 0, secs[F_RAW] },
            [F_PLAIN] = { "load", "core load, no hash", NULL, { F_RAW, -1 }, BENCH_TARGET,
                          secs[F_PLAIN] },
            [F_SHA] = { "sha256", "SHA-256", sha_note, { -1, -1 }, 0, secs[F_SHA] },
            [F_HASHED] = { "load_verified", "core load, SHA-256", NULL, { F_RAW, F_SHA },
                           BENCH_TARGET, secs[F_HASHED] },
        };
        bench_info in = { .L = &L, .dir = dir, .fstype = fstype, .loadavg = loadavg,
                          .hash_threads = bench_hasher_threads(h) };
        bench_report(&o, &in, figs, F_N);
    }
    bench_hasher_free(h);
    free(secs[0]);
    free(buf);
    return rc;
}
