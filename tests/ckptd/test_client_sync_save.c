/* Client API, synchronous saves (ck_client_submit (SYNC)), embedded and through ckptd.
 *
 * sync submit returns once the rank's part is durable: poll says DURABLE (or further)
 * right after it, and sources overwritten with junk and freed then leave the
 * checkpoint holding the originals. That holds on two ranks sharing a save, with
 * shards given by address (embedded, the engine reads them itself, with no staging)
 * and with fills (the staging path). Both modes commit the same checkpoint.
 *
 * Embedded, a part given up while its writes hang (the storage stalls past the
 * engine's limits) is never read again: sync submit fails, the test unmaps
 * the sources, the storage comes back, and the engine's later reads of those sources
 * are refused (a read of unmapped memory would kill the test); the save fails and
 * nothing is committed. */
#include "kc_testlib.h"

static const kc_tensor tensors[] = {
    { CK_F32, 2, { 4099, 257 }, "S(0)" },
    { CK_F64, 1, { 5003 }, "S(0)" },
    { CK_BF16, 3, { 3, 5, 7 }, "R" },
};
#define NT 3

static void save_sync_durable(kc_env *e, const char *name, uint64_t step, bool memory)
{
    const char *mode = kc_mode(e);
    ck_mesh mesh;
    char dims[8];
    snprintf(dims, sizeof dims, "%llu", (unsigned long long)e->world);
    REQUIRE(ck_mesh_parse(dims, NULL, &mesh, NULL) == 0, "mesh");
    ck_err err = { 0 };
    ck_client_save *sv[KC_MAX_WORLD];
    for (uint64_t r = 0; r < e->world; r++) {
        kc_part part = { 0 };
        REQUIRE(kc_begin(e->cl[r], &sv[r], name, step, &mesh, r, tensors, NT, &kc_job, &err) == 0,
                "%s: rank %llu: begin: %s", mode, (unsigned long long)r, ck_err_msg(&err));
        kc_declare(sv[r], &mesh, r, tensors, NT, &part, memory);
        REQUIRE(ck_client_submit(sv[r], &kc_sync, &err) == 0, "%s: %s: rank %llu: sync submit: %s",
                mode, name, (unsigned long long)r, ck_err_msg(&err));
        ck_client_state st;
        CHECK(ck_client_poll(sv[r], &st, &err) == 0 &&
              (st == CK_CLIENT_DURABLE || st == CK_CLIENT_COMMITTED),
              "%s: %s: rank %llu: right after sync submit the part is %s, not durable", mode,
              name, (unsigned long long)r, kc_state_name(st));
        for (int t = 0; t < NT; t++)
            if (part.buf[t])
                memset(part.buf[t], 0x5a, part.bytes[t]);
        kc_part_free(&part);
    }
    REQUIRE(ck_client_commit(sv[0], &err) == 0, "%s: %s: commit: %s", mode, name,
            ck_err_msg(&err));
    CHECK(ck_client_wait(sv[0], CK_CLIENT_COMMITTED, &err) == 0, "%s: %s: wait: %s", mode, name, ck_err_msg(&err));
    for (uint64_t r = 0; r < e->world; r++)
        ck_client_save_free(sv[r]);
    CHECK(tl_verify_deep(e->root, name, KC_SEED) == 0, "%s: %s does not hold the sources "
          "as they were when sync submit was called", mode, name);
}

static uint64_t run(bool connected)
{
    kc_env e;
    kc_open(&e, connected, "kcsync", 2, NULL, NULL);
    save_sync_durable(&e, "sync-a", 50, true);
    save_sync_durable(&e, "sync-b", 51, false);
    uint64_t h = kc_digest(e.root, "sync-a") ^ kc_digest(e.root, "sync-b");
    kc_close(&e);
    kc_remove(&e);
    return h;
}

/* ---- storage that hangs: the real engine, with data writes held at a gate ---- */

static struct ck_engine_ops gate_ops;
static ck_engine gate_engine = { .ops = &gate_ops };
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static bool gate_open;

static int gate_submit(ck_ioq *q, const ck_io *ios, unsigned n)
{
    bool writes = false;
    for (unsigned i = 0; i < n; i++)
        writes |= ios[i].write && !ios[i].fsync;
    pthread_mutex_lock(&gate_mu);
    while (writes && !gate_open)
        pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
    return ck_engine_default()->ops->ioq_submit(q, ios, n);
}

static void given_up_part_never_read(void)
{
    gate_ops = *ck_engine_default()->ops;
    gate_ops.ioq_submit = gate_submit;
    gate_ops.destroy = NULL;
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "kcsynchang");
    ck_client_opts o = { .embedded = true, .engine = &gate_engine, .writers = 2,
                         .hash_threads = 2, .part_timeout = 1, .dead_after = 1 };
    ck_client *cl;
    ck_err err = { 0 };
    REQUIRE(ck_client_open(&cl, root, &o, &err) == 0, "open: %s", ck_err_msg(&err));
    ck_mesh mesh;
    REQUIRE(ck_mesh_parse("1", NULL, &mesh, NULL) == 0, "mesh");
    /* More 4 MiB blocks than the writer's buffers hold, so that most are read after
     * the gate opens. */
    uint64_t shape[2] = { 24, 1u << 20 };
    size_t bytes = 24u << 22;
    uint8_t *src = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(src != MAP_FAILED, "mmap");
    memset(src, 0x11, bytes);
    ck_client_save *sv;
    ck_placement pl[1];
    REQUIRE(ck_placements_parse("R", 1, 2, pl, &err) == 0, "%s", ck_err_msg(&err));
    REQUIRE(kc_begin1(cl, &sv, "sync-hang", 1, &mesh, 0, "w", CK_F32, 2, shape, pl, &kc_job,
                      &err) == 0 && ck_client_shard(sv, "w", src, &err) == 0, "begin: %s",
            ck_err_msg(&err));
    int r = ck_client_submit(sv, &kc_sync, &err);
    CHECK(r < 0 && strstr(ck_err_msg(&err), "sync-hang"), "sync submit on storage that hangs "
          "returned %d (%s), not an error naming the save", r, ck_err_msg(&err));
    printf("sync submit on storage that hangs: %s\n", ck_err_msg(&err));
    munmap(src, bytes);             /* the caller has its memory back */
    pthread_mutex_lock(&gate_mu);
    gate_open = true;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
    ck_client_save_free(sv);
    ck_client_close(cl);            /* waits for the engine: its late reads were refused */
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/sync-hang", root);
    CHECK(access(path, F_OK) != 0, "a save given up was committed after all (%s)", path);
    if (!tl_failures)
        tl_rmtree(root);
}

int main(void)
{
    int rc = kc_both_modes(run, true, "sync submit: durable when it returns, the sources free "
                           "then; two ranks, by address and by fill; both modes");
    given_up_part_never_read();
    if (tl_failures)
        return 1;
    printf("ok: embedded, a part given up while its writes hang is never read again\n");
    return rc;
}
