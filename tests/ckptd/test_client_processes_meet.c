/* The embedded engines of a job's processes (ck_client_opts.nodes > 1, no daemon) meet
 * through the root as the daemons of several nodes do: four processes, one rank each,
 * commit one checkpoint equal (digest) to the same save made by four ranks that are
 * threads of one process, one rank writing its shards itself into the staging area
 * (ck_submit.place); they leave no heartbeat, lock or
 * pending entry behind. A rank's process killed after it joined fails the save on
 * rank 0, nothing becomes visible, and recovery removes what the dead process left
 * (its heartbeat and lock). */
#include <dirent.h>
#include <glob.h>
#include <sys/wait.h>

#include "kc_testlib.h"
#include "ck/catalog.h"
#include "ck/synth.h"
#include "format/layout.h"

static const kc_tensor ts[] = { { CK_F32, 2, { 96, 40 }, "S(0)" },
                                { CK_BF16, 1, { 3000 }, "S(0)" },
                                { CK_I64, 1, { 5 }, "R" } };
#define NT 3

/* In place: the formula written straight into staging (the tensor "tN" is formula N). */
static int place_formula(void *arg, uint32_t i, const char *tensor, uint32_t box, void *dst,
                         size_t len, ck_err *err)
{
    kc_part *part = arg;
    ck_synth_src *g = &part->src[tensor[1] - '0'];
    CHECK(len == part->bytes[tensor[1] - '0'], "source %u: %zu bytes, the shard %llu", i, len,
          (unsigned long long)part->bytes[tensor[1] - '0']);
    return ck_synth_fill(g, 0, dst, len) == 0 ? 0 : ck_err_set(err, -EIO, "%s box %u", tensor,
                                                               box);
}

/* A copy that never lands: the part is admitted (its engine joined the meeting) and
 * never staged. */
static int never_placed(void *arg, uint32_t i, const char *tensor, uint32_t box, void *dst,
                        size_t len, ck_err *err)
{
    (void)arg, (void)i, (void)tensor, (void)box, (void)dst, (void)len;
    for (;;)
        pause();
    return ck_err_set(err, -EINTR, "unreachable");
}

/* One rank's save; self_placed: its shards are written by hand into the staging area. */
static int rank_save(ck_client *cl, const char *name, uint64_t rank, uint64_t world,
                     bool self_placed, ck_client_save **out)
{
    ck_mesh mesh;
    char ms[8];
    snprintf(ms, sizeof ms, "%llu", (unsigned long long)world);
    REQUIRE(ck_mesh_parse(ms, NULL, &mesh, NULL) == 0, "mesh");
    ck_client_save *sv;
    kc_part part = { 0 };
    ck_err err = { 0 };
    ck_decl *d = kc_decl(&mesh, ts, NT);
    REQUIRE(ck_client_begin(cl, &sv, name, 9, d, rank, &kc_job, &err) == 0,
            "rank %llu: begin: %s", (unsigned long long)rank, ck_err_msg(&err));
    kc_declare(sv, &mesh, rank, ts, NT, &part, false);
    char bn[16];
    snprintf(bn, sizeof bn, "rank%llu", (unsigned long long)rank);
    REQUIRE(ck_client_blob(sv, bn, bn, strlen(bn), &err) == 0, "blob: %s", ck_err_msg(&err));
    /* Every source placed: none by address or fill. */
    static const ck_source none[NT];
    ck_submit how = { .mode = CK_SUBMIT_COPY, .src = none, .nsrc = ck_decl_writes(d, rank),
                      .place = place_formula, .arg = &part };
    ck_decl_free(d);
    int r = ck_client_submit(sv, self_placed ? &how : &kc_copy, &err);
    if (r == 0 && rank == 0)
        r = ck_client_commit(sv, &err);
    if (r < 0)
        fprintf(stderr, "rank %llu: %s\n", (unsigned long long)rank, ck_err_msg(&err));
    kc_part_free(&part);
    *out = sv;
    return r;
}

/* The reference: world ranks as threads of this process, one engine. */
static void threads(const char *root, const char *name, uint64_t world)
{
    ck_client *cl[KC_MAX_WORLD];
    ck_client_save *sv[KC_MAX_WORLD];
    ck_err err = { 0 };
    for (uint64_t r = 0; r < world; r++) {
        ck_client_opts o = { .embedded = true, .writers = 2, .hash_threads = 2,
                             .peer = r ? cl[0] : NULL };
        REQUIRE(ck_client_open(&cl[r], root, &o, &err) == 0, "open: %s", ck_err_msg(&err));
    }
    for (uint64_t r = world; r-- > 0;)
        REQUIRE(rank_save(cl[r], name, r, world, false, &sv[r]) == 0, "threads: rank %llu",
                (unsigned long long)r);
    for (uint64_t r = 0; r < world; r++) {
        REQUIRE(ck_client_wait(sv[r], CK_CLIENT_COMMITTED, &err) == 0, "threads: wait: %s", ck_err_msg(&err));
        ck_client_save_free(sv[r]);
    }
    for (uint64_t r = world; r-- > 0;)
        ck_client_close(cl[r]);
}

/* A process of rank rank: its own engine; exits 0 once the save committed. With die,
 * it kills itself once its engine joined the meeting, before its part is staged. */
static pid_t process(const char *root, const char *name, uint64_t rank, uint64_t world,
                     bool die)
{
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork: %s", strerror(errno));
    if (pid)
        return pid;
    alarm(90);
    ck_client *cl;
    ck_err err = { 0 };
    ck_client_opts o = { .embedded = true, .nodes = (unsigned)world, .writers = 2,
                         .hash_threads = 2, .dead_after = 1, .part_timeout = 60 };
    if (ck_client_open(&cl, root, &o, &err) < 0) {
        fprintf(stderr, "rank %llu: open: %s\n", (unsigned long long)rank, ck_err_msg(&err));
        _exit(1);
    }
    ck_client_save *sv;
    if (die) {
        ck_mesh mesh;
        ck_mesh_parse("3", NULL, &mesh, NULL);
        ck_decl *d = kc_decl(&mesh, ts, NT);
        REQUIRE(ck_decl_seal(d, &err) == 0, "seal: %s", ck_err_msg(&err));
        static const ck_source none[NT];
        /* Joined, never staged: a lazy submit whose copy never ends. */
        ck_submit how = { .mode = CK_SUBMIT_LAZY, .src = none, .nsrc = ck_decl_writes(d, rank),
                          .place = never_placed };
        if (ck_client_begin(cl, &sv, name, 9, d, rank, &kc_job, &err) < 0 ||
            ck_client_submit(sv, &how, &err) < 0)
            _exit(1);
        char pat[PATH_MAX + 64];
        snprintf(pat, sizeof pat, "%s/%s/%s.*-meet/join.*.p%ld.*", root, CK_PENDING, name,
                 (long)getpid());
        for (;;) {
            glob_t g;
            bool joined = glob(pat, 0, NULL, &g) == 0;
            globfree(&g);
            if (joined)
                kill(getpid(), SIGKILL);
            usleep(10000);
        }
    }
    int r = rank_save(cl, name, rank, world, rank == world - 1, &sv);
    if (r == 0 && (r = ck_client_wait(sv, CK_CLIENT_COMMITTED, &err)) < 0)
        fprintf(stderr, "rank %llu: wait: %s\n", (unsigned long long)rank, ck_err_msg(&err));
    ck_client_save_free(sv);
    ck_client_close(cl);
    _exit(r == 0 ? 0 : 3);
}

static int count_engine_files(const char *root)
{
    int n = 0;
    DIR *d = opendir(root);
    struct dirent *de;
    while (d && (de = readdir(d)))
        n += !strncmp(de->d_name, ".ckptd.", 7);
    if (d)
        closedir(d);
    return n;
}

int main(void)
{
    kc_watchdog(150);
    char ref[PATH_MAX], root[PATH_MAX], pend[PATH_MAX + 16];
    tl_tmpdir(ref, sizeof ref, "meet-ref");
    tl_tmpdir(root, sizeof root, "meet");
    threads(ref, "s", 4);

    pid_t pids[4];
    for (uint64_t r = 0; r < 4; r++)
        pids[r] = process(root, "s", r, 4, false);
    for (int r = 0; r < 4; r++)
        CHECK(kd_wait_pid(pids[r], 90) == 0, "process of rank %d failed", r);
    uint64_t a = kc_digest(ref, "s"), b = kc_digest(root, "s");
    CHECK(a && a == b, "four processes committed another checkpoint than four threads "
          "(digest %016llx, threads %016llx)", (unsigned long long)b, (unsigned long long)a);
    CHECK(kd_verify_tool(root, "s") == 0, "the processes' checkpoint does not verify --deep");
    snprintf(pend, sizeof pend, "%s/%s", root, CK_PENDING);
    CHECK(kd_count_entries(pend, true) == 0, "%s is not empty after the commit", pend);
    CHECK(count_engine_files(root) == 0, "the engines left heartbeats or locks in %s", root);

    /* Rank 2 dies after its engine joined: rank 0's save fails, nothing is visible. */
    pids[0] = process(root, "dead", 0, 3, false);
    pids[1] = process(root, "dead", 1, 3, false);
    pids[2] = process(root, "dead", 2, 3, true);
    CHECK(kd_wait_pid(pids[2], 60) == 128 + SIGKILL, "rank 2 did not die as planned");
    CHECK(kd_wait_pid(pids[0], 60) == 3, "rank 0's save did not fail with rank 2 dead");
    CHECK(kd_wait_pid(pids[1], 60) == 3, "rank 1's save did not fail with rank 2 dead");
    char final[PATH_MAX + 8];
    snprintf(final, sizeof final, "%s/dead", root);
    CHECK(access(final, F_OK) != 0, "a save with a dead rank became visible");
    CHECK(count_engine_files(root) == 2, "the dead process's heartbeat and lock are not "
          "there to recover (%d engine files)", count_engine_files(root));
    ck_err err = { 0 };
    size_t removed = 0;
    CHECK(ck_root_recover(root, &removed, NULL, NULL, &err) == 0, "recover: %s",
          ck_err_msg(&err));
    CHECK(count_engine_files(root) == 0, "recovery left the dead engine's files");
    CHECK(kd_count_entries(pend, true) == 0, "recovery left %s not empty", pend);
    CHECK(kd_verify_tool(root, "s") == 0, "s does not verify after the failed save");
    if (tl_failures)
        return 1;
    tl_rmtree(ref);
    tl_rmtree(root);
    printf("ok: four processes' engines commit one checkpoint equal to four threads', one "
           "rank writing in place; a dead rank fails the save, nothing visible, recovered\n");
    return 0;
}
