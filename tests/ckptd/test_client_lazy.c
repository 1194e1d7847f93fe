/* Client API, lazy saves, embedded and through ckptd.
 *
 * lazy submit returns before the copy (a thread of the client does it); the fence
 * waits for it. A save whose sources are overwritten with junk and freed right after
 * the fence commits the original bytes: what was saved is what the sources held at
 * the fence. A save whose fill fails: lazy submit still returns 0 (it has not copied
 * yet), and the fence returns the fill's error, every time it is called; poll says
 * FAILED. A client call made before the fence (poll) fences first, so the copy never
 * races the caller; rank 0's commit is the exception: it returns at once, and the copy
 * thread asks for the commit when the part is staged. Both modes commit the same
 * checkpoint. */
#include "kc_testlib.h"

static const kc_tensor tensors[] = {
    { CK_F32, 2, { 1024, 1031 }, "R" },
    { CK_F64, 1, { 5003 }, "R" },
    { CK_BF16, 3, { 3, 5, 7 }, "R" },
};
#define NT 3

static int failing_fill(void *arg, uint64_t off, void *dst, size_t len)
{
    (void)arg;
    (void)off;
    (void)dst;
    (void)len;
    return -EIO;
}

/* A fill that waits until the test opens the gate, then fills as inner does. */
typedef struct gated {
    ck_synth_src *inner;
    pthread_mutex_t lock;
    pthread_cond_t cv;
    bool open;
} gated;

static int gated_fill(void *arg, uint64_t off, void *dst, size_t len)
{
    gated *g = arg;
    pthread_mutex_lock(&g->lock);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->lock);
    pthread_mutex_unlock(&g->lock);
    return ck_synth_fill(g->inner, off, dst, len);
}

static uint64_t run(bool connected)
{
    kc_env e;
    kc_open(&e, connected, "kclazy", 1, NULL, NULL);
    const char *mode = kc_mode(&e);
    ck_mesh mesh;
    REQUIRE(ck_mesh_parse("1", NULL, &mesh, NULL) == 0, "mesh");
    ck_err err = { 0 };

    /* Sources junked right after the fence: the checkpoint holds the originals. */
    ck_client_save *sv;
    kc_part part = { 0 };
    REQUIRE(kc_begin(e.cl[0], &sv, "lazy-a", 40, &mesh, 0, tensors, NT, &kc_job, &err) == 0,
            "%s: begin: %s", mode, ck_err_msg(&err));
    kc_declare(sv, &mesh, 0, tensors, NT, &part, true);
    REQUIRE(ck_client_submit(sv, &kc_lazy, &err) == 0, "%s: lazy submit: %s", mode, ck_err_msg(&err));
    CHECK(ck_client_submit(sv, &kc_lazy, &err) < 0, "%s: a second lazy submit of one save was "
          "accepted", mode);
    err = (ck_err){ 0 };
    REQUIRE(ck_client_wait(sv, CK_CLIENT_STAGED, &err) == 0, "%s: fence: %s", mode, ck_err_msg(&err));
    for (int t = 0; t < NT; t++)
        memset(part.buf[t], 0x5a, part.bytes[t]);
    kc_part_free(&part);
    CHECK(ck_client_wait(sv, CK_CLIENT_STAGED, &err) == 0, "%s: a second fence failed: %s", mode,
          ck_err_msg(&err));
    REQUIRE(ck_client_commit(sv, &err) == 0, "%s: commit: %s", mode, ck_err_msg(&err));
    CHECK(ck_client_wait(sv, CK_CLIENT_COMMITTED, &err) == 0, "%s: wait: %s", mode, ck_err_msg(&err));
    ck_client_save_free(sv);
    CHECK(tl_verify_deep(e.root, "lazy-a", KC_SEED) == 0, "%s: lazy-a does not hold the "
          "sources as they were at the fence", mode);

    /* A failed copy: the fence returns its error, poll says FAILED. */
    REQUIRE(kc_begin(e.cl[0], &sv, "lazy-b", 41, &mesh, 0, tensors, 1, &kc_job, &err) == 0,
            "%s: begin: %s", mode, ck_err_msg(&err));
    kc_declare(sv, &mesh, 0, tensors, 1, &part, true);
    REQUIRE(ck_client_shard_fill(sv, "t0", failing_fill, NULL, &err) == 0, "%s: fill: %s",
            mode, ck_err_msg(&err));
    REQUIRE(ck_client_submit(sv, &kc_lazy, &err) == 0, "%s: lazy submit of a save whose copy will "
            "fail returned an error already: %s", mode, ck_err_msg(&err));
    for (int k = 0; k < 2; k++) {
        ck_err f = { 0 };
        int r = ck_client_wait(sv, CK_CLIENT_STAGED, &f);
        CHECK(r == -EIO && strstr(ck_err_msg(&f), "t0"), "%s: fence %d after a failed copy "
              "gave %d (%s), not -EIO naming the tensor", mode, k + 1, r, ck_err_msg(&f));
    }
    ck_client_state st;
    CHECK(ck_client_poll(sv, &st, &err) == -EIO && st == CK_CLIENT_FAILED, "%s: poll after "
          "a failed lazy save says %s", mode, kc_state_name(st));
    ck_client_save_free(sv);
    kc_part_free(&part);

    /* A call before the fence fences first: poll right after lazy submit sees the part
     * staged (or further), never a copy in progress. */
    REQUIRE(kc_begin(e.cl[0], &sv, "lazy-c", 42, &mesh, 0, tensors, NT, &kc_job, &err) == 0,
            "%s: begin: %s", mode, ck_err_msg(&err));
    kc_declare(sv, &mesh, 0, tensors, NT, &part, true);
    REQUIRE(ck_client_submit(sv, &kc_lazy, &err) == 0, "%s: lazy submit: %s", mode, ck_err_msg(&err));
    CHECK(ck_client_poll(sv, &st, &err) == 0 && kc_state_in_flight_or_done(st),
          "%s: poll before the fence says %s", mode, kc_state_name(st));
    REQUIRE(ck_client_commit(sv, &err) == 0, "%s: commit: %s", mode, ck_err_msg(&err));
    CHECK(ck_client_wait(sv, CK_CLIENT_COMMITTED, &err) == 0, "%s: wait: %s", mode, ck_err_msg(&err));
    ck_client_save_free(sv);
    kc_part_free(&part);
    CHECK(tl_verify_deep(e.root, "lazy-c", KC_SEED) == 0, "%s: lazy-c is wrong", mode);

    /* Rank 0's commit while the copy runs does not wait for it: the fill blocks until
     * the commit has returned (a commit that waited would never return: the watchdog),
     * and the copier then asks for the commit itself. */
    REQUIRE(kc_begin(e.cl[0], &sv, "lazy-d", 43, &mesh, 0, tensors, NT, &kc_job, &err) == 0,
            "%s: begin: %s", mode, ck_err_msg(&err));
    kc_declare(sv, &mesh, 0, tensors, NT, &part, false);
    gated g = { .inner = &part.src[0], .lock = PTHREAD_MUTEX_INITIALIZER,
                .cv = PTHREAD_COND_INITIALIZER };
    REQUIRE(ck_client_shard_fill(sv, "t0", gated_fill, &g, &err) == 0, "%s", ck_err_msg(&err));
    REQUIRE(ck_client_submit(sv, &kc_lazy, &err) == 0, "%s: lazy submit: %s", mode, ck_err_msg(&err));
    REQUIRE(ck_client_commit(sv, &err) == 0, "%s: commit during the copy: %s", mode,
            ck_err_msg(&err));
    pthread_mutex_lock(&g.lock);
    g.open = true;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.lock);
    CHECK(ck_client_wait(sv, CK_CLIENT_COMMITTED, &err) == 0, "%s: wait after a commit asked during the copy: %s",
          mode, ck_err_msg(&err));
    ck_client_save_free(sv);
    kc_part_free(&part);
    CHECK(tl_verify_deep(e.root, "lazy-d", KC_SEED) == 0, "%s: lazy-d is wrong", mode);

    uint64_t h = kc_digest(e.root, "lazy-a");
    kc_close(&e);
    kc_remove(&e);
    return h;
}

int main(void)
{
    return kc_both_modes(run, true, "lazy saves: the fence waits for the copy, the bytes are "
                         "the sources' at the fence, a failed copy's fence returns its error; "
                         "both modes");
}
