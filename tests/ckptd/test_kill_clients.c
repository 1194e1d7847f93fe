/* SIGKILL of every client once each one's submit has returned and rank 0 has
 * asked for the commit: the data is in ckptd's hands, so the checkpoint commits and
 * holds the formula's bytes. */
#include "ck/client.h"
#include "kd_testlib.h"

/* The job of the saves here (ck/client.h): one, fixed. */
static const ck_job_id job = { .bytes = "fixed-job-id-01" };

#define WORLD 4
#define TENSORS 4
static const uint64_t shape[2] = { 4096, 4096 };

static void rank_main(const char *sock, uint64_t rank, int ready)
{
    ck_err err = { 0 };
    ck_client *cl;
    ck_mesh mesh;
    ck_placement pl[1];
    ck_mesh_parse("4", NULL, &mesh, NULL);
    ck_placements_default(1, pl);
    if (ck_client_open(&cl, NULL, &(ck_client_opts){ .socket = sock }, &err) < 0)
        goto fail;
    ck_client_save *sv;
    ck_decl *d;
    char tn[8];
    if (ck_decl_new(&d, &mesh, &err) < 0)
        goto fail;
    for (uint32_t t = 0; t < TENSORS; t++) {
        snprintf(tn, sizeof tn, "t%u", t);
        if (ck_decl_tensor(d, tn, CK_F32, 2, shape, pl, &err) < 0)
            goto fail;
    }
    if (ck_client_begin(cl, &sv, "orphan", 5, d, rank, &job, &err) < 0)
        goto fail;
    ck_synth_src src[TENSORS];
    uint32_t coord[1] = { (uint32_t)rank };
    for (uint32_t t = 0; t < TENSORS; t++) {
        snprintf(tn, sizeof tn, "t%u", t);
        src[t] = (ck_synth_src){ .seed = 7, .tensor = t, .itemsize = 4, .ndim = 2,
                                 .shape = { shape[0], shape[1] } };
        ck_shard_box(2, shape, &mesh, pl, coord, &src[t].box);
        if (ck_client_shard_fill(sv, tn, ck_synth_fill, &src[t], &err) < 0)
            goto fail;
    }
    if (ck_client_submit(sv, &(ck_submit){ .mode = CK_SUBMIT_COPY }, &err) < 0 || (rank == 0 && ck_client_commit(sv, &err) < 0))
        goto fail;
    if (write(ready, "r", 1) != 1)
        _exit(3);
    for (;;)
        pause();
fail:
    fprintf(stderr, "rank %llu: %s\n", (unsigned long long)rank, ck_err_msg(&err));
    _exit(2);
}

int main(void)
{
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "kdorphan");
    kd_proc d;
    kd_start(&d, root, (const char *const[]){ "--writers", "2", NULL });
    int fds[2];
    REQUIRE(pipe(fds) == 0, "pipe");
    pid_t pids[WORLD];
    for (uint64_t r = 0; r < WORLD; r++) {
        pids[r] = fork();
        REQUIRE(pids[r] >= 0, "fork");
        if (pids[r] == 0) {
            close(fds[0]);
            rank_main(d.sock, r, fds[1]);
        }
    }
    close(fds[1]);
    char c;
    int ready = 0;
    while (ready < WORLD && read(fds[0], &c, 1) == 1)
        ready++;
    for (int r = 0; r < WORLD; r++)
        kill(pids[r], SIGKILL);
    bool early = kd_exists(root, "orphan");
    for (int r = 0; r < WORLD; r++)
        waitpid(pids[r], NULL, 0);
    REQUIRE(ready == WORLD, "only %d ranks staged", ready);
    double t0 = kd_now();
    while (!kd_exists(root, "orphan") && kd_now() - t0 < 60)
        kd_sleep_ms(10);
    CHECK(kd_exists(root, "orphan"), "the checkpoint was not committed after its clients died");
    CHECK(tl_verify_deep(root, "orphan", 7) == 0, "the orphaned checkpoint is bad");
    CHECK(kd_term(&d, 10) == 0, "ckptd did not exit 0 on SIGTERM");
    if (tl_failures)
        return 1;
    tl_rmtree(root);
    unlink(d.log);
    printf("ok: every client SIGKILLed after staging; ckptd committed the checkpoint%s\n",
           early ? " (it was committed before the kill: timing not exercised)" : "");
    return 0;
}
