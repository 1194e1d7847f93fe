/* load-bw - load throughput of the core beside a raw sequential read of the same
 * bytes on the same file system, verified (the default) beside unverified, and
 * in-memory SHA-256 as the hashing's own ceiling.
 *
 * Setup (untimed): the shards are filled with a pattern, saved through the core with
 * hashes, and written raw to one file. Each run then does, every file evicted from the
 * page cache first: the raw read; a load with verification off (ck_load_verify); SHA-256
 * of the loaded bytes in memory; a load as every loader does it, each block hashed on
 * the core's pool while the next reads run and compared with the manifest. The
 * destination is one buffer of SIZE bytes, faulted in beforehand, as a model's tensors
 * are when a checkpoint is loaded into them. After each load, outside the timing, every
 * byte is checked against the pattern and the buffer is poisoned, so that a load which
 * leaves stale or wrong bytes fails the bench (exit 1).
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
    const bench_layout *L;
    uint8_t *buf;
    ck_ckpt *ck;
    ck_load_item *items;       /* every shard's box, into its place in buf */
    char (*names)[CK_NAME_MAX];
    size_t n;
    bool bad;                  /* the checkpoint is not what was saved */
    ck_err err;
} load;

static int mismatch(load *ld, const char *fmt, const char *tensor, uint32_t idx)
{
    ld->bad = true;
    return ck_err_set(&ld->err, -EBADMSG, fmt, tensor, idx);
}

/* Lists the boxes of t's saved shards as items of the batch. */
static int list_tensor(const ck_tensor *t, void *arg)
{
    load *ld = arg;
    const bench_layout *L = ld->L;
    if (t->id >= L->tensors || t->n_shards != L->ranks)
        return mismatch(ld, "tensor %s: not the saved tensor (%u shards)", t->name, t->n_shards);
    ck_shard *sh = NULL;
    uint32_t n = 0;
    int r = ck_shards_get(ld->ck, t, &sh, &n, &ld->err);
    snprintf(ld->names[t->id], CK_NAME_MAX, "%s", t->name);
    for (uint32_t i = 0; r == 0 && i < n; i++) {
        unsigned rank = sh[i].coord[0];
        if (rank >= L->ranks || ck_box_numel(&sh[i].box) * 4 != L->shard) {
            r = mismatch(ld, "tensor %s: shard %u is not what the bench saved", t->name,
                         sh[i].idx);
            break;
        }
        ld->items[ld->n++] = (ck_load_item){ .tensor = ld->names[t->id], .box = sh[i].box,
                                             .dst = ld->buf + bench_shard_off(L, t->id, rank),
                                             .len = L->shard };
    }
    free(sh);
    return r;
}

/* One timed load: open, every shard of every tensor as one batch (ck_load_many, as
 * the PyTorch reader loads), close. Returns 0, 1 (wrong data or a block that does not
 * match) or 2. */
static int core_load(const bench_opts *o, const bench_layout *L, const char *dir, uint8_t *buf,
                     bool verify, double *secs)
{
    load ld = { .L = L, .buf = buf };
    ld.items = calloc((size_t)L->tensors * L->ranks, sizeof *ld.items);
    ld.names = calloc(L->tensors, sizeof *ld.names);
    double t0 = bench_now();
    int r = ld.items && ld.names ? ck_open(dir, CKPT, &ld.ck, &ld.err) : -ENOMEM;
    if (r == 0) {
        ck_load_verify(ld.ck, verify);
        r = ck_tensors_each(ld.ck, list_tensor, &ld, &ld.err);
    }
    if (r == 0)
        r = ck_load_many(ld.ck, ld.items, ld.n, &ld.err);
    ck_close(ld.ck);
    *secs = bench_now() - t0;
    free(ld.items);
    free(ld.names);
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
    int rc = core_load(o, L, dir, buf, false, &secs[F_PLAIN][k]);
    if (rc == EXIT_OK && bench_sha(o, h, buf, L->total, &secs[F_SHA][k]) < 0)
        rc = EXIT_USAGE;
    memset(buf, POISON, L->total);
    if (rc == EXIT_OK && evict(ckpt) < 0)
        rc = EXIT_USAGE;
    if (rc == EXIT_OK)
        rc = core_load(o, L, dir, buf, true, &secs[F_HASHED][k]);
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
        "ck_tensors_each, ck_shards_get, then every shard's box into its place in one 4 KiB-\n"
        "aligned buffer as one ck_load_many batch) and\n"
        "reads the raw file the way fio would: O_DIRECT, io_uring, 1 MiB reads, 32 in\n"
        "flight. The page cache is emptied of both before each timed read. The load runs\n"
        "with verification off (ck_load_verify) and as every loader runs it, each block\n"
        "hashed on the core's pool and compared with the manifest, beside the pool's\n"
        "in-memory SHA-256 throughput over the same bytes. Every load's bytes are checked\n"
        "against what was saved, outside the timing.\n",
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
            [F_PLAIN] = { "load", "core load, unverified", NULL, { F_RAW, -1 }, BENCH_TARGET,
                          secs[F_PLAIN] },
            [F_SHA] = { "sha256", "SHA-256", sha_note, { -1, -1 }, 0, secs[F_SHA] },
            /* >= 0.9 of the slower of the unverified load and the hashing alone: at
             * most 1.11x the unverified load's time wherever SHA-256 keeps up with the
             * device, as on a quiet machine. */
            [F_HASHED] = { "load_verified", "core load, verified", NULL, { F_PLAIN, F_SHA },
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
