/* rsbench.h - what bench/reshard and bench/consolidate share: the synthetic source
 * checkpoint, the raw read+write reference over the same bytes, and timing a phase
 * in a child process so that its peak RSS is its own. */
#ifndef CK_RSBENCH_H
#define CK_RSBENCH_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct rsb {
    const char *prog;
    uint64_t size;             /* bytes of tensors */
    char dir[PATH_MAX];        /* work directory, removed at the end */
    bool keep;
} rsb;

typedef struct rsb_fig {
    double secs;
    uint64_t peak_rss;         /* bytes */
} rsb_fig;

/* Parses "PROG [SIZE] [--dir DIR]" and makes the work directory. Returns -1 to go on,
 * or the exit status. */
int rsb_init(rsb *b, int argc, char **argv, const char *what);
/* Writes checkpoint "src" on mesh 8, S(0): one tensor of 3/8 of the size (>= 1 GiB
 * at 4 GiB) and five sharing the rest, 4 KiB rows, hashed. */
int rsb_make_source(rsb *b);
/* Raw reference: reads every data file of ROOT/src and writes the same bytes to one
 * preallocated file, O_DIRECT, through one io_uring, 1 MiB I/Os with 32 buffers in
 * flight (each written as soon as it is read), then fsyncs it; timed in a child. */
int rsb_raw_copy(rsb *b, rsb_fig *f);
/* Runs fn(b, arg) in a child; its wall time and peak RSS. */
int rsb_child(rsb *b, int (*fn)(rsb *b, void *arg), void *arg, rsb_fig *f);
void rsb_remove(const char *path);
void rsb_done(rsb *b);
/* "label: 1.234 s, 3.21 GB/s, peak RSS 45 MiB" */
void rsb_print(const rsb *b, const char *label, uint64_t bytes, const rsb_fig *f);

#endif
