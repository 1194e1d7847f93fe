/* Two ckptd on one root (ids A and B, their own sockets and staging), as two nodes of
 * four ranks each: ckpt-synth --world 8 commits through both, the checkpoint passes
 * ckpt-verify --deep and equals the same save through one daemon (--against); with
 * the ranks split the other way (rank 0 at B) and box lists too. Then clients of the
 * API itself, two ranks per daemon, each with a blob: every rank's blob is in the
 * manifest the coordinator wrote (the members' blobs travel in their part files).
 * Nothing is left under .pending. */
#include "kc_testlib.h"
#include "format/layout.h"

static const kc_tensor ts[] = { { CK_F32, 2, { 96, 40 }, "S(0)" },
                                { CK_BF16, 1, { 3000 }, "S(0)" } };

static int blob_seen(const char *name, const void *data, size_t len, void *arg)
{
    unsigned *seen = arg;
    unsigned r;
    if (sscanf(name, "rank%u", &r) == 1 && r < 4 && len == 9 &&
        !memcmp(data, name, strlen(name)))
        seen[r]++;
    return 0;
}

static void api_blobs(const char *root, kd_proc *a, kd_proc *b)
{
    ck_mesh mesh;
    REQUIRE(ck_mesh_parse("4", NULL, &mesh, NULL) == 0, "mesh");
    ck_client *cl[4];
    ck_client_save *sv[4];
    kc_part part[4] = { 0 };
    ck_err err = { 0 };
    for (uint64_t r = 0; r < 4; r++) {
        ck_client_opts o = { .socket = r < 2 ? a->sock : b->sock, .nodes = 2 };
        REQUIRE(ck_client_open(&cl[r], NULL, &o, &err) == 0, "rank %llu: open: %s",
                (unsigned long long)r, ck_err_msg(&err));
        REQUIRE(kc_begin(cl[r], &sv[r], "blobs", 3, &mesh, r, ts, 2, &kc_job, &err) == 0,
                "rank %llu: begin: %s", (unsigned long long)r, ck_err_msg(&err));
        kc_declare(sv[r], &mesh, r, ts, 2, &part[r], false);
        char name[16], data[16];
        snprintf(name, sizeof name, "rank%llu", (unsigned long long)r);
        snprintf(data, sizeof data, "%s.....", name);
        REQUIRE(ck_client_blob(sv[r], name, data, 9, &err) == 0, "blob: %s", ck_err_msg(&err));
    }
    /* The members' ranks first: their daemon waits for the meeting rank 0 opens. */
    for (uint64_t r = 4; r-- > 0;)
        REQUIRE(ck_client_submit(sv[r], &kc_copy, &err) == 0, "rank %llu: submit: %s",
                (unsigned long long)r, ck_err_msg(&err));
    REQUIRE(ck_client_commit(sv[0], &err) == 0, "commit: %s", ck_err_msg(&err));
    for (uint64_t r = 0; r < 4; r++) {
        CHECK(ck_client_wait(sv[r], CK_CLIENT_COMMITTED, &err) == 0, "rank %llu: %s", (unsigned long long)r,
              ck_err_msg(&err));
        ck_client_save_free(sv[r]);
        kc_part_free(&part[r]);
        ck_client_close(cl[r]);
    }
    ck_ckpt *ck;
    REQUIRE(ck_open(root, "blobs", &ck, &err) == 0, "open blobs: %s", ck_err_msg(&err));
    unsigned seen[4] = { 0 };
    REQUIRE(ck_blobs_each(ck, blob_seen, seen, &err) == 0, "blobs: %s", ck_err_msg(&err));
    for (int r = 0; r < 4; r++)
        CHECK(seen[r] == 1, "the blob of rank %d is %s in the checkpoint", r,
              seen[r] ? "twice" : "not");
    ck_close(ck);
    CHECK(kd_verify_tool(root, "blobs") == 0, "blobs does not verify");
}

int main(void)
{
    kc_watchdog(150);
    char root[PATH_MAX], both[2 * PATH_MAX + 2], swapped[2 * PATH_MAX + 2], pend[PATH_MAX + 16];
    tl_tmpdir(root, sizeof root, "nodes");
    kd_proc a, b;
    kd_start_id(&a, root, "A", NULL);
    kc_daemon_pid = a.pid;
    kd_start_id(&b, root, "B", NULL);
    snprintf(both, sizeof both, "%s,%s", a.sock, b.sock);
    snprintf(swapped, sizeof swapped, "%s,%s", b.sock, a.sock);

    CHECK(kd_wait_pid(kd_synth(root, both, "two", "2x4", "5", "24MiB", NULL), 60) == 0,
          "ckpt-synth through two daemons failed (see %s, %s)", a.log, b.log);
    CHECK(kd_verify_tool(root, "two") == 0, "two does not verify --deep");
    CHECK(kd_wait_pid(kd_synth(root, a.sock, "one", "2x4", "5", "24MiB", NULL), 60) == 0,
          "ckpt-synth through one daemon failed (see %s)", a.log);
    const char *cmp[] = { CKPT_VERIFY_PATH, root, "two", "--against", "one", NULL };
    CHECK(kd_run(cmp, NULL, 60) == 0, "the two-daemon save differs from the one-daemon save");
    CHECK(kd_log_has(a.log, "coordinating 2 daemons") && kd_log_has(b.log, "joined daemon A"),
          "the save did not go through a meeting of A and B (see %s, %s)", a.log, b.log);

    const char *boxes[] = { CKPT_SYNTH_PATH, root, "--name", "swapped", "--mesh", "8",
                            "--tensors", "4", "--bytes", "8MiB", "--boxes", "--uneven",
                            "--seed", "3", "--hash-threads", "2", "--world", "8", "--daemon",
                            swapped, NULL };
    CHECK(kd_run(boxes, NULL, 60) == 0, "box lists with rank 0 at B failed (see %s, %s)",
          a.log, b.log);
    CHECK(kd_verify_tool(root, "swapped") == 0, "swapped does not verify --deep");

    api_blobs(root, &a, &b);

    snprintf(pend, sizeof pend, "%s/%s", root, CK_PENDING);
    CHECK(kd_count_entries(pend, true) == 0, "%s is not empty after the commits", pend);
    if (kc_end_two(&a, &b, root))
        return 1;
    printf("ok: two daemons x four ranks commit once, verify --deep, equal the one-daemon "
           "save, either daemon coordinating; members' blobs reach the manifest\n");
    return 0;
}
