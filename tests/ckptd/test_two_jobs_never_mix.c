/* Two unrelated jobs of two ranks each save the same checkpoint name, step and world
 * into one root at about the same time (each rank a process, started 0-300 ms apart at
 * random), 50 times: through the embedded engines of the ranks' processes (meeting
 * through the root), or through ckptd (argv[1] "ckptd": both jobs on one daemon, or
 * each job's ranks split over two daemons of the root, alternately). Every trial:
 * exactly one job reports success, on both its ranks; the checkpoint holds its data
 * only (each job fills its shards and blobs with values of its own), and verifies
 * --deep; the other job fails on both ranks with an error that names the checkpoint
 * and says that another job saves it (or, when it came after the commit, that it
 * exists already); nothing is left under .pending. Before job identities, one job's
 * rank joined the other's meeting: a checkpoint of both jobs' parts committed, and a
 * rank was told its failed save succeeded. */
#include <sys/mman.h>

#include "kc_testlib.h"
#include "format/layout.h"

#define TRIALS 50
#define SHARD 8192                 /* bytes of a rank's shard */
#define STEP 5

typedef struct outcome {
    int rc;                        /* 0: the save committed, as the rank was told */
    char msg[CK_ERR_MSG_MAX];
} outcome;

/* What rank r of job j saves: every byte of its shard, and its blob. */
static uint8_t value(int j, int r)
{
    return (uint8_t)(0x40 + 0x10 * j + r);
}

typedef struct trial {
    const char *root, *name;
    const char *sock[2];           /* ckptd: the daemon of ranks 0 and 1; NULL: embedded */
    unsigned nodes;
    ck_job_id job[2];
    unsigned delay_ms[2][2];
    outcome *out;                  /* [job * 2 + rank], shared with the processes */
} trial;

static int rank_save(const trial *T, int j, int r, ck_err *err)
{
    ck_client_opts o = { .nodes = T->nodes, .writers = 2, .hash_threads = 2,
                         .part_timeout = 30, .dead_after = 5, .socket = T->sock[r],
                         .embedded = !T->sock[r] };
    ck_client *cl;
    int rc = ck_client_open(&cl, T->sock[r] ? NULL : T->root, &o, err);
    if (rc < 0)
        return rc;
    ck_mesh mesh;
    ck_mesh_parse("2", NULL, &mesh, NULL);
    ck_placement pl[1] = { { .kind = CK_SHARD, .dim = 0 } };
    uint64_t shape[1] = { 2 * SHARD };
    uint8_t *shard = malloc(SHARD);
    memset(shard, value(j, r), SHARD);
    char blob[8], data[8];
    snprintf(blob, sizeof blob, "rank%d", r);
    snprintf(data, sizeof data, "job%d", j);
    ck_client_save *sv = NULL;
    rc = kc_begin1(cl, &sv, T->name, STEP, &mesh, (uint64_t)r, "t", CK_U8, 1, shape, pl,
                   &T->job[j], err);
    if (rc == 0 && (rc = ck_client_shard(sv, "t", shard, err)) == 0 &&
        (rc = ck_client_blob(sv, blob, data, strlen(data), err)) == 0 &&
        (rc = ck_client_submit(sv, &kc_copy, err)) == 0 && r == 0)
        rc = ck_client_commit(sv, err);
    if (rc == 0)
        rc = ck_client_wait(sv, CK_CLIENT_COMMITTED, err);
    if (sv)
        ck_client_save_free(sv);
    ck_client_close(cl);
    free(shard);
    return rc;
}

static pid_t rank_process(const trial *T, int j, int r)
{
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork: %s", strerror(errno));
    if (pid)
        return pid;
    alarm(120);
    kd_sleep_ms(T->delay_ms[j][r]);
    ck_err err = { 0 };
    outcome *o = &T->out[j * 2 + r];
    o->rc = rank_save(T, j, r, &err);
    snprintf(o->msg, sizeof o->msg, "%s", o->rc ? ck_err_msg(&err) : "");
    _exit(0);
}

static int check_blob(const char *name, const void *data, size_t len, void *arg)
{
    int *job = arg;
    int r, j;
    if (sscanf(name, "rank%d", &r) != 1 || len != 4 || sscanf((const char *)data, "job%d", &j) != 1 ||
        (*job >= 0 && j != *job))
        *job = -2;
    return 0;
}

/* The job whose data ROOT/NAME holds, every byte and blob of it; -1 when it is a mix,
 * or cannot be read. */
static int owner(const trial *T)
{
    ck_ckpt *ck;
    ck_err err = { 0 };
    if (ck_open(T->root, T->name, &ck, &err) < 0) {
        fprintf(stderr, "open %s/%s: %s\n", T->root, T->name, ck_err_msg(&err));
        return -1;
    }
    uint8_t *all = malloc(2 * SHARD);
    ck_reader *rd;
    ck_box box = { .ndim = 1, .off = { 0 }, .len = { 2 * SHARD } };
    int job = -1;
    if (ck_reader_open(ck, "t", CK_AS_SAVED, &rd, &err) == 0) {
        if (ck_reader_read(rd, &box, 0, 2 * SHARD, all, &err) == 0) {
            job = all[0] == value(0, 0) ? 0 : all[0] == value(1, 0) ? 1 : -1;
            for (int r = 0; r < 2 && job >= 0; r++)
                for (size_t k = 0; k < SHARD && job >= 0; k++)
                    if (all[r * SHARD + k] != value(job, r))
                        job = -1;
        }
        ck_reader_close(rd);
    }
    int bj = job;
    if (job >= 0 && (ck_blobs_each(ck, check_blob, &bj, &err) < 0 || bj != job))
        job = -1;
    if (job < 0)
        fprintf(stderr, "%s/%s: a mix of both jobs' parts, or unreadable (%s)\n", T->root,
                T->name, ck_err_msg(&err));
    free(all);
    ck_close(ck);
    return job;
}

static void run_trial(trial *T, int t)
{
    ck_err err = { 0 };
    for (int j = 0; j < 2; j++) {
        REQUIRE(ck_job_id_new(&T->job[j], &err) == 0, "%s", ck_err_msg(&err));
        for (int r = 0; r < 2; r++)
            T->delay_ms[j][r] = (unsigned)(rand() % 301);
    }
    memset(T->out, 0, 4 * sizeof *T->out);
    pid_t pid[4];
    for (int i = 0; i < 4; i++)
        pid[i] = rank_process(T, i / 2, i % 2);
    for (int i = 0; i < 4; i++)
        REQUIRE(kd_wait_pid(pid[i], 120) == 0, "trial %d: the process of job %d, rank %d "
                "did not finish", t, i / 2, i % 2);
    const char *how = T->sock[0] ? T->nodes > 1 ? "two daemons" : "one daemon" : "embedded";
    bool ok[2] = { T->out[0].rc == 0 || T->out[1].rc == 0, T->out[2].rc == 0 ||
                   T->out[3].rc == 0 };
    CHECK(ok[0] != ok[1], "trial %d (%s, delays %u %u / %u %u ms): %s job reports success",
          t, how, T->delay_ms[0][0], T->delay_ms[0][1], T->delay_ms[1][0], T->delay_ms[1][1],
          ok[0] ? "more than one" : "no");
    char final[PATH_MAX + CK_NAME_MAX];
    snprintf(final, sizeof final, "%s/%s", T->root, T->name);
    bool committed = access(final, F_OK) == 0;
    int w = ok[0] ? 0 : 1;
    for (int r = 0; r < 2 && ok[w]; r++)
        CHECK(T->out[w * 2 + r].rc == 0, "trial %d (%s): job %d committed, but its rank %d was "
              "told: %s", t, how, w, r, T->out[w * 2 + r].msg);
    if (ok[0] || ok[1]) {
        CHECK(committed && owner(T) == w, "trial %d (%s): job %d was told its save committed, "
              "but %s holds %s", t, how, w, final, committed ? "other data" : "nothing");
        CHECK(kd_verify_tool(T->root, T->name) == 0, "trial %d (%s): %s does not verify --deep",
              t, how, final);
    }
    for (int r = 0; r < 2 && ok[0] != ok[1]; r++) {
        const outcome *o = &T->out[(1 - w) * 2 + r];
        CHECK(o->rc < 0 && strstr(o->msg, T->name) &&
              (strstr(o->msg, "another job") || strstr(o->msg, "already exists")),
              "trial %d (%s): job %d, rank %d: its error does not name the checkpoint and the "
              "other job: '%s'", t, how, 1 - w, r, o->msg);
    }
}

int main(int argc, char **argv)
{
    kc_watchdog(600);
    bool daemons = argc > 1 && !strcmp(argv[1], "ckptd");
    char base[PATH_MAX], root[PATH_MAX + 32], pend[PATH_MAX + 64];
    tl_tmpdir(base, sizeof base, daemons ? "two-jobs-ckptd" : "two-jobs");
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    trial T = { .root = root, .name = "race-ckpt" };
    T.out = mmap(NULL, 4 * sizeof *T.out, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                 -1, 0);
    REQUIRE(T.out != MAP_FAILED, "mmap");
    kd_proc d[2];
    if (daemons) {
        snprintf(root, sizeof root, "%s", base);
        const char *extra[] = { "--part-timeout", "30", "--dead-after", "5", NULL };
        kd_start_id(&d[0], root, "n0", extra);
        kc_daemon_pid = d[0].pid;
        kd_start_id(&d[1], root, "n1", extra);
    }
    char name[32];
    for (int t = 0; t < TRIALS && !tl_failures; t++) {
        if (daemons) {
            /* One root for the daemons: a name per trial. */
            snprintf(name, sizeof name, "race-ckpt-%d", t);
            T.name = name;
            T.nodes = t % 2 ? 2 : 1;
            T.sock[0] = d[0].sock;
            T.sock[1] = d[T.nodes - 1].sock;
        } else {
            snprintf(root, sizeof root, "%s/%d", base, t);
            REQUIRE(mkdir(root, 0755) == 0, "mkdir %s: %s", root, strerror(errno));
            T.nodes = 2;
        }
        run_trial(&T, t);
        snprintf(pend, sizeof pend, "%s/%s", root, CK_PENDING);
        CHECK(kd_count_entries(pend, true) == 0, "trial %d: %s is not empty", t, pend);
        if (!daemons && !tl_failures)
            tl_rmtree(root);
    }
    if (daemons && kc_end_two(&d[0], &d[1], root))
        return 1;
    if (tl_failures)
        return 1;
    tl_rmtree(base);
    printf("ok: %d races of two jobs for one name (%s): one job commits its own data, the "
           "other fails naming the other job; no mix, no false success\n", TRIALS,
           daemons ? "through ckptd, one daemon and two" : "embedded engines");
    return 0;
}
