/* save-bw - save throughput of the core beside a raw sequential write of the same
 * bytes on the same file system, and with hashing beside in-memory SHA-256.
 *
 * Each run does, in this order so that drift of a virtual disk hits both sides:
 * the raw write, a save without hashes, SHA-256 of the shards in memory, a hashed
 * save. Every output is removed (and the file system synced) before the next step.
 * The shards are in memory and filled before any timing: what a training job hands
 * to a save.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "tool.h"

static const char *prog = "save-bw";

enum { F_RAW, F_PLAIN, F_PLAIN_DATA, F_SHA, F_HASHED, F_HASHED_DATA, F_N };

static int one_save(const bench_opts *o, const bench_layout *L, const char *dir,
                    const uint8_t *buf, const char *kind, unsigned run, bool hash,
                    double *total, double *data)
{
    char name[64], path[PATH_MAX + 64];
    snprintf(name, sizeof name, "%s-%u", kind, run);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ck_save_stats st;
    int r = bench_save(o, L, dir, name, buf, hash, &st);
    if (r == 0 && !st.direct)
        tool_error(prog, "the core wrote through the page cache (no O_DIRECT)");
    *total = st.total_seconds;
    *data = st.write_seconds;
    bench_remove(path);
    return r;
}

static int run(const bench_opts *o, const bench_layout *L, const char *dir, const uint8_t *buf,
               bench_hasher *h, unsigned k, double *secs[F_N])
{
    char raw[PATH_MAX + 16];
    snprintf(raw, sizeof raw, "%s/raw.dat", dir);
    bool direct;
    int r = bench_raw_write(o, raw, buf, L->total, &secs[F_RAW][k], &direct);
    bench_remove(raw);
    if (r == 0 && !direct)
        tool_error(prog, "the file system refused O_DIRECT: the raw reference is buffered");
    if (r == 0)
        r = one_save(o, L, dir, buf, "plain", k, false, &secs[F_PLAIN][k], &secs[F_PLAIN_DATA][k]);
    if (r == 0)
        r = bench_sha(o, h, buf, L->total, &secs[F_SHA][k]);
    if (r == 0)
        r = one_save(o, L, dir, buf, "hashed", k, true, &secs[F_HASHED][k],
                     &secs[F_HASHED_DATA][k]);
    if (r == 0)
        fprintf(stderr, "%s: run %u/%u: raw %.3f, save %.3f, SHA-256 %.3f, hashed save %.3f "
                "GB/s\n", prog, k + 1, o->repeat, (double)L->total / secs[F_RAW][k] / 1e9,
                (double)L->total / secs[F_PLAIN][k] / 1e9, (double)L->total / secs[F_SHA][k] / 1e9,
                (double)L->total / secs[F_HASHED][k] / 1e9);
    return r;
}

int main(int argc, char **argv)
{
    bench_opts o;
    int rc = bench_parse(argc, argv, prog,
        "Saves SIZE bytes of f32 shards through the core (ck_save_*), from memory, and in\n"
        "the same run writes the same bytes raw to one file on the same file system:\n"
        "preallocated, O_DIRECT, io_uring, 1 MiB writes, 32 in flight, fsync (what fio\n"
        "measures). Repeats with SHA-256 on, beside the hash pool's in-memory throughput\n"
        "over the same bytes. The core's figure is its whole commit (data, manifest,\n"
        "rename, fsyncs); the data path alone is shown beside it.\n", &o);
    if (rc >= 0)
        return rc;
    bench_layout L;
    uint8_t *buf;
    double *secs[F_N];
    if (bench_prepare(&o, &L, &buf, secs, F_N) < 0)
        return EXIT_USAGE;
    bench_fill_all(&L, buf);

    double loadavg = bench_loadavg();
    char dir[PATH_MAX];
    const char *fstype;
    bench_hasher *h = NULL;
    if (bench_workdir(&o, dir, &fstype) < 0)
        return EXIT_USAGE;
    int r = bench_hasher_new(&o, &h);
    for (unsigned k = 0; r == 0 && k < o.repeat; k++)
        r = run(&o, &L, dir, buf, h, k, secs);
    bench_remove(dir);
    if (r == 0) {
        char sha_note[96];
        snprintf(sha_note, sizeof sha_note, "ck__hashpool, %u threads, 4 MiB blocks, in memory",
                 bench_hasher_threads(h));
        const bench_fig figs[F_N] = {
            [F_RAW] = { "raw_write", "raw write", "fallocate, O_DIRECT, io_uring, 1 MiB x QD 32, "
                        "fsync", { -1, -1 }, 0, secs[F_RAW] },
            [F_PLAIN] = { "save", "core save, no hash", NULL, { F_RAW, -1 }, BENCH_TARGET,
                          secs[F_PLAIN] },
            [F_PLAIN_DATA] = { "save_data_path", "  data path only", "write_seconds",
                               { F_RAW, -1 }, 0, secs[F_PLAIN_DATA] },
            [F_SHA] = { "sha256", "SHA-256", sha_note, { -1, -1 }, 0, secs[F_SHA] },
            [F_HASHED] = { "save_hashed", "core save, SHA-256", NULL, { F_RAW, F_SHA },
                           BENCH_TARGET, secs[F_HASHED] },
            [F_HASHED_DATA] = { "save_hashed_data_path", "  data path only", "write_seconds",
                                { F_RAW, F_SHA }, 0, secs[F_HASHED_DATA] },
        };
        bench_info in = { .L = &L, .dir = dir, .fstype = fstype, .loadavg = loadavg,
                          .hash_threads = bench_hasher_threads(h) };
        bench_report(&o, &in, figs, F_N);
    }
    bench_hasher_free(h);
    free(secs[0]);
    free(buf);
    return r == 0 ? EXIT_OK : EXIT_USAGE;
}
