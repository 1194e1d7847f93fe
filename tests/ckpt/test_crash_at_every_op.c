/* Crash consistency at every operation of a save, and every fault kind at every
 * operation: a save of checkpoint B next to a committed checkpoint A is stopped dead
 * (or failed with EIO, ENOSPC, a short write, a failed fsync) at operation i, for
 * every i. After each:
 *   - A is intact: it deep-verifies and holds the formula's bytes;
 *   - nothing partial is visible: ROOT holds A, and B only if B is complete;
 *   - a failed save (not a crash) cleaned up its .pending directory;
 *   - recovery (ck_root_recover) leaves no debris and a catalog that lists exactly
 *     the committed checkpoints; then B can be saved again.
 * Then the same for a removal of B beside A (ck_root_remove), at every operation and
 * with every fault kind: A is intact; B is either visible and whole (the removal
 * failed before its rename) or out of sight; a removal that met no fault succeeded;
 * recovery leaves no debris and a catalog listing exactly what is visible.
 * The "crash" leaves the page cache as it was, so this tests the order and atomicity
 * of what the save makes visible, not the loss of unsynced data on power failure. */
#include "ck/catalog.h"
#include "crash_testlib.h"
#include "format/catalog.h"
#include "format/layout.h"

static bool exists(const char *root, const char *name)
{
    char p[PATH_MAX];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", root, name);
    return stat(p, &st) == 0;
}

static size_t pending_count(const char *root)
{
    ck_scan sc;
    REQUIRE(ck_root_scan(root, &sc, NULL) == 0, "scan %s", root);
    size_t n = sc.n_pending;
    ck_scan_free(&sc);
    return n;
}

/* Everything ROOT shows must be A, B, the catalog, or .pending. */
static void check_visible(const char *root, const char *ctx)
{
    ck_scan sc;
    REQUIRE(ck_root_scan(root, &sc, NULL) == 0, "scan");
    for (size_t i = 0; i < sc.n_committed; i++)
        CHECK(!strcmp(sc.committed[i], "A") || !strcmp(sc.committed[i], "B"),
              "%s: unexpected %s", ctx, sc.committed[i]);
    ck_scan_free(&sc);
    DIR *d = opendir(root);
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *n = de->d_name;
        bool ok = !strcmp(n, ".") || !strcmp(n, "..") || !strcmp(n, "A") || !strcmp(n, "B") ||
                  !strcmp(n, CK_PENDING) || !strcmp(n, CK_CATALOG) ||
                  !strcmp(n, CK_CATALOG "-lock");
        CHECK(ok, "%s: stray entry %s in the root", ctx, n);
    }
    closedir(d);
}

/* Recovery leaves no debris and a catalog listing exactly A, and B if visible. */
static void check_recovered(const char *root, const char *ctx)
{
    ck_err err = { 0 };
    size_t removed;
    REQUIRE(ck_root_recover(root, &removed, NULL, NULL, &err) == 0, "%s: recover: %s", ctx,
            ck_err_msg(&err));
    CHECK(pending_count(root) == 0, "%s: recovery left debris", ctx);
    ck_cat_entry *ents;
    size_t n;
    REQUIRE(ck_catalog_list(root, &ents, &n, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(n == (exists(root, "B") ? 2u : 1u), "%s: catalog lists %zu", ctx, n);
    free(ents);
}

static void drop_b(const char *root)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/B", root);
    tl_rmtree(p);
    ck__catalog_del(root, "B", NULL);
}

int main(void)
{
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "crash");
    ck_err err = { 0 };
    gen g;
    REQUIRE(save(root, "A", NULL, &g, &err) == 0, "save A: %s", ck_err_msg(&err));

    /* Count the operations of a clean save of B. */
    ck_engine *counter;
    REQUIRE(ck_engine_fault_new(ck_engine_default(), (ck_fault){ CK_FAULT_NONE, 0 }, &counter) == 0,
            "engine");
    REQUIRE(save(root, "B", counter, &g, &err) == 0, "save B: %s", ck_err_msg(&err));
    uint64_t nops = ck_engine_fault_ops(counter);
    ck_engine_destroy(counter);
    drop_b(root);
    REQUIRE(nops > 20, "a save of 3 tensors took only %llu operations", (unsigned long long)nops);

    static const struct { ck_fault_kind kind; const char *name; } kinds[] = {
        { CK_FAULT_CRASH, "crash" }, { CK_FAULT_EIO, "eio" }, { CK_FAULT_ENOSPC, "enospc" },
        { CK_FAULT_SHORT, "short" }, { CK_FAULT_FSYNC, "fsync" },
    };
    uint64_t committed_after_fault = 0, failed = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        for (uint64_t i = 0; i <= nops; i++) {
            char ctx[64];
            snprintf(ctx, sizeof ctx, "%s@%llu", kinds[k].name, (unsigned long long)i);
            ck_engine *fe;
            REQUIRE(ck_engine_fault_new(ck_engine_default(), (ck_fault){ kinds[k].kind, i }, &fe) == 0,
                    "engine");
            ck_err_clear(&err);
            int r = save(root, "B", fe, &g, &err);
            bool fired = ck_engine_fault_fired(fe);
            ck_engine_destroy(fe);

            if (!fired || kinds[k].kind == CK_FAULT_SHORT)
                CHECK(r == 0, "%s: save failed without a fault that stops it: %s", ctx,
                      ck_err_msg(&err));
            if (r < 0) {
                failed++;
                CHECK(err.msg[0] != '\0', "%s: an error without a message", ctx);
            }
            check_visible(root, ctx);
            CHECK(tl_verify_deep(root, "A", seed) == 0, "%s: A was damaged", ctx);
            if (exists(root, "B")) {
                /* Visible means complete, even if the save reported an error after
                 * the commit point (root fsync, catalog). */
                CHECK(tl_verify_deep(root, "B", seed) == 0, "%s: B visible but bad", ctx);
                if (r < 0)
                    committed_after_fault++;
            } else {
                CHECK(r < 0, "%s: save returned success but B is not there", ctx);
            }
            if (kinds[k].kind != CK_FAULT_CRASH)
                CHECK(pending_count(root) == 0, "%s: a failed save left .pending debris", ctx);

            check_recovered(root, ctx);
            drop_b(root);
            if (tl_failures > 20)
                break;
        }
    }
    /* After all that, B saves cleanly. */
    REQUIRE(save(root, "B", NULL, &g, &err) == 0, "final save B: %s", ck_err_msg(&err));
    CHECK(tl_verify_deep(root, "B", seed) == 0, "final B");

    /* Removals of B, stopped or failed at each of their operations. */
    REQUIRE(ck_engine_fault_new(ck_engine_default(), (ck_fault){ CK_FAULT_NONE, 0 }, &counter) == 0,
            "engine");
    REQUIRE(ck_root_remove(root, "B", counter, &err) == 0, "remove B: %s", ck_err_msg(&err));
    uint64_t rm_ops = ck_engine_fault_ops(counter);
    ck_engine_destroy(counter);
    REQUIRE(!exists(root, "B") && pending_count(root) == 0, "a clean removal left B or debris");
    uint64_t rm_intact = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        for (uint64_t i = 0; i <= rm_ops; i++) {
            char ctx[64];
            snprintf(ctx, sizeof ctx, "remove, %s@%llu", kinds[k].name, (unsigned long long)i);
            if (!exists(root, "B"))
                REQUIRE(save(root, "B", NULL, &g, &err) == 0, "%s: save B: %s", ctx,
                        ck_err_msg(&err));
            ck_engine *fe;
            REQUIRE(ck_engine_fault_new(ck_engine_default(), (ck_fault){ kinds[k].kind, i }, &fe) == 0,
                    "engine");
            ck_err_clear(&err);
            int r = ck_root_remove(root, "B", fe, &err);
            bool fired = ck_engine_fault_fired(fe);
            ck_engine_destroy(fe);
            CHECK(fired || r == 0, "%s: removal failed without a fault: %s", ctx, ck_err_msg(&err));
            CHECK(r == 0 || err.msg[0] != '\0', "%s: an error without a message", ctx);
            check_visible(root, ctx);
            CHECK(tl_verify_deep(root, "A", seed) == 0, "%s: A was damaged", ctx);
            if (exists(root, "B")) {
                CHECK(r < 0, "%s: removal returned success but B is still there", ctx);
                CHECK(tl_verify_deep(root, "B", seed) == 0, "%s: B visible but not whole", ctx);
                rm_intact++;
            }
            check_recovered(root, ctx);
            if (tl_failures > 20)
                break;
        }
    }
    tl_rmtree(root);
    if (tl_failures)
        return 1;
    printf("ok: %llu operations x %zu fault kinds; %llu saves failed cleanly, %llu committed "
           "despite a late fault\n", (unsigned long long)nops, sizeof kinds / sizeof kinds[0],
           (unsigned long long)failed, (unsigned long long)committed_after_fault);
    printf("ok: removals: %llu operations x %zu fault kinds; B left visible and whole by %llu\n",
           (unsigned long long)rm_ops, sizeof kinds / sizeof kinds[0],
           (unsigned long long)rm_intact);
    return 0;
}
