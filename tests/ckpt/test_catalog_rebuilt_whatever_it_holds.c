/* The catalog is rebuilt from the directories whatever the old one holds, and the old
 * one is kept aside (issue 21, defect 7; docs/FORMAT.md, "The catalog"): a record with
 * an unknown major version or random bytes in its header, a file that is not LMDB at
 * all, a FIFO, a link to a file outside the root, and a lock file planted as a link.
 * Both ways in: ck_catalog_rebuild (ckpt-inspect --rebuild-catalog) and ck_root_recover
 * (ckptd's start). Each time: the rebuild succeeds and says so in its log, the new
 * catalog lists exactly the two committed checkpoints, ROOT/catalog.mdb.bad-* holds
 * the old file as it was (the same bytes, or the same FIFO or link), and nothing
 * outside the root changed. */
#include <lmdb.h>

#include "ck/catalog.h"
#include "outside_testlib.h"
#include "format/layout.h"

static char logbuf[1 << 14];

static void logger(void *arg, const char *msg)
{
    (void)arg;
    size_t n = strlen(logbuf);
    snprintf(logbuf + n, sizeof logbuf - n, "%s\n", msg);
}

/* Rewrites the record of checkpoint c in the catalog: its first bytes (the format
 * version) become head. */
static void bad_record(const char *root, const uint8_t head[4])
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", root, CK_CATALOG);
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_val k = { .mv_size = 1, .mv_data = "c" }, v;
    REQUIRE(mdb_env_create(&env) == 0 && mdb_env_set_maxdbs(env, 4) == 0 &&
            mdb_env_open(env, path, MDB_NOSUBDIR | MDB_NOLOCK, 0644) == 0 &&
            mdb_txn_begin(env, NULL, 0, &txn) == 0 &&
            mdb_dbi_open(txn, "checkpoints", 0, &dbi) == 0 && mdb_get(txn, dbi, &k, &v) == 0,
            "opening %s to damage it", path);
    uint8_t val[512];
    REQUIRE(v.mv_size <= sizeof val, "a record of %zu bytes", v.mv_size);
    memcpy(val, v.mv_data, v.mv_size);
    memcpy(val, head, 4);
    v.mv_data = val;
    REQUIRE(mdb_put(txn, dbi, &k, &v, 0) == 0 && mdb_txn_commit(txn) == 0, "rewriting c");
    mdb_env_close(env);
}

/* The fingerprint of ROOT/name as it is now (its bytes, or what it is). */
static void describe(const char *root, const char *name, char *out, size_t cap)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", root, name);
    struct stat st;
    REQUIRE(lstat(p, &st) == 0, "lstat %s", p);
    char target[PATH_MAX] = "";
    if (S_ISLNK(st.st_mode))
        REQUIRE(readlink(p, target, sizeof target - 1) > 0, "readlink %s", p);
    snprintf(out, cap, "%o %lld %016llx %s", (unsigned)(st.st_mode & S_IFMT),
             (long long)st.st_size, S_ISREG(st.st_mode) ? (unsigned long long)ol_fnv(p) : 0ull,
             target);
}

/* The kept copy: the one ROOT entry named FILE.bad-*; its name into kept. */
static bool find_kept(const char *root, const char *file, char *kept, size_t cap)
{
    DIR *d = opendir(root);
    struct dirent *de;
    int n = 0;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s.bad-", file);
    while (d && (de = readdir(d)))
        if (!strncmp(de->d_name, prefix, strlen(prefix)) && n++ == 0)
            snprintf(kept, cap, "%s", de->d_name);
    if (d)
        closedir(d);
    return n == 1;
}

static void drop_kept(const char *root)
{
    DIR *d = opendir(root);
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strstr(de->d_name, ".bad-")) {
            char p[PATH_MAX + 256];
            snprintf(p, sizeof p, "%s/%s", root, de->d_name);
            unlink(p);
        }
    if (d)
        closedir(d);
}

enum { UNKNOWN_MAJOR, RANDOM_HEADER, NOT_LMDB, FIFO, LINK_OUT, LOCK_LINK, NKINDS };
static const char *const kinds[] = { "a record of major version 99",
                                     "random bytes in a record's header",
                                     "a file that is not LMDB", "a FIFO",
                                     "a link to a file outside the root",
                                     "a lock file that is a link outside the root" };

static void damage(const char *root, const char *home, int kind)
{
    char cat[PATH_MAX + 32], out[PATH_MAX + 32];
    snprintf(cat, sizeof cat, "%s/%s", root, CK_CATALOG);
    snprintf(out, sizeof out, "%s/manifest.mdb", home);
    switch (kind) {
    case UNKNOWN_MAJOR: bad_record(root, (const uint8_t[]){ 99, 0, 1, 0 }); break;
    case RANDOM_HEADER: bad_record(root, (const uint8_t[]){ 0xcc, 0xbb, 0xad, 0x99 }); break;
    case NOT_LMDB: ol_write(cat, "random bytes where an LMDB meta page should be\n"); break;
    case FIFO: REQUIRE(unlink(cat) == 0 && mkfifo(cat, 0644) == 0, "mkfifo %s", cat); break;
    case LINK_OUT: REQUIRE(unlink(cat) == 0, "unlink"); ol_link(out, cat); break;
    case LOCK_LINK:
        snprintf(cat, sizeof cat, "%s/%s-lock", root, CK_CATALOG);
        unlink(cat);
        ol_link(out, cat);
        break;
    }
}

int main(void)
{
    char base[PATH_MAX], root[PATH_MAX], home[PATH_MAX];
    alarm(120);         /* a catalog that hangs its reader (a FIFO) fails here, soon */
    tl_tmpdir(base, sizeof base, "catbad");
    snprintf(root, sizeof root, "%s/root", base);
    snprintf(home, sizeof home, "%s/home", base);
    REQUIRE(mkdir(root, 0755) == 0, "mkdir %s", root);
    ol_outside(home);
    ck_err err = { 0 };
    REQUIRE(ol_save(root, "c", &err) == 0 && ol_save(root, "d", &err) == 0, "saves: %s",
            ck_err_msg(&err));
    char *before = ol_snapshot(home);
    for (int how = 0; how < 2; how++) {
        for (int k = 0; k < NKINDS; k++) {
            char ctx[160], was[PATH_MAX + 64], now[PATH_MAX + 64], kept[256];
            const char *file = k == LOCK_LINK ? CK_CATALOG "-lock" : CK_CATALOG;
            snprintf(ctx, sizeof ctx, "%s, catalog with %s", how ? "recovery" : "rebuild",
                     kinds[k]);
            damage(root, home, k);
            describe(root, file, was, sizeof was);
            logbuf[0] = '\0';
            ck_err_clear(&err);
            int r;
            if (how == 0) {
                ck_rebuild_report rep;
                r = ck_catalog_rebuild(root, &rep, logger, NULL, &err);
                CHECK(r < 0 || rep.added + rep.kept == 2, "%s: %zu added, %zu kept", ctx,
                      rep.added, rep.kept);
            } else {
                size_t removed;
                r = ck_root_recover(root, &removed, logger, NULL, &err);
            }
            CHECK(r == 0, "%s: %s", ctx, ck_err_msg(&err));
            CHECK(strstr(logbuf, "kept aside"), "%s: the log does not say where the old file "
                  "went:\n%s", ctx, logbuf);
            ck_cat_entry *e = NULL;
            size_t n = 0;
            ck_err_clear(&err);
            CHECK(ck_catalog_list(root, &e, &n, &err) == 0 && n == 2 && !strcmp(e[0].name, "c") &&
                  !strcmp(e[1].name, "d"), "%s: the new catalog lists %zu (%s)", ctx, n,
                  ck_err_msg(&err));
            free(e);
            if (find_kept(root, file, kept, sizeof kept)) {
                describe(root, kept, now, sizeof now);
                CHECK(!strcmp(was, now), "%s: the kept %s is not the old file (%s, was %s)",
                      ctx, kept, now, was);
            } else {
                CHECK(false, "%s: no single %s.bad-* kept aside", ctx, file);
            }
            ol_same(home, before, ctx);
            drop_kept(root);
        }
    }
    free(before);
    tl_rmtree(base);
    if (tl_failures)
        return 1;
    printf("ok: %d kinds of unreadable catalog x {rebuild, recovery}: rebuilt from the "
           "directories, the old file kept aside\n", NKINDS);
    return 0;
}
