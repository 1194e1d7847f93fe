/* rsbench.c - helpers of bench/reshard and bench/consolidate (see rsbench.h). */
#include "rsbench.h"

#include <fcntl.h>
#include <liburing.h>
#include <stdbool.h>
#include <ftw.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ck/save.h"
#include "ck/synth.h"
#include "tool.h"


int rsb_init(rsb *b, int argc, char **argv, const char *what)
{
    static const struct option lo[] = {
        { "dir", 1, 0, 'd' }, { "keep", 0, 0, 'k' }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 },
    };
    const char *base = "/var/tmp";
    b->size = 4ull << 30;
    int c;
    ck_err err = { 0 };
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'd': base = optarg; break;
        case 'k': b->keep = true; break;
        case 'h':
            printf("usage: %s [SIZE] [--dir DIR] [--keep]\n\n%s\nSIZE defaults to 4GiB; the "
                   "work directory goes under DIR (default /var/tmp) and is removed.\n",
                   b->prog, what);
            return EXIT_OK;
        default: return EXIT_USAGE;
        }
    }
    if (optind < argc && ck_size_parse(argv[optind], &b->size, &err) < 0) {
        tool_error(b->prog, "SIZE: %s", ck_err_msg(&err));
        return EXIT_USAGE;
    }
    snprintf(b->dir, sizeof b->dir, "%s/%s-XXXXXX", base, b->prog);
    if (!mkdtemp(b->dir)) {
        tool_error(b->prog, "mkdtemp %s: %s", b->dir, strerror(errno));
        return EXIT_USAGE;
    }
    return -1;
}

int rsb_make_source(rsb *b)
{
    enum { NT = 6, RANKS = 8 };
    ck_mesh mesh;
    ck_placement pl[1];
    ck_err err = { 0 };
    ck_mesh_parse("8", NULL, &mesh, NULL);
    ck_placements_default(1, pl);
    static ck_synth_src src[NT][RANKS];
    ck_save *s = NULL;
    ck_decl *d;
    const uint64_t cols = 1024, row = cols * 4;
    uint64_t shapes[NT][2];
    char tn[8];
    int r = ck_decl_new(&d, &mesh, &err);
    for (uint32_t t = 0; t < NT && r == 0; t++) {
        uint64_t bytes = t == 0 ? b->size / 8 * 3 : b->size / 8;
        shapes[t][0] = bytes / row / RANKS * RANKS;
        shapes[t][1] = cols;
        snprintf(tn, sizeof tn, "t%u", t);
        r = ck_decl_tensor(d, tn, CK_F32, 2, shapes[t], pl, &err);
    }
    if (r == 0)
        r = ck_save_begin(&s, b->dir, "src", 1, d, &(ck_save_opts){ .mem_limit = 64u << 20 },
                          &err);
    ck_decl_free(d);
    for (uint32_t t = 0; t < NT && r == 0; t++) {
        const uint64_t *shape = shapes[t];
        snprintf(tn, sizeof tn, "t%u", t);
        for (uint32_t k = 0; k < RANKS && r == 0; k++) {
            uint32_t coord[1] = { k };
            src[t][k] = (ck_synth_src){ .tensor = t, .itemsize = 4, .ndim = 2,
                                        .shape = { shape[0], shape[1] } };
            ck_shard_box(2, shape, &mesh, pl, coord, &src[t][k].box);
            r = ck_save_shard_fill(s, tn, k, ck_synth_fill, &src[t][k], &err);
        }
    }
    if (r == 0)
        return ck_save_commit(s, NULL, &err) < 0 ? (tool_error(b->prog, "%s", ck_err_msg(&err)), -1) : 0;
    tool_error(b->prog, "%s", ck_err_msg(&err));
    ck_save_abort(s);
    return -1;
}

/* The reference: the same bytes copied the best way the device allows, as fio would:
 * O_DIRECT reads and writes of 1 MiB through one io_uring, 32 buffers in flight, each
 * written as soon as it is read, into a preallocated file, then fsync. */
enum { RAW_IO = 1u << 20, RAW_DEPTH = 32 };

typedef struct raw_buf {
    void *p;
    int src;            /* index into the source files */
    uint64_t off, dst;  /* source and destination offsets */
    uint32_t len;
    bool writing;
} raw_buf;

static int raw_copy(rsb *b, void *arg)
{
    (void)arg;
    char out[PATH_MAX + 16], in[PATH_MAX + 32];
    int fds[8], nf = 0;
    uint64_t sizes[8], total = 0;
    for (int k = 0; k < 8; k++) {
        struct stat sb;
        snprintf(in, sizeof in, "%s/src/rank-%05d.dat", b->dir, k);
        if (stat(in, &sb) < 0 || (fds[nf] = open(in, O_RDONLY | O_DIRECT)) < 0)
            continue;
        sizes[nf++] = (uint64_t)sb.st_size;
        total += (uint64_t)sb.st_size;
    }
    snprintf(out, sizeof out, "%s/raw.dat", b->dir);
    int wfd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_DIRECT, 0644);
    struct io_uring ring;
    if (wfd < 0 || fallocate(wfd, 0, 0, (off_t)total) < 0 ||
        io_uring_queue_init(2 * RAW_DEPTH, &ring, 0) < 0)
        return -1;
    raw_buf bufs[RAW_DEPTH];
    int r = 0, f = 0, inflight = 0;
    uint64_t pos = 0, dst = 0;
    for (int i = 0; i < RAW_DEPTH; i++)
        if (posix_memalign(&bufs[i].p, 4096, RAW_IO))
            return -1;
    /* Fill the queue: a read into every buffer, in source order. */
    for (int i = 0; i < RAW_DEPTH; i++) {
        while (f < nf && pos >= sizes[f])
            f++, pos = 0;
        if (f == nf)
            break;
        uint32_t len = sizes[f] - pos < RAW_IO ? (uint32_t)(sizes[f] - pos) : RAW_IO;
        bufs[i] = (raw_buf){ .p = bufs[i].p, .src = f, .off = pos, .dst = dst, .len = len };
        struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
        io_uring_prep_read(sqe, fds[f], bufs[i].p, len, pos);
        io_uring_sqe_set_data64(sqe, (uint64_t)i);
        pos += len;
        dst += len;
        inflight++;
    }
    io_uring_submit(&ring);
    while (inflight > 0 && r == 0) {
        struct io_uring_cqe *cqe;
        if (io_uring_wait_cqe(&ring, &cqe) < 0)
            return -1;
        int i = (int)io_uring_cqe_get_data64(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(&ring, cqe);
        raw_buf *x = &bufs[i];
        if (res != (int)x->len) {
            r = -1;
            break;
        }
        struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
        if (!x->writing) {          /* read landed: write it */
            io_uring_prep_write(sqe, wfd, x->p, x->len, x->dst);
            x->writing = true;
        } else {                    /* write landed: read the next piece into it */
            while (f < nf && pos >= sizes[f])
                f++, pos = 0;
            if (f == nf) {
                inflight--;
                continue;
            }
            uint32_t len = sizes[f] - pos < RAW_IO ? (uint32_t)(sizes[f] - pos) : RAW_IO;
            *x = (raw_buf){ .p = x->p, .src = f, .off = pos, .dst = dst, .len = len };
            io_uring_prep_read(sqe, fds[f], x->p, len, pos);
            pos += len;
            dst += len;
        }
        io_uring_sqe_set_data64(sqe, (uint64_t)i);
        io_uring_submit(&ring);
    }
    if (r == 0)
        r = fsync(wfd);
    io_uring_queue_exit(&ring);
    for (int i = 0; i < RAW_DEPTH; i++)
        free(bufs[i].p);
    for (int k = 0; k < nf; k++)
        close(fds[k]);
    close(wfd);
    unlink(out);
    return r;
}

int rsb_raw_copy(rsb *b, rsb_fig *f)
{
    return rsb_child(b, raw_copy, NULL, f);
}

int rsb_child(rsb *b, int (*fn)(rsb *b, void *arg), void *arg, rsb_fig *f)
{
    sync();
    double t0 = tool_now();
    pid_t pid = fork();
    if (pid == 0)
        _exit(fn(b, arg) == 0 ? 0 : 1);
    int status;
    struct rusage ru;
    if (pid < 0 || wait4(pid, &status, 0, &ru) != pid)
        return -1;
    f->secs = tool_now() - t0;
    f->peak_rss = (uint64_t)ru.ru_maxrss * 1024;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    remove(path);
    return 0;
}

void rsb_remove(const char *path)
{
    nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    sync();
}

void rsb_done(rsb *b)
{
    if (!b->keep)
        rsb_remove(b->dir);
}

void rsb_print(const rsb *b, const char *label, uint64_t bytes, const rsb_fig *f)
{
    printf("%s: %-34s %8.3f s  %6.2f GB/s  peak RSS %5llu MiB\n", b->prog, label, f->secs,
           f->secs > 0 ? (double)bytes / f->secs / 1e9 : 0.0,
           (unsigned long long)(f->peak_rss >> 20));
}
