/* nodes-commit - what the commit of a save served by several daemons costs, for 8, 64
 * and 1024 simulated parts (one rank each, every rank another daemon's: the most part
 * files a save of that world can have).
 *
 * The members' side is done first, untimed but for one figure: each rank's 4 KiB data
 * file is written and made durable, and its part record goes into the meeting as a
 * durable part file (fsync of the file and of the directory: the cost each member
 * pays once per save, in parallel across nodes; its mean is shown). Then the
 * coordinator's side is timed: reading, checking and adopting every part file (what
 * its polling rounds do) and the commit itself (manifest with every file's hashes,
 * fsyncs, the rename, the catalog). Beside it, the commit of the same world written
 * by one process (no part files: what one daemon's commit costs), and one 4 KiB write
 * + fdatasync on the same file system in the same run, the smallest durable write.
 */
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "save/meet.h"
#include "save/save_int.h"
#include "tool.h"

static const char *prog = "nodes-commit";

typedef struct adopt_arg {
    ck_save *s;
    ck_err *err;
} adopt_arg;

static int adopt_one(void *arg, const void *rec, size_t len, const ck__meet_blob *blob)
{
    adopt_arg *a = arg;
    return blob ? 0 : ck__save_adopt(a->s, rec, len, a->err);
}

static int adopt_file(void *arg, const char *file, const uint8_t *buf, size_t len)
{
    adopt_arg *a = arg;
    (void)file;
    return ck__meet_parts_decode(buf, len, adopt_one, a, a->err);
}

static int begin(const char *root, const char *name, uint64_t world, ck_save **s, ck_err *err)
{
    ck_mesh mesh = { .ndim = 1, .size = { (uint32_t)world } };
    ck_placement pl[1] = { { .kind = CK_SHARD, .dim = 0 } };
    uint64_t shape[1] = { world * 1024 };
    ck_save_opts o = { .hash_threads = 1 };
    ck_decl *d;
    int r = ck_decl_new(&d, &mesh, err);
    if (r == 0 && (r = ck_decl_tensor(d, "w", CK_F32, 1, shape, pl, err)) == 0)
        r = ck_save_begin(s, root, name, 1, d, &o, err);
    ck_decl_free(d);
    return r;
}

/* One save of world parts; the seconds of each phase. */
static int one(const char *root, uint64_t world, double *member_put, double *adopt,
               double *commit, ck_err *err)
{
    char name[32], token[CK_TOKEN_MAX], meet[PATH_MAX];
    snprintf(name, sizeof name, "parts-%llu", (unsigned long long)world);
    uint8_t *data = aligned_alloc(4096, 4096);
    if (!data)
        return ck_err_set(err, -ENOMEM, "out of memory");
    memset(data, 7, 4096);
    ck_save *s, *m;
    int r = begin(root, name, world, &s, err);
    if (r < 0) {
        free(data);
        return r;
    }
    ck__meet_plan plan = { .step = 1, .world = world, .nodes = (uint32_t)world,
                           .coord = "bench" };
    if ((r = ck__save_share(s, token, err)) == 0 &&
        (r = ck__meet_create(root, name, token, &plan, err)) == 0)
        ck__meet_dir(root, name, token, meet);
    if (r == 0 && (r = ck_save_shard(s, "w", 0, data, err)) == 0)
        r = ck__save_write_rank(s, 0, err);
    /* The members: one ck_save stands for all of them (the plan is the same). */
    if (r == 0 && (r = begin(root, name, world, &m, err)) == 0) {
        r = ck__save_join(m, token, 1, err);
        double put = 0;
        for (uint64_t k = 1; r == 0 && k < world; k++) {
            ck_err ok = { 0 };
            void *rec = NULL;
            size_t len;
            uint8_t *file = NULL;
            size_t flen;
            char fname[64];
            if ((r = ck_save_shard(m, "w", k, data, err)) == 0 &&
                (r = ck__save_write_rank(m, k, err)) == 0 &&
                (r = ck__save_part(m, k, &ok, &rec, &len, err)) == 0 &&
                (r = ck__meet_parts_encode(&rec, &len, 1, NULL, 0, &file, &flen)) == 0) {
                char id[32];
                snprintf(id, sizeof id, "n%llu", (unsigned long long)k);
                ck__name_meet_file(CK_MEET_PART, id, 0, fname, sizeof fname);
                double t0 = tool_now();
                r = ck__meet_put(root, meet, fname, file, flen, true, err);
                put += tool_now() - t0;
            }
            free(rec);
            free(file);
        }
        ck_save_abort(m);
        *member_put = world > 1 ? put / (double)(world - 1) : 0;
    }
    free(data);
    if (r < 0) {
        ck__save_discard(s);
        return r;
    }
    double t0 = tool_now();
    adopt_arg a = { .s = s, .err = err };
    r = ck__meet_each(root, meet, CK_MEET_PART, adopt_file, &a, err);
    double t1 = tool_now();
    ck_save_stats st;
    if (r == 0)
        r = ck_save_commit(s, &st, err);
    else
        ck__save_discard(s);
    double t2 = tool_now();
    ck__meet_remove(root, meet);
    *adopt = t1 - t0;
    *commit = t2 - t1;
    return r;
}

/* The same world committed by one process: every rank's file its own. */
static int alone(const char *root, uint64_t world, double *commit, ck_err *err)
{
    char name[32];
    snprintf(name, sizeof name, "alone-%llu", (unsigned long long)world);
    uint8_t *data = aligned_alloc(4096, 4096);
    if (!data)
        return ck_err_set(err, -ENOMEM, "out of memory");
    memset(data, 7, 4096);
    ck_save *s;
    int r = begin(root, name, world, &s, err);
    if (r == 0 && (r = ck__save_prepare(s, err)) < 0)
        ck_save_abort(s);
    for (uint64_t k = 0; r == 0 && k < world; k++)
        if ((r = ck_save_shard(s, "w", k, data, err)) < 0 ||
            (r = ck__save_write_rank(s, k, err)) < 0)
            ck_save_abort(s);
    double t0 = tool_now();
    if (r == 0)
        r = ck_save_commit(s, NULL, err);
    *commit = tool_now() - t0;
    free(data);
    return r;
}

/* The reference: 4 KiB written and fdatasync'ed, the best of n. */
static double fdatasync_ref(const char *root, int n)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/ref", root);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    char buf[4096];
    memset(buf, 1, sizeof buf);
    double best = 1e9;
    for (int i = 0; fd >= 0 && i < n; i++) {
        double t0 = tool_now();
        if (pwrite(fd, buf, sizeof buf, 0) != (ssize_t)sizeof buf || fdatasync(fd) < 0)
            break;
        double t = tool_now() - t0;
        best = t < best ? t : best;
    }
    if (fd >= 0)
        close(fd);
    unlink(path);
    return fd >= 0 ? best : -1;
}

int main(int argc, char **argv)
{
    bench_opts bo = { .prog = prog };
    if (argc > 2 || (argc == 2 && !strncmp(argv[1], "-", 1))) {
        printf("usage: nodes-commit [DIR] (the file system to measure; default /var/tmp)\n");
        return strcmp(argv[1], "-h") && strcmp(argv[1], "--help") ? EXIT_USAGE : EXIT_OK;
    }
    bo.dir = argc == 2 ? argv[1] : NULL;
    char root[PATH_MAX];
    const char *fstype;
    if (bench_workdir(&bo, root, &fstype) < 0)
        return EXIT_USAGE;
    printf("%s: on %s (%s); per save: the members' durable part files, then the "
           "coordinator's adoption of them and its commit; best of 3\n", prog, root, fstype);
    printf("%6s %14s %9s %10s %9s %17s %8s %16s %8s\n", "parts", "member put ms", "adopt ms",
           "commit ms", "total ms", "1-daemon commit", "ratio", "fdatasync 4K ms", "ratio");
    static const uint64_t parts[] = { 8, 64, 1024 };
    int rc = EXIT_OK;
    for (size_t i = 0; i < 3 && rc == EXIT_OK; i++) {
        /* The best of three of each: the disk is shared and its latency drifts. */
        double put = 1e9, adopt = 0, commit = 0, one_commit = 1e9, total = 1e9, ref = 1e9;
        for (int k = 0; k < 3 && rc == EXIT_OK; k++) {
            double p = 0, a = 0, c = 0, o = 0;
            ck_err err = { 0 };
            double f = fdatasync_ref(root, 20);
            if (alone(root, parts[i], &o, &err) < 0 || one(root, parts[i], &p, &a, &c, &err) < 0) {
                tool_error(prog, "%llu parts: %s", (unsigned long long)parts[i],
                           ck_err_msg(&err));
                rc = EXIT_USAGE;
            }
            char name[64];
            snprintf(name, sizeof name, "%s/alone-%llu", root, (unsigned long long)parts[i]);
            bench_remove(name);
            snprintf(name, sizeof name, "%s/parts-%llu", root, (unsigned long long)parts[i]);
            bench_remove(name);
            put = p < put ? p : put;
            one_commit = o < one_commit ? o : one_commit;
            ref = f < ref ? f : ref;
            if (a + c < total) {
                total = a + c;
                adopt = a;
                commit = c;
            }
        }
        if (rc != EXIT_OK)
            break;
        printf("%6llu %14.3f %9.3f %10.3f %9.3f %17.3f %7.2fx %16.3f %7.1fx\n",
               (unsigned long long)parts[i], put * 1e3, adopt * 1e3, commit * 1e3,
               total * 1e3, one_commit * 1e3, total / one_commit, ref * 1e3, total / ref);
    }
    bench_remove(root);
    return rc;
}
