/* Client API, back-pressure of ckptd's --staging limit (8 MiB here), and the same
 * saves embedded (which has no staging limit: only the double buffering bounds it).
 *
 *  - A part that can never fit (a world of one, and rank 1 of a world of two whose
 *    blob makes it too big): submit fails with an error naming the part's bytes
 *    and the limit; rank 0 of the pair gets the error from wait; no hang, nothing
 *    visible, and the daemon goes on serving.
 *  - Two parts of 6 MiB: client X is admitted and holds its staging (its shard fill
 *    blocks), so client Y's submit waits: ckptd's STATUS shows one part waiting
 *    and Y has not returned. Once X's fill goes on and its part drains, Y is admitted,
 *    and both commit with the formula's bytes.
 *  - One client, two 6 MiB saves back to back: the second waits for the first's drain
 *    and succeeds.
 * The checkpoints committed are the same in both modes. */
#include <stdatomic.h>

#include "kc_testlib.h"

#define STAGING (8ull << 20)

static const kc_tensor six_mib[] = {
    { CK_F32, 2, { 1536, 1024 }, "R" },
};
static const kc_tensor small_pair[] = {
    { CK_F32, 2, { 64, 33 }, "S(0)" },
};

/* ---- a part that can never fit ---- */

static void never_fits(kc_env *e)
{
    const char *mode = kc_mode(e);
    ck_err err = { 0 };
    ck_mesh m1, m2;
    ck_mesh_parse("1", NULL, &m1, NULL);
    ck_mesh_parse("2", NULL, &m2, NULL);
    static const kc_tensor nine_mib[] = { { CK_F32, 2, { 2304, 1024 }, "R" } };
    kc_part p = { 0 };
    ck_client_save *sv;
    REQUIRE(kc_begin(e->cl[0], &sv, "huge", 1, &m1, 0, nine_mib, 1, &kc_job, &err) == 0, "begin: %s",
            ck_err_msg(&err));
    kc_declare(sv, &m1, 0, nine_mib, 1, &p, false);
    int rc = ck_client_submit(sv, &kc_copy, &err);
    char want[64];
    snprintf(want, sizeof want, "%llu", STAGING);
    CHECK(rc < 0, "%s: a 9 MiB part was taken by a ckptd of --staging 8MiB", mode);
    CHECK(rc >= 0 || (strstr(ck_err_msg(&err), want) && strstr(ck_err_msg(&err), "9437184") &&
                      strstr(ck_err_msg(&err), "never fit")),
          "%s: the error does not name the part's 9437184 bytes and the %s limit: \"%s\"",
          mode, want, ck_err_msg(&err));
    int code = rc;
    memset(&err, 0, sizeof err);
    CHECK(ck_client_wait(sv, CK_CLIENT_COMMITTED, &err) == code, "%s: wait after the refusal: %s", mode,
          ck_err_msg(&err));
    ck_client_save_free(sv);

    /* Rank 1 of two brings a 9 MiB blob; rank 0 fits. Both hear of it. */
    ck_client_save *pv[2];
    kc_part pp[2] = { 0 };
    static uint8_t blob[9u << 20];
    int async_rc[2];
    for (uint64_t r = 0; r < 2; r++) {
        REQUIRE(kc_begin(e->cl[r], &pv[r], "huge-pair", 2, &m2, r, small_pair, 1, &kc_job, &err) == 0,
                "begin: %s", ck_err_msg(&err));
        kc_declare(pv[r], &m2, r, small_pair, 1, &pp[r], false);
        if (r == 1)
            REQUIRE(ck_client_blob(pv[r], "opt", blob, sizeof blob, &err) == 0, "blob: %s",
                    ck_err_msg(&err));
        memset(&err, 0, sizeof err);
        async_rc[r] = ck_client_submit(pv[r], &kc_copy, &err);
    }
    CHECK(async_rc[0] == 0, "%s: rank 0's small part was refused", mode);
    CHECK(async_rc[1] < 0 && strstr(ck_err_msg(&err), "rank 1") && strstr(ck_err_msg(&err), want),
          "%s: rank 1's part with a 9 MiB blob: %d \"%s\"", mode, async_rc[1], ck_err_msg(&err));
    if (async_rc[0] == 0)
        ck_client_commit(pv[0], &err);
    for (uint64_t r = 0; r < 2; r++) {
        memset(&err, 0, sizeof err);
        rc = ck_client_wait(pv[r], CK_CLIENT_COMMITTED, &err);
        CHECK(rc < 0 && strstr(ck_err_msg(&err), "never fit"), "%s: rank %llu: wait: %d \"%s\"",
              mode, (unsigned long long)r, rc, ck_err_msg(&err));
        ck_client_save_free(pv[r]);
        kc_part_free(&pp[r]);
    }
    CHECK(!kd_exists(e->root, "huge") && !kd_exists(e->root, "huge-pair"),
          "%s: a refused save is visible", mode);
}

/* ---- X holds its staging, Y waits ---- */

typedef struct holder {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool filling, go;
    ck_synth_src *src;
} holder;

static int held_fill(void *arg, uint64_t off, void *dst, size_t len)
{
    holder *h = arg;
    pthread_mutex_lock(&h->mu);
    h->filling = true;
    pthread_cond_broadcast(&h->cv);
    while (!h->go)
        pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
    return ck_synth_fill(h->src, off, dst, len);
}

typedef struct saver_thread {
    ck_client_save *sv;
    ck_err err;
    int rc;
    atomic_bool returned;
} saver_thread;

static void *save_async_thread(void *arg)
{
    saver_thread *t = arg;
    t->rc = ck_client_submit(t->sv, &kc_copy, &t->err);
    atomic_store(&t->returned, true);
    return NULL;
}

static uint64_t held_and_waiting(kc_env *e)
{
    const char *mode = kc_mode(e);
    ck_err err = { 0 };
    ck_mesh m1;
    ck_mesh_parse("1", NULL, &m1, NULL);
    holder h = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
    kc_part px = { 0 }, py = { 0 };
    saver_thread x = { 0 }, y = { 0 };
    REQUIRE(kc_begin(e->cl[0], &x.sv, "bp-x", 3, &m1, 0, six_mib, 1, &kc_job, &err) == 0, "begin: %s",
            ck_err_msg(&err));
    REQUIRE(kc_begin(e->cl[1], &y.sv, "bp-y", 4, &m1, 0, six_mib, 1, &kc_job, &err) == 0, "begin: %s",
            ck_err_msg(&err));
    kc_declare(x.sv, &m1, 0, six_mib, 1, &px, false);
    kc_declare(y.sv, &m1, 0, six_mib, 1, &py, false);
    h.src = &px.src[0];
    REQUIRE(ck_client_shard_fill(x.sv, "t0", held_fill, &h, &err) == 0, "fill: %s",
            ck_err_msg(&err));
    pthread_t tx, ty;
    REQUIRE(pthread_create(&tx, NULL, save_async_thread, &x) == 0, "thread");
    pthread_mutex_lock(&h.mu);
    while (!h.filling)
        pthread_cond_wait(&h.cv, &h.mu);
    pthread_mutex_unlock(&h.mu);
    /* X is admitted and copying: 6 of the 8 MiB are X's until its part drains. */
    REQUIRE(pthread_create(&ty, NULL, save_async_thread, &y) == 0, "thread");
    if (e->connected) {
        double t0 = kd_now();
        ck__proto_status st = kc_status(e->d.sock);
        while (st.waiting == 0 && !atomic_load(&y.returned) && kd_now() - t0 < 30) {
            kd_sleep_ms(2);
            st = kc_status(e->d.sock);
        }
        CHECK(st.waiting == 1 && !atomic_load(&y.returned), "%s: Y's 6 MiB part was not held "
              "back while X holds 6 of the 8 MiB of staging (%u waiting, Y %s)", mode,
              st.waiting, atomic_load(&y.returned) ? "returned" : "still in submit");
        CHECK(st.staging_used <= st.staging_limit && st.staging_limit == STAGING,
              "%s: staging %llu used of %llu", mode, (unsigned long long)st.staging_used,
              (unsigned long long)st.staging_limit);
    } else {
        /* No limit embedded: Y goes through while X is held. */
        pthread_join(ty, NULL);
        CHECK(y.rc == 0, "%s: Y: submit: %s", mode, ck_err_msg(&y.err));
    }
    pthread_mutex_lock(&h.mu);
    h.go = true;
    pthread_cond_broadcast(&h.cv);
    pthread_mutex_unlock(&h.mu);
    pthread_join(tx, NULL);
    if (e->connected)
        pthread_join(ty, NULL);
    CHECK(x.rc == 0, "%s: X: submit: %s", mode, ck_err_msg(&x.err));
    CHECK(y.rc == 0, "%s: Y, admitted after X drained: submit: %s", mode,
          ck_err_msg(&y.err));
    uint64_t hsh = 0xcbf29ce484222325ull;
    saver_thread *both[2] = { &x, &y };
    const char *names[2] = { "bp-x", "bp-y" };
    for (int i = 0; i < 2; i++) {
        if (both[i]->rc == 0) {
            CHECK(ck_client_commit(both[i]->sv, &err) == 0, "%s: %s: commit: %s", mode,
                  names[i], ck_err_msg(&err));
            CHECK(ck_client_wait(both[i]->sv, CK_CLIENT_COMMITTED, &err) == 0, "%s: %s: wait: %s", mode, names[i],
                  ck_err_msg(&err));
        }
        ck_client_save_free(both[i]->sv);
        CHECK(tl_verify_deep(e->root, names[i], KC_SEED) == 0, "%s: %s is bad", mode, names[i]);
        kc_fnv_u64(&hsh, kc_digest(e->root, names[i]));
    }
    kc_part_free(&px);
    kc_part_free(&py);
    return hsh;
}

/* ---- one client, two big saves back to back ---- */

static uint64_t back_to_back(kc_env *e)
{
    const char *mode = kc_mode(e);
    ck_err err = { 0 };
    ck_mesh m1;
    ck_mesh_parse("1", NULL, &m1, NULL);
    ck_client_save *sv[2];
    kc_part p[2] = { 0 };
    const char *names[2] = { "bb-1", "bb-2" };
    for (int i = 0; i < 2; i++) {
        REQUIRE(kc_begin(e->cl[0], &sv[i], names[i], (uint64_t)(5 + i), &m1, 0, six_mib, 1, &kc_job, &err) == 0, "begin: %s", ck_err_msg(&err));
        kc_declare(sv[i], &m1, 0, six_mib, 1, &p[i], false);
        CHECK(ck_client_submit(sv[i], &kc_copy, &err) == 0, "%s: %s: submit: %s", mode, names[i],
              ck_err_msg(&err));
        CHECK(ck_client_commit(sv[i], &err) == 0, "%s: %s: commit: %s", mode, names[i],
              ck_err_msg(&err));
    }
    /* Through ckptd the second was admitted only once the first's part was durable. */
    if (e->connected) {
        ck_client_state st = (ck_client_state)-1;
        CHECK(ck_client_poll(sv[0], &st, &err) == 0 && st >= CK_CLIENT_DURABLE,
              "%s: the second 6 MiB save was admitted while the first was %s", mode,
              kc_state_name(st));
    }
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < 2; i++) {
        CHECK(ck_client_wait(sv[i], CK_CLIENT_COMMITTED, &err) == 0, "%s: %s: wait: %s", mode, names[i],
              ck_err_msg(&err));
        ck_client_save_free(sv[i]);
        kc_part_free(&p[i]);
        CHECK(tl_verify_deep(e->root, names[i], KC_SEED) == 0, "%s: %s is bad", mode, names[i]);
        kc_fnv_u64(&h, kc_digest(e->root, names[i]));
    }
    return h;
}

static uint64_t run(bool connected)
{
    kc_env e;
    kc_open(&e, connected, "kcbp", 2, (const char *const[]){ "--staging", "8MiB", NULL }, NULL);
    if (connected)
        never_fits(&e);
    uint64_t h = held_and_waiting(&e);
    kc_fnv_u64(&h, back_to_back(&e));
    kc_close(&e);
    kc_remove(&e);
    return h;
}

int main(void)
{
    return kc_both_modes(run, false, "parts that can never fit refused with the sizes (every "
                         "rank told); a part waits while staging is full and commits once "
                         "room is made; both modes agree");
}
