/* Client API, double buffering and the async promise, embedded and through ckptd.
 *
 * Three saves of one rank, back to back, each from buffers in memory that are
 * overwritten with junk and freed as soon as its submit returns (ASan would see a
 * late read): every committed checkpoint holds the original bytes. Staging is
 * double-buffered, so the third submit may wait only until one of the first two
 * is DURABLE: when it returns, poll says so (an ordering, not a time).
 *
 * Embedded, the engine is wrapped in a gate that holds every data write: with the
 * first save's drain held, poll says STAGED, the second submit still returns (it
 * did not wait for the first's drain), and the third does not return until the gate
 * opens. Through ckptd the daemon's writes cannot be held, so only the ordering is
 * asserted there. Both modes commit the same three checkpoints. */
#include <stdatomic.h>

#include "kc_testlib.h"

/* ---- the gate: an engine whose queue submissions wait while it is closed ---- */

static struct {
    ck_engine base;
    ck_engine *inner;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool closed;
    unsigned held;             /* submissions waiting now */
} gate = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

#define IN gate.inner->ops

static int g_open(ck_engine *e, int d, const char *p, int f, unsigned m) { return IN->open(gate.inner, d, p, f, m); }
static int g_close(ck_engine *e, int fd) { return IN->close(gate.inner, fd); }
static int g_fallocate(ck_engine *e, int fd, uint64_t l) { return IN->fallocate(gate.inner, fd, l); }
static int g_fsync(ck_engine *e, int fd) { return IN->fsync(gate.inner, fd); }
static int g_mkdir(ck_engine *e, int d, const char *p, unsigned m) { return IN->mkdir(gate.inner, d, p, m); }
static int g_rename(ck_engine *e, int d, const char *a, const char *b) { return IN->rename(gate.inner, d, a, b); }
static int g_unlink(ck_engine *e, int d, const char *p) { return IN->unlink(gate.inner, d, p); }
static int g_rmdir(ck_engine *e, int d, const char *p) { return IN->rmdir(gate.inner, d, p); }
static int g_link(ck_engine *e, int da, const char *a, int d, const char *b) { return IN->link(gate.inner, da, a, d, b); }
static int g_step(ck_engine *e, const char *w) { return IN->step(gate.inner, w); }
static int g_ioq_open(ck_engine *e, unsigned d, const struct iovec *b, unsigned n, ck_ioq **q)
{
    return IN->ioq_open(gate.inner, d, b, n, q);
}
static int g_ioq_submit(ck_ioq *q, const ck_io *ios, unsigned n)
{
    pthread_mutex_lock(&gate.mu);
    gate.held++;
    while (gate.closed)
        pthread_cond_wait(&gate.cv, &gate.mu);
    gate.held--;
    pthread_mutex_unlock(&gate.mu);
    return IN->ioq_submit(q, ios, n);
}
static int g_ioq_reap(ck_ioq *q, ck_io_done *o, unsigned max, unsigned min) { return IN->ioq_reap(q, o, max, min); }
static void g_ioq_close(ck_ioq *q) { IN->ioq_close(q); }

static const struct ck_engine_ops gate_ops = {
    .open = g_open, .close = g_close, .fallocate = g_fallocate, .fsync = g_fsync,
    .mkdir = g_mkdir, .rename = g_rename, .unlink = g_unlink, .rmdir = g_rmdir, .link = g_link,
    .step = g_step, .ioq_open = g_ioq_open, .ioq_submit = g_ioq_submit, .ioq_reap = g_ioq_reap,
    .ioq_close = g_ioq_close,
};

static void gate_set(bool closed)
{
    pthread_mutex_lock(&gate.mu);
    gate.closed = closed;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
}

static unsigned gate_held(void)
{
    pthread_mutex_lock(&gate.mu);
    unsigned n = gate.held;
    pthread_mutex_unlock(&gate.mu);
    return n;
}

/* ---- the test ---- */

static const kc_tensor tensors[] = {
    { CK_F32, 2, { 1024, 1031 }, "R" },
    { CK_F64, 1, { 5003 }, "R" },
    { CK_BF16, 3, { 3, 5, 7 }, "R" },
};
#define NT 3

static const char *const names[3] = { "db-a", "db-b", "db-c" };

typedef struct third {
    ck_client_save *sv;
    ck_err err;
    int rc;
    atomic_bool returned;
} third;

static void *third_save(void *arg)
{
    third *t = arg;
    t->rc = ck_client_submit(t->sv, &kc_copy, &t->err);
    atomic_store(&t->returned, true);
    return NULL;
}

static ck_client_state state_of(const char *mode, ck_client_save *sv, const char *name)
{
    ck_client_state st = (ck_client_state)-1;
    ck_err err = { 0 };
    CHECK(ck_client_poll(sv, &st, &err) == 0, "%s: %s: poll: %s", mode, name, ck_err_msg(&err));
    return st;
}

/* Overwrites the part's buffers with junk, then frees them. */
static void junk_and_free(kc_part *p)
{
    for (int t = 0; t < NT; t++)
        for (uint64_t i = 0; i < p->bytes[t]; i++)
            p->buf[t][i] = (uint8_t)(0x5a ^ i);
    kc_part_free(p);
}

static uint64_t run(bool connected)
{
    kc_env e;
    gate.inner = ck_engine_default();
    gate.base.ops = &gate_ops;
    kc_open(&e, connected, "kcdbuf", 1, NULL, connected ? NULL : &gate.base);
    const char *mode = kc_mode(&e);
    ck_mesh mesh;
    REQUIRE(ck_mesh_parse("1", NULL, &mesh, NULL) == 0, "mesh");
    ck_err err = { 0 };
    ck_client_save *sv[3];
    kc_part parts[3] = { 0 };
    for (int i = 0; i < 3; i++) {
        REQUIRE(kc_begin(e.cl[0], &sv[i], names[i], (uint64_t)(30 + i), &mesh, 0, tensors, NT, &kc_job, &err) == 0, "%s: begin: %s", mode, ck_err_msg(&err));
        kc_declare(sv[i], &mesh, 0, tensors, NT, &parts[i], true);
    }
    if (!connected)
        gate_set(true);

    for (int i = 0; i < 2; i++) {
        REQUIRE(ck_client_submit(sv[i], &kc_copy, &err) == 0, "%s: %s: submit: %s", mode,
                names[i], ck_err_msg(&err));
        junk_and_free(&parts[i]);
        REQUIRE(ck_client_commit(sv[i], &err) == 0, "%s: %s: commit: %s", mode, names[i],
                ck_err_msg(&err));
        if (!connected) {
            /* The gate holds the drains: the second submit returned without them. */
            for (int j = 0; j <= i; j++)
                CHECK(state_of(mode, sv[j], names[j]) == CK_CLIENT_STAGED, "%s: %s is not "
                      "STAGED while its writes are held", mode, names[j]);
        } else {
            CHECK(kc_state_in_flight_or_done(state_of(mode, sv[i], names[i])), "%s: %s: a "
                  "bogus state after submit", mode, names[i]);
        }
    }

    third t = { .sv = sv[2] };
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, third_save, &t) == 0, "thread");
    if (!connected) {
        /* Both staging areas drain behind the gate: the third save must wait. Wait
         * until the writers sit at the gate, then look once more. */
        double t0 = kd_now();
        while (gate_held() == 0 && kd_now() - t0 < 30)
            kd_sleep_ms(1);
        CHECK(gate_held() > 0, "%s: no write reached the gate", mode);
        kd_sleep_ms(100);
        CHECK(!atomic_load(&t.returned), "%s: the third submit returned while both earlier "
              "saves still drained (double buffering holds two)", mode);
        gate_set(false);
    }
    pthread_join(th, NULL);
    REQUIRE(t.rc == 0, "%s: %s: submit: %s", mode, names[2], ck_err_msg(&t.err));
    ck_client_state a = state_of(mode, sv[0], names[0]), b = state_of(mode, sv[1], names[1]);
    CHECK(a >= CK_CLIENT_DURABLE || b >= CK_CLIENT_DURABLE, "%s: the third submit returned "
          "while %s was %s and %s was %s: it reused a staging area still draining", mode,
          names[0], kc_state_name(a), names[1], kc_state_name(b));
    CHECK(a != CK_CLIENT_FAILED && b != CK_CLIENT_FAILED, "%s: an earlier save failed", mode);
    junk_and_free(&parts[2]);
    REQUIRE(ck_client_commit(sv[2], &err) == 0, "%s: %s: commit: %s", mode, names[2],
            ck_err_msg(&err));

    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < 3; i++) {
        CHECK(ck_client_wait(sv[i], CK_CLIENT_COMMITTED, &err) == 0, "%s: %s: wait: %s", mode, names[i],
              ck_err_msg(&err));
        ck_client_save_free(sv[i]);
        CHECK(tl_verify_deep(e.root, names[i], KC_SEED) == 0, "%s: %s does not hold the bytes "
              "given to submit (junk written after it returned leaked in?)", mode,
              names[i]);
        kc_fnv_u64(&h, kc_digest(e.root, names[i]));
    }
    kc_close(&e);
    kc_remove(&e);
    return h;
}

int main(void)
{
    return kc_both_modes(run, false, "sources junked and freed right after submit, "
                         "checkpoints hold the originals; two saves in flight, the third "
                         "waits for a drain; both modes");
}
