/* bench.h - what save-bw and load-bw share: options, the shard layout, the byte
 * pattern, the raw-I/O and SHA-256 references, and the report.
 *
 * Each bench measures the core against what the machine can do on the same bytes in
 * the same run: a raw sequential transfer done the way fio would (preallocated file,
 * O_DIRECT, io_uring, 1 MiB I/Os, 32 in flight) and, for hashed runs, SHA-256 on
 * the core's own hash pool over the same bytes in memory. A ratio against a reference
 * measured minutes earlier on another day would say little on a virtual disk whose
 * speed drifts.
 */
#ifndef CK_BENCH_H
#define CK_BENCH_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "io/hash.h"
#include "ck/save.h"
#include "ck/types.h"

#define BENCH_IO_SIZE   (1u << 20)
#define BENCH_QD        32u
#define BENCH_HASH_BLOCK (4u << 20)
#define BENCH_TARGET    0.9

typedef struct bench_opts {
    const char *prog;
    uint64_t size;
    const char *dir;          /* parent of the work directory; NULL: /var/tmp */
    unsigned repeat;
    unsigned ranks;
    bool json;
} bench_opts;

/* Parses the command line shared by both benches. Returns -1 to go on, or the exit
 * status to leave with (0 after --help, 2 on a usage error). */
int bench_parse(int argc, char **argv, const char *prog, const char *what, bench_opts *o);

/* The tensors: f32, 2-D, 4 KiB rows, sharded S(0) over a 1-D mesh of `ranks`. Every
 * shard has the same size, a multiple of the 4 MiB hash block when the size allows,
 * so that the writer can send each block straight from the caller's memory. */
typedef struct bench_layout {
    unsigned ranks, tensors;
    uint64_t shard;           /* bytes of every shard */
    uint64_t rows, cols;      /* shape of every tensor */
    uint64_t total;           /* bytes of all shards: SIZE rounded down to fit */
} bench_layout;

int bench_layout_make(const bench_opts *o, bench_layout *L);
/* Byte offset of shard (tensor, rank) in the bench's buffer. The buffer is rank-major,
 * laid out as the data files are (rank r's file holds its shards in tensor order),
 * so a raw transfer of the buffer moves exactly the bytes of the checkpoint's files
 * and a file's hash blocks lie contiguously in memory. */
uint64_t bench_shard_off(const bench_layout *L, unsigned tensor, unsigned rank);
/* Memory for the layout's bytes, 4 KiB-aligned and touched, so that page faults
 * stay out of the timings. NULL after reporting. */
void *bench_alloc(const bench_opts *o, uint64_t len);

/* What both save-bw and load-bw start from: the layout, one buffer of the whole size,
 * and nfig arrays of o->repeat timings (secs[f][k]; secs[0] owns them all). */
int bench_prepare(const bench_opts *o, bench_layout *L, uint8_t **buf, double **secs,
                  unsigned nfig);

/* A cheap pattern that differs per shard and per word, so that a shard read from the
 * wrong place, a stale buffer or zeros cannot pass the check. */
void bench_fill(void *buf, uint64_t len, unsigned tensor, unsigned rank);
/* Offset of the first byte that differs from the pattern, or UINT64_MAX. */
uint64_t bench_check(const void *buf, uint64_t len, unsigned tensor, unsigned rank);
/* Fills every shard of buf; checks every shard, reporting the first bad one. */
void bench_fill_all(const bench_layout *L, uint8_t *buf);
bool bench_check_all(const bench_opts *o, const bench_layout *L, const uint8_t *buf);

/* Saves buf's shards through the core as checkpoint dir/name: every rank offers its
 * shard of every tensor from memory, as the ranks of a job would. */
int bench_save(const bench_opts *o, const bench_layout *L, const char *dir, const char *name,
               const uint8_t *buf, bool hash, ck_save_stats *st);

/* A fresh work directory under o->dir (default /var/tmp), refusing tmpfs unless
 * asked for by --dir: tmpfs measures memory, not the disk. fstype names the file
 * system. Returns 0 or -errno after reporting. */
int bench_workdir(const bench_opts *o, char dir[PATH_MAX], const char **fstype);
/* Removes a tree, then syncs the file system so that the freeing of its blocks is
 * not charged to whatever runs next. */
void bench_remove(const char *path);
/* Writes back and drops every regular file under path from the page cache, so a
 * timed read comes from the device. */
int bench_evict(const char *path);

/* The raw references, timed from create (open) to fsync (the last completion):
 * len bytes of buf to/from path, sequentially, O_DIRECT unless the file system
 * refuses it (*direct says), through io_uring with BENCH_QD I/Os of BENCH_IO_SIZE
 * in flight. The write preallocates the file with fallocate first. */
int bench_raw_write(const bench_opts *o, const char *path, const void *buf, uint64_t len,
                    double *secs, bool *direct);
int bench_raw_read(const bench_opts *o, const char *path, void *buf, uint64_t len,
                   double *secs, bool *direct);

/* Counts jobs queued on a ck__hashpool so that a caller can wait for all of them. */
typedef struct bench_hasher bench_hasher;
int bench_hasher_new(const bench_opts *o, bench_hasher **out);
void bench_hasher_free(bench_hasher *h);
unsigned bench_hasher_threads(const bench_hasher *h);
int bench_hasher_submit(bench_hasher *h, const void *buf, size_t len, uint8_t *out);
void bench_hasher_wait(bench_hasher *h);

/* In-memory SHA-256 throughput of the hash pool, all CPUs, BENCH_HASH_BLOCK jobs:
 * seconds to hash buf[0, len). */
int bench_sha(const bench_opts *o, bench_hasher *h, const void *buf, uint64_t len,
              double *secs);

double bench_now(void);
/* The 1-minute load average: how busy the other tenants of the machine are. */
double bench_loadavg(void);

/* One figure: seconds per run; reported as GB/s of the best run, beside the
 * slower of its references (indices into the same array; -1: none) and the ratio. */
typedef struct bench_fig {
    const char *key;          /* JSON name */
    const char *label;        /* text */
    const char *note;         /* how it was measured, or NULL */
    int ref[2];
    double target;            /* minimum ratio; 0: reported only */
    double *secs;
} bench_fig;

typedef struct bench_info {
    const bench_layout *L;
    const char *dir, *fstype;
    unsigned hash_threads;
    double loadavg;           /* 1-minute load average at the start: other tenants */
} bench_info;

/* Prints the figures (text or JSON) and a summary. Returns whether every target
 * was met. */
bool bench_report(const bench_opts *o, const bench_info *in, const bench_fig *figs,
                  unsigned n);

#endif
