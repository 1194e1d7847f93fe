/* kill -9 of one of two daemons mid-save, KD_KILL_TRIALS times each (default 20): the
 * member B, then the coordinator A (the daemon of rank 0). ckpt-synth runs 8 ranks, 4
 * per daemon, and the daemon dies at a random point of the save. Every trial: the
 * ranks all end (an error, not a hang: the survivor learns of the death from the
 * heartbeat within --dead-after 1 s), each rank says how it ended (an error names the
 * daemon that died, the one the rank talked to, or, for a member that died before it
 * joined the meeting, the ranks whose parts never came), a checkpoint of the
 * trial's name is either absent or verifies --deep (nothing partial is visible), and
 * (a coordinator that dies before it opened the meeting is known to no member: they
 * give up after --part-timeout 3 s, saying that no daemon of rank 0 opened the save)
 * the killed daemon is started again. At the end every earlier checkpoint still
 * verifies and a save through both daemons commits. */
#include "kd_testlib.h"

#define BYTES "8MiB"

static void start(kd_proc *d, const char *root, const char *id)
{
    static const char *const extra[] = { "--dead-after", "1", "--part-timeout", "3", NULL };
    kd_start_id(d, root, id, extra);
}

/* Each rank of the trial's output ended: "rank K: submit stalled", or an error
 * that names a daemon (its id as the engine it is, or the socket of the one the rank
 * talked to). */
static void every_rank_ended(const char *out, const char *what)
{
    bool ended[8] = { false };
    FILE *f = fopen(out, "r");
    char line[4096];
    /* The ranks are processes writing one file: a line may hold pieces of two. */
    while (f && fgets(line, sizeof line, f)) {
        int k = -1, n = 0;
        for (const char *p = line; (p = strstr(p, "rank ")); p++)
            if (sscanf(p, "rank %d: ", &k) == 1 && k >= 0 && k < 8 && ++n)
                ended[k] = true;
        if (n == 1)
            CHECK(strstr(line, "stalled") || strstr(line, "daemon ") ||
                  strstr(line, "engine ") || strstr(line, "ckptd at ") ||
                  strstr(line, "the parts of ranks"),
                  "%s: rank %d's error names no daemon and no ranks: %s", what, k, line);
    }
    if (f)
        fclose(f);
    for (int k = 0; k < 8; k++)
        CHECK(ended[k], "%s: rank %d said nothing of how its save ended (see %s)", what, k,
              out);
}

int main(void)
{
    const char *env = getenv("KD_KILL_TRIALS");
    int trials = env ? atoi(env) : 20;
    char root[PATH_MAX], socks[2 * PATH_MAX + 2], out[PATH_MAX + 32];
    tl_tmpdir(root, sizeof root, "nodeskill");
    kd_proc d[2];
    start(&d[0], root, "A");
    start(&d[1], root, "B");
    snprintf(socks, sizeof socks, "%s,%s", d[0].sock, d[1].sock);
    snprintf(out, sizeof out, "%s.synth", root);
    REQUIRE(kd_wait_pid(kd_synth(root, socks, "base", "8", "4", BYTES, NULL), 60) == 0,
            "the first save through two daemons failed (see %s, %s)", d[0].log, d[1].log);
    srand(12345);
    int committed = 0, failed = 0;
    char names[64][16];
    int nnames = 0;
    for (int victim = 1; victim >= 0; victim--) {
        for (int t = 0; t < trials; t++) {
            char name[16], what[64];
            snprintf(name, sizeof name, "k%c%02d", victim ? 'B' : 'A', t);
            snprintf(what, sizeof what, "trial %s (kill -9 of %s)", name,
                     victim ? "member B" : "coordinator A");
            unlink(out);
            pid_t synth = kd_synth(root, socks, name, "8", "4", BYTES, out);
            kd_sleep_ms(rand() % 120);
            kd_kill9(&d[victim]);
            int rc = kd_wait_pid(synth, 30);
            CHECK(rc >= 0, "%s: ckpt-synth hung after the kill (see %s)", what, out);
            every_rank_ended(out, what);
            if (kd_exists(root, name)) {
                CHECK(kd_verify_tool(root, name) == 0, "%s: a partial checkpoint is visible",
                      what);
                committed++;
                if (nnames < 64)
                    snprintf(names[nnames++], sizeof names[0], "%s", name);
            } else {
                CHECK(rc != 0, "%s: ckpt-synth succeeded but nothing was committed", what);
                failed++;
            }
            start(&d[victim], root, victim ? "B" : "A");
            if (tl_failures)
                break;
        }
    }
    CHECK(kd_verify_tool(root, "base") == 0, "the checkpoint before the kills does not verify");
    for (int i = 0; i < nnames; i++)
        CHECK(kd_verify_tool(root, names[i]) == 0, "%s no longer verifies", names[i]);
    CHECK(kd_wait_pid(kd_synth(root, socks, "after", "8", "4", BYTES, NULL), 60) == 0,
          "a save after the kills failed (see %s, %s)", d[0].log, d[1].log);
    CHECK(kd_verify_tool(root, "after") == 0, "after does not verify");
    for (int i = 0; i < 2; i++)
        CHECK(kd_term(&d[i], 30) == 0, "%s did not exit 0 on SIGTERM (see %s)",
              i ? "B" : "A", d[i].log);
    if (tl_failures)
        return 1;
    tl_rmtree(root);
    unlink(d[0].log);
    unlink(d[1].log);
    unlink(out);
    printf("ok: %d kills of each daemon mid-save: %d saves failed on every rank, %d had "
           "committed first; nothing partial visible, earlier checkpoints intact, the next "
           "save commits\n", trials, failed, committed);
    return 0;
}
