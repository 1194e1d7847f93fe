/* async-save - what an async checkpoint costs training, and how fast it drains.
 *
 * For 1, 4 and 8 concurrent clients (ranks), each saving SIZE bytes of its own shard:
 *  - the stall: the time ck_client_submit blocks (the copy into staging), beside a
 *    plain memcpy of the same bytes by the same threads at the same time (target
 *    <= 1.2x);
 *  - the drain: bytes / (time from the last submit's return to the commit),
 *    with hashing off, beside bench.h's raw write of the same bytes (one file per
 *    client, all at once; preallocated, O_DIRECT, io_uring, 1 MiB I/Os, 32 in flight,
 *    fsync) in the same run (target >= 0.9x).
 * The engine is ckptd with --daemon SOCKET, else the embedded one.
 * With --daemons N the bench starts N ckptd on ROOT itself (ids d0.., as N nodes would
 * run them on a shared root) and measures 8 clients twice on the same bytes: through
 * one daemon, and split N ways (8/N clients per daemon), each drain beside the raw
 * write of those bytes, plus the time from the last part durable (the last client to
 * see DURABLE) to the commit (rank 0's COMMITTED, and the last client's). Each client
 * declares its part's size when it opens (ck_client_reserve, waiting: start-up),
 * so its staging is faulted in before the first save; --no-reserve leaves that to the
 * saves. The first and the second save, which land in fresh staging areas, are shown
 * apart from the steady state (the best of the later ones).
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <getopt.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "ck/client.h"
#include "tool.h"

static const char *prog = "async-save";

#define MAX_DAEMONS 8

typedef struct run {
    const char *root, *daemon;
    const char *socks[MAX_DAEMONS];    /* --daemons: the sockets the clients split over */
    unsigned nsocks;
    double durable_last, committed0, committed_last;   /* of the steady save, absolute */
    unsigned n;                /* clients */
    uint64_t size;             /* bytes per client */
    unsigned repeat;
    bool no_reserve;
    ck_job_id job;             /* the clients' one job */
    ck_decl *decl;             /* one tensor, sharded over the clients */
    pthread_barrier_t bar;
    pthread_mutex_t mu;
    double first_max[2];       /* the first and second saves' stalls, slowest client */
    double stall_max, copy_max, drain, raw;
} run;

typedef struct client {
    run *R;
    unsigned rank;
    ck_client *cl;
    uint8_t *src, *dst;
    double first[2], stall, copy, raw;
    double t_durable, t_committed;     /* when this client saw them (last save) */
    int rc;
    ck_err err;
} client;

/* The one tensor, each client's shard of it. */
static int declare_run(run *R, ck_err *err)
{
    ck_mesh mesh = { .ndim = 1, .size = { R->n } };
    ck_placement pl[1] = { { .kind = CK_SHARD, .dim = 0 } };
    uint64_t shape[2] = { R->size / 4096 * R->n, 1024 };
    int r = ck_decl_new(&R->decl, &mesh, err);
    if (r == 0 && (r = ck_decl_tensor(R->decl, "w", CK_F32, 2, shape, pl, err)) == 0)
        r = ck_decl_seal(R->decl, err);
    return r;
}

/* Begins save iter of this client: its shard of the tensor. */
static int declare(client *c, unsigned iter, ck_client_save **sv)
{
    run *R = c->R;
    char name[32];
    snprintf(name, sizeof name, "bench-%u-%u-%u", R->n, R->nsocks, iter);
    int r = ck_client_begin(c->cl, sv, name, iter, R->decl, c->rank, &R->job, &c->err);
    if (r < 0)
        return r;
    ck_client_no_hash(*sv);
    return ck_client_shard(*sv, "w", c->src, &c->err);
}

static int save_once(client *c, unsigned iter, bool timed)
{
    run *R = c->R;
    ck_client_save *sv;
    int r = declare(c, iter, &sv);
    if (r < 0)
        return r;
    pthread_barrier_wait(&R->bar);
    double t0 = tool_now();
    if (r == 0)
        r = ck_client_submit(sv, &(ck_submit){ .mode = CK_SUBMIT_COPY }, &c->err);
    double t1 = tool_now();
    if (r == 0 && c->rank == 0)
        r = ck_client_commit(sv, &c->err);
    pthread_barrier_wait(&R->bar);
    double t2 = tool_now();
    /* Polled rather than waited for, to see when the part turned durable. */
    ck_client_state st = CK_CLIENT_STAGED;
    c->t_durable = 0;
    while (r == 0 && st != CK_CLIENT_COMMITTED) {
        r = ck_client_poll(sv, &st, &c->err);
        if (r == 0 && st == CK_CLIENT_FAILED)
            r = -EIO;
        if (r == 0 && st >= CK_CLIENT_DURABLE && !c->t_durable)
            c->t_durable = tool_now();
        if (r == 0 && st != CK_CLIENT_COMMITTED)
            usleep(50);
    }
    double t3 = tool_now();
    c->t_committed = t3;
    ck_client_save_free(sv);
    if (timed) {
        c->stall = t1 - t0;
        c->raw = t3 - t2;      /* drain: after every submit returned */
    }
    return r;
}

static void *client_main(void *arg)
{
    client *c = arg;
    run *R = c->R;
    double best_stall = 1e9, best_drain = 1e9, best_copy = 1e9, best_raw = 1e9;
    for (unsigned i = 0; i < R->repeat + 2 && c->rc == 0; i++) {
        c->rc = save_once(c, i, true);
        if (c->rc < 0)
            continue;
        if (i < 2) {
            c->first[i] = c->stall;
            continue;
        }
        best_stall = c->stall < best_stall ? c->stall : best_stall;
        best_drain = c->raw < best_drain ? c->raw : best_drain;
        pthread_barrier_wait(&R->bar);
        if (c->rank == 0) {         /* the last timed save's durable-to-commit times */
            R->durable_last = R->committed_last = 0;
            R->committed0 = c->t_committed;
        }
        pthread_barrier_wait(&R->bar);
        pthread_mutex_lock(&R->mu);
        R->durable_last = c->t_durable > R->durable_last ? c->t_durable : R->durable_last;
        R->committed_last = c->t_committed > R->committed_last ? c->t_committed
                                                               : R->committed_last;
        pthread_mutex_unlock(&R->mu);
        /* The memcpy reference: the same bytes, all clients at once. */
        pthread_barrier_wait(&R->bar);
        double t0 = tool_now();
        memcpy(c->dst, c->src, R->size);
        double t = tool_now() - t0;
        best_copy = t < best_copy ? t : best_copy;
        /* The raw write reference: one file per client, all at once. */
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/raw-%u", R->root, c->rank);
        pthread_barrier_wait(&R->bar);
        t0 = tool_now();
        double w;
        bool direct;
        bench_opts bo = { .prog = prog };
        int wr = bench_raw_write(&bo, path, c->src, R->size, &w, &direct);
        unlink(path);
        pthread_barrier_wait(&R->bar);
        w = wr < 0 ? -1 : tool_now() - t0;
        best_raw = w > 0 && w < best_raw ? w : best_raw;
    }
    c->stall = best_stall;
    c->copy = best_copy;
    c->raw = best_raw;
    if (c->rank == 0)
        R->drain = best_drain;
    return NULL;
}

static int run_clients(run *R)
{
    client *cs = calloc(R->n, sizeof *cs);
    pthread_t *th = calloc(R->n, sizeof *th);
    if (!cs || !th)
        return -ENOMEM;
    pthread_barrier_init(&R->bar, NULL, R->n);
    int rc = ck_job_id_new(&R->job, &cs[0].err);
    if (rc == 0)
        rc = declare_run(R, &cs[0].err);
    if (rc < 0) {
        tool_error(prog, "%s", ck_err_msg(&cs[0].err));
        return rc;
    }
    for (unsigned i = 0; i < R->n; i++) {
        client *c = &cs[i];
        *c = (client){ .R = R, .rank = i };
        ck_client_opts o = { .socket = R->daemon, .embedded = !R->daemon,
                             .peer = !R->daemon && i ? cs[0].cl : NULL };
        if (R->nsocks) {
            o.socket = R->socks[i * R->nsocks / R->n];
            o.nodes = R->nsocks;
            o.embedded = false;
            o.peer = NULL;
        }
        if (posix_memalign((void **)&c->src, 4096, R->size) ||
            posix_memalign((void **)&c->dst, 4096, R->size))
            return -ENOMEM;
        for (uint64_t k = 0; k < R->size; k += 8)
            *(uint64_t *)(c->src + k) = k * 0x9E3779B97F4A7C15ull + i;
        memset(c->dst, 1, R->size);
        if ((rc = ck_client_open(&c->cl, R->root, &o, &c->err)) < 0) {
            tool_error(prog, "client %u: %s", i, ck_err_msg(&c->err));
            return rc;
        }
        if (!R->no_reserve)
            ck_client_reserve(c->cl, ck_decl_file_bytes(R->decl, i), true);
    }
    for (unsigned i = 0; i < R->n; i++)
        pthread_create(&th[i], NULL, client_main, &cs[i]);
    R->stall_max = R->copy_max = R->raw = R->first_max[0] = R->first_max[1] = 0;
    for (unsigned i = 0; i < R->n; i++) {
        pthread_join(th[i], NULL);
        if (cs[i].rc < 0) {
            tool_error(prog, "client %u: %s", i, ck_err_msg(&cs[i].err));
            rc = cs[i].rc;
        }
        for (int k = 0; k < 2; k++)
            R->first_max[k] = cs[i].first[k] > R->first_max[k] ? cs[i].first[k] : R->first_max[k];
        R->stall_max = cs[i].stall > R->stall_max ? cs[i].stall : R->stall_max;
        R->copy_max = cs[i].copy > R->copy_max ? cs[i].copy : R->copy_max;
        R->raw = cs[i].raw > R->raw ? cs[i].raw : R->raw;
    }
    for (unsigned i = R->n; i-- > 0;) {
        ck_client_close(cs[i].cl);
        free(cs[i].src);
        free(cs[i].dst);
    }
    pthread_barrier_destroy(&R->bar);
    ck_decl_free(R->decl);
    R->decl = NULL;
    free(cs);
    free(th);
    return rc;
}

/* --daemons: starts n ckptd on root (their logs in root), each listening when this
 * returns. */
static int start_daemons(const char *ckptd, const char *root, unsigned n, pid_t *pids,
                         char socks[][108])
{
    for (unsigned i = 0; i < n; i++) {
        char id[16], log[PATH_MAX];
        snprintf(id, sizeof id, "d%u", i);
        snprintf(socks[i], 108, "%s/.bench-%u.sock", root, i);
        snprintf(log, sizeof log, "%s/.bench-%u.log", root, i);
        pids[i] = fork();
        if (pids[i] < 0)
            return -errno;
        if (pids[i] == 0) {
            execl(ckptd, ckptd, "--root", root, "--id", id, "--socket", socks[i],
                  "--foreground", "--log", log, "--staging", "8GiB", "--part-timeout", "60",
                  (char *)NULL);
            _exit(127);
        }
        for (int k = 0; k < 3000 && access(socks[i], F_OK) < 0; k++)
            usleep(10000);
        if (access(socks[i], F_OK) < 0) {
            tool_error(prog, "%s did not start (see %s)", ckptd, log);
            return -EIO;
        }
    }
    return 0;
}

static void stop_daemons(unsigned n, const pid_t *pids)
{
    for (unsigned i = 0; i < n; i++)
        if (pids[i] > 0)
            kill(pids[i], SIGTERM);
    for (unsigned i = 0; i < n; i++)
        if (pids[i] > 0)
            waitpid(pids[i], NULL, 0);
}

/* 8 clients through one daemon, then split over all n: the same bytes. */
static int compare_daemons(run *R, const char *ckptd, unsigned n)
{
    pid_t pids[MAX_DAEMONS] = { 0 };
    char socks[MAX_DAEMONS][108];
    int rc = start_daemons(ckptd, R->root, n, pids, socks);
    printf("%s: %llu MiB per client, 8 clients, hashing off, steady state best of %u; "
           "daemons on %s\n", prog, (unsigned long long)(R->size >> 20), R->repeat, R->root);
    printf("%-22s %11s %10s %7s %18s %18s\n", "", "drain GB/s", "raw GB/s", "ratio",
           "durable->commit ms", "->last client ms");
    for (unsigned way = 0; rc == 0 && way < 2; way++) {
        R->n = 8;
        R->nsocks = way ? n : 1;
        for (unsigned i = 0; i < R->nsocks; i++)
            R->socks[i] = socks[i];
        if ((rc = run_clients(R)) < 0)
            break;
        double bytes = (double)R->size * R->n;
        char what[32];
        snprintf(what, sizeof what, "%u daemon%s x %u clients", R->nsocks,
                 R->nsocks > 1 ? "s" : "", 8 / R->nsocks);
        printf("%-22s %11.2f %10.2f %6.2fx %18.2f %18.2f\n", what, bytes / R->drain / 1e9,
               bytes / R->raw / 1e9, R->raw / R->drain,
               (R->committed0 - R->durable_last) * 1e3,
               (R->committed_last - R->durable_last) * 1e3);
    }
    stop_daemons(n, pids);
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {
        { "daemon", 1, 0, 'd' }, { "size", 1, 0, 's' }, { "repeat", 1, 0, 'r' },
        { "no-reserve", 0, 0, 'n' }, { "daemons", 1, 0, 'D' }, { "ckptd", 1, 0, 'c' },
        { "help", 0, 0, 'h' }, { 0, 0, 0, 0 },
    };
    run R = { .size = 128u << 20, .repeat = 3 };
    pthread_mutex_init(&R.mu, NULL);
    unsigned daemons = 0;
    char ckptd[PATH_MAX];
    /* The build tree's ckptd beside this bench (build/bench/ -> build/ckptd/). */
    snprintf(ckptd, sizeof ckptd, "%.*s/../ckptd/ckptd",
             strrchr(argv[0], '/') ? (int)(strrchr(argv[0], '/') - argv[0]) : 1,
             strrchr(argv[0], '/') ? argv[0] : ".");
    ck_err err = { 0 };
    int c;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        if (c == 'd') {
            R.daemon = optarg;
        } else if (c == 's' && ck_size_parse(optarg, &R.size, &err) == 0 && R.size >= (1u << 20)) {
            R.size &= ~(uint64_t)((1u << 20) - 1);
        } else if (c == 'n') {
            R.no_reserve = true;
        } else if (c == 'D' && atoi(optarg) >= 2 && atoi(optarg) <= MAX_DAEMONS &&
                   8 % atoi(optarg) == 0) {
            daemons = (unsigned)atoi(optarg);
        } else if (c == 'c') {
            snprintf(ckptd, sizeof ckptd, "%s", optarg);
        } else if (c == 'r' && atoi(optarg) > 0) {
            R.repeat = (unsigned)atoi(optarg);
        } else {
            fprintf(c == 'h' ? stdout : stderr,
                    "usage: async-save ROOT [--daemon SOCKET | --daemons N (2, 4 or 8) "
                    "[--ckptd PATH]] [--size SIZE per client, default 128MiB] [--repeat N] "
                    "[--no-reserve]\n");
            return c == 'h' ? EXIT_OK : EXIT_USAGE;
        }
    }
    if (optind != argc - 1) {
        tool_error(prog, "ROOT is required (the daemon's root with --daemon)");
        return EXIT_USAGE;
    }
    R.root = argv[optind];
    if (daemons)
        return compare_daemons(&R, ckptd, daemons) < 0 ? EXIT_USAGE : EXIT_OK;
    printf("%s: %s engine, %llu MiB per client, steady state best of %u, hashing off, "
           "staging %s\n", prog, R.daemon ? "ckptd" : "embedded",
           (unsigned long long)(R.size >> 20), R.repeat,
           R.no_reserve ? "made by the saves (--no-reserve)" : "declared at open");
    printf("%8s %10s %10s %10s %10s %16s %11s %10s %7s\n", "clients", "1st ms", "2nd ms",
           "steady ms", "memcpy ms", "ratios 1st/2nd/st", "drain GB/s", "raw GB/s", "ratio");
    static const unsigned ns[] = { 1, 4, 8 };
    bool met = true;
    for (size_t i = 0; i < 3; i++) {
        R.n = ns[i];
        if (run_clients(&R) < 0)
            return EXIT_USAGE;
        double bytes = (double)R.size * R.n;
        double r1 = R.first_max[0] / R.copy_max, r2 = R.first_max[1] / R.copy_max;
        double sr = R.stall_max / R.copy_max, dr = R.raw / R.drain;
        met &= r1 <= 1.3 && r2 <= 1.3 && sr <= 1.3 && dr >= 0.9;
        printf("%8u %10.2f %10.2f %10.2f %10.2f %5.2f/%4.2f/%4.2fx %11.2f %10.2f %6.2fx\n",
               R.n, R.first_max[0] * 1e3, R.first_max[1] * 1e3, R.stall_max * 1e3,
               R.copy_max * 1e3, r1, r2, sr, bytes / R.drain / 1e9, bytes / R.raw / 1e9, dr);
    }
    printf("%s: targets (every stall, the first two too, <= 1.3x memcpy; drain >= 0.9x raw) "
           "%s\n", prog, met ? "met" : "NOT met");
    return EXIT_OK;
}
