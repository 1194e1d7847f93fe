/* The clique a tiered save takes early (decision 0204) is the one its commit takes,
 * whatever order its ranks begin in: the nodes' order is that of their least ranks,
 * which each member says once all its ranks are in (share.ID), not the rank that
 * happened to begin first.
 *
 * Four ckptd on one root (n0..n3), each with a local tier and a peer service on
 * loopback, --replicas 2 --jump 1 (cliques of two by node order: the first two nodes,
 * the last two). Eight ranks, rank r at n(r mod 4), through the client API in one
 * process, so that the order they begin in (their submits) is the test's: rank 0, then
 * 5, 2 and 3, each once the one before has joined its daemon to the meeting; then 4,
 * 1, 6 and 7. So n1 joins with rank 5: ordered by the ranks the daemons joined with,
 * the nodes would be n0, n2, n3, n1 (cliques {n0, n2} and {n3, n1}), and the commit,
 * which orders them by their least ranks, would overrule that (as it did before the
 * share records). Ordered by their least ranks, they are n0, n1, n2, n3 both times.
 * The daemons are the test build, whose first fsync takes 5 s (--inject-fault slow@0):
 * the clique is known once the last rank has begun, and a node whose 1.5 MiB were
 * written and committed before that (under ASan on a loaded machine, it happened) has
 * nothing left to send beside its write, rightly sends after its commit, and proves
 * nothing here. A disk slow to flush keeps every node's write open past the last begin.
 * Then:
 *   - every rank hears level replicated;
 *   - every node sent its part as it was written, and its replica at its clique peer
 *     (n0-n1, n2-n3) was committed from that stream, with no fall back after the
 *     commit; each replica deep-verifies;
 *   - no other node holds anything of a node's part, and nothing is left under
 *     .pending.
 */
#include "kc_testlib.h"
#include "format/layout.h"

#define NODES 4
#define WORLD 8

static const kc_tensor ts[] = { { CK_F32, 2, { 4096, 256 }, "S(0)" },
                                { CK_BF16, 1, { 1u << 20 }, "S(0)" } };

static char locals[NODES][PATH_MAX];

/* Whether daemon d's log says needle, within secs. */
static bool log_says(const kd_proc *d, const char *needle, double secs)
{
    for (double end = kd_now() + secs; kd_now() < end; kd_sleep_ms(10))
        if (kd_log_has(d->log, needle))
            return true;
    return false;
}

/* Whether ROOT/.replicas/SRC holds anything of checkpoint c: the replica, or a pending
 * copy of it (.pending/c.TOKEN). */
static bool holds_any_of_c(const char *local, unsigned src)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/.replicas/n%u/c", local, src);
    if (access(p, F_OK) == 0)
        return true;
    snprintf(p, sizeof p, "%s/.replicas/n%u/%s", local, src, CK_PENDING);
    DIR *d = opendir(p);
    bool any = false;
    for (struct dirent *e; d && (e = readdir(d));)
        any |= !strncmp(e->d_name, "c.", 2);
    if (d)
        closedir(d);
    return any;
}

int main(void)
{
    kc_watchdog(150);
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "early-clique");
    kd_proc d[NODES];
    for (unsigned i = 0; i < NODES; i++) {
        char id[8], addr[PATH_MAX + 32];
        snprintf(id, sizeof id, "n%u", i);
        snprintf(locals[i], sizeof locals[i], "%s.n%u.local", root, i);
        REQUIRE(mkdir(locals[i], 0700) == 0, "mkdir %s: %s", locals[i], strerror(errno));
        kd_start_id(&d[i], root, id, (const char *const[]){
            "--local-root", locals[i], "--peer-listen", "127.0.0.1:0", "--replicas", "2",
            "--jump", "1", "--peer-timeout", "10", "--part-timeout", "60",
            "--peer-checkers", "1", "--staging", "64MiB", "--inject-fault", "slow@0", NULL });
        if (i == 0)
            kc_daemon_pid = d[0].pid;
        snprintf(addr, sizeof addr, "%s/.ckptd.%s.peer", root, id);
        for (int k = 0; k < 600 && access(addr, F_OK) != 0; k++)
            kd_sleep_ms(10);
        REQUIRE(access(addr, F_OK) == 0, "ckptd %s published no peer address (see %s)", id,
                d[i].log);
    }

    ck_mesh mesh;
    ck_err err = { 0 };
    REQUIRE(ck_mesh_parse("8", NULL, &mesh, NULL) == 0, "mesh");
    ck_client *cl[WORLD];
    ck_client_save *sv[WORLD];
    kc_part part[WORLD] = { 0 };
    /* A rank's BEGIN goes with its submit: each of the first four is submitted once the
     * one before has joined its daemon to the meeting (n0 opens it). */
    static const unsigned order[WORLD] = { 0, 5, 2, 3, 4, 1, 6, 7 };
    for (unsigned k = 0; k < WORLD; k++) {
        unsigned r = order[k], node = r % NODES;
        ck_client_opts o = { .socket = d[node].sock, .nodes = NODES };
        REQUIRE(ck_client_open(&cl[r], NULL, &o, &err) == 0, "rank %u: open: %s", r,
                ck_err_msg(&err));
        REQUIRE(kc_begin(cl[r], &sv[r], "c", 3, &mesh, r, ts, 2, &kc_job, &err) == 0,
                "rank %u: begin: %s", r, ck_err_msg(&err));
        ck_client_level(sv[r], CK_LEVEL_REPLICATED);
        kc_declare(sv[r], &mesh, r, ts, 2, &part[r], false);
        REQUIRE(ck_client_submit(sv[r], &kc_copy, &err) == 0, "rank %u: submit: %s", r,
                ck_err_msg(&err));
        if (k < NODES)
            REQUIRE(log_says(&d[node], node ? "checkpoint c: joined daemon n0's save"
                                             : "checkpoint c: coordinating 4 daemons", 30),
                    "rank %u: n%u never joined the meeting (see %s)", r, node, d[node].log);
    }
    REQUIRE(ck_client_commit(sv[0], &err) == 0, "commit: %s", ck_err_msg(&err));
    for (unsigned r = 0; r < WORLD; r++) {
        char why[256] = "";
        CHECK(ck_client_wait(sv[r], CK_CLIENT_COMMITTED, &err) == 0, "rank %u: %s", r,
              ck_err_msg(&err));
        ck_level got = ck_client_level_reached(sv[r], why, sizeof why);
        CHECK(got == CK_LEVEL_REPLICATED, "rank %u: level %s (%s), not replicated", r,
              ck_level_name(got), why);
        ck_client_save_free(sv[r]);
        kc_part_free(&part[r]);
        ck_client_close(cl[r]);
    }

    /* The clique peer of each node. */
    static const unsigned commit[NODES] = { 1, 0, 3, 2 };
    for (unsigned i = 0; i < NODES; i++) {
        char said[128];
        snprintf(said, sizeof said, "checkpoint c: replica committed by ckptd n%u at ", commit[i]);
        CHECK(kd_log_has(d[i].log, "checkpoint c: its 2 data file(s) here go to 1 peer(s) "
                                   "of its clique as they are written"),
              "n%u did not send its part as it was written (see %s)", i, d[i].log);
        CHECK(kd_log_has(d[i].log, said) && kd_log_has(d[i].log, "begun beside the local write"),
              "n%u's replica at n%u did not come from the stream begun beside the write "
              "(see %s)", i, commit[i], d[i].log);
        CHECK(!kd_log_has(d[i].log, "go after the commit") &&
              !kd_log_has(d[i].log, "goes after the commit"),
              "n%u fell back to a PUT after the commit (see %s)", i, d[i].log);
        char rep[PATH_MAX + 32];
        snprintf(rep, sizeof rep, "%s/.replicas/n%u", locals[commit[i]], i);
        const char *verify[] = { CKPT_VERIFY_PATH, rep, "c", "--deep", NULL };
        CHECK(kd_run(verify, NULL, 60) == 0,
              "n%u's replica at its commit peer n%u does not deep-verify (see %s)", i,
              commit[i], d[commit[i]].log);
        for (unsigned j = 0; j < NODES; j++)
            CHECK(j == i || j == commit[i] || !holds_any_of_c(locals[j], i),
                  "n%u holds something of n%u's part, outside its clique", j, i);
    }
    char pend[PATH_MAX + 16];
    snprintf(pend, sizeof pend, "%s/%s", root, CK_PENDING);
    CHECK(kd_count_entries(pend, true) == 0, "%s is not empty after the commit", pend);

    for (unsigned i = 0; i < NODES; i++)
        CHECK(kd_term(&d[i], 30) == 0, "n%u did not exit 0 on SIGTERM (see %s)", i, d[i].log);
    kc_daemon_pid = 0;
    if (tl_failures)
        return 1;
    for (unsigned i = 0; i < NODES; i++) {
        tl_rmtree(locals[i]);
        unlink(d[i].log);
    }
    tl_rmtree(root);
    printf("ok: ranks begun out of order: every node's part replicated beside its write, "
           "at the clique its commit takes\n");
    return 0;
}
