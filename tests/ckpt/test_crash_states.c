/* Power-loss crash states of a save and of a removal, as the ALICE and CrashMonkey
 * studies build them.
 *
 * A save of checkpoint B, into an empty root and next to a committed checkpoint A, and
 * a removal of B (ck_root_remove) next to A, are recorded through the recording engine
 * (every create, mkdir, rename, unlink, rmdir, fallocate, write with its bytes and
 * fsync, in order; LMDB's manifest pages at the moment the core fsyncs it). For every
 * prefix of the record, i.e. a power cut after operation k, crash states are built
 * from what POSIX promises and no more (docs/decisions/0044-power-loss-crash-model.md):
 *   - a data write or fallocate is durable once its file was fsynced after it; any
 *     subset of the others is lost (the bytes stay what they were: zeros);
 *   - a directory operation (create, mkdir, rename) is durable once its directory was
 *     fsynced after it; of the others, each directory keeps some prefix of its own
 *     operations (a journal keeps a directory's operations in order), and an operation
 *     kept forces what it needs (the parent or the source it names was created);
 *   - a file whose create was lost is gone with its data;
 *   - an unlink or rmdir is a directory operation of the parent it removes from; a
 *     directory whose rmdir is kept is gone with whatever is left in it.
 * Each prefix gets the two extremes (every undurable operation lost; all kept) and
 * CK_CRASH_SAMPLES random states (default 3), seeded by CK_CRASH_SEED (default 1) and
 * the prefix, so a failure names a reproducible state. Each state is materialized in a
 * scratch root and checked: A (if any) deep-verifies; B is visible only if it deep-verifies; B
 * is visible once the root's fsync after the commit rename is in the prefix (a save),
 * or gone once the fsync after its rename out of the root is (a removal); recovery
 * leaves no .pending debris, a catalog that lists exactly the visible checkpoints, and
 * no stray entries.
 */
#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck/catalog.h"
#include "crash_testlib.h"
#include "format/layout.h"

#define MAX_OBJ 256

typedef struct obj {
    int parent;                /* object index; -1 for the root */
    char name[CK_NAME_MAX + 32];
    bool dir;
    long created;              /* op index of its create or mkdir; -1: existed before */
    bool gone;                 /* while building: unlinked or removed by now */
} obj;

typedef struct model {
    const ck_rec_op *ops;
    size_t nops;
    obj objs[MAX_OBJ];         /* initial places */
    int nobj;
    int *op_obj;               /* the object an op is about */
    int *op_dir;               /* directory ops: the directory whose entries change */
    int *to_parent;            /* rename: the new parent */
    char **to_name;
    size_t commit_rename, committed;   /* the rename; the op after the root's fsync */
    size_t cat_step;           /* the catalog's step: its LMDB commit follows it */
    obj cur[MAX_OBJ];          /* while building: the places at the current op */
} model;

static void obj_path(const obj *o, const bool *live, int i, char *buf, size_t len, bool *ok)
{
    if (i < 0) {
        buf[0] = '\0';
        return;
    }
    if (live && !live[i])
        *ok = false;
    obj_path(o, live, o[i].parent, buf, len, ok);
    size_t n = strlen(buf);
    snprintf(buf + n, len - n, "%s%s", n ? "/" : "", o[i].name);
}

static int parent_of(model *m, const char *rel, const char **leaf);

/* The object at rel; unknown, -2, or with make a directory that existed before. */
static int find(model *m, const char *rel, bool make)
{
    char p[PATH_MAX];
    obj *cur = m->cur;
    for (int i = 0; i < m->nobj; i++) {
        bool ok = true;
        obj_path(cur, NULL, i, p, sizeof p, &ok);
        if (ok && !cur[i].gone && !strcmp(p, rel))
            return i;
    }
    if (!make)
        return -2;
    const char *leaf;
    int pi = parent_of(m, rel, &leaf);
    REQUIRE(m->nobj < MAX_OBJ, "too many objects");
    int i = m->nobj++;
    cur[i] = (obj){ .parent = pi, .created = -1, .dir = true };
    snprintf(cur[i].name, sizeof cur[i].name, "%s", leaf);
    m->objs[i] = cur[i];
    return i;
}

/* The parent object of rel (-1: the root; made if unknown) and rel's last name. */
static int parent_of(model *m, const char *rel, const char **leaf)
{
    const char *slash = strrchr(rel, '/');
    *leaf = slash ? slash + 1 : rel;
    if (!slash)
        return -1;
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%.*s", (int)(slash - rel), rel);
    return find(m, parent, true);
}

static const char *rel_of(const char *root, const char *path)
{
    size_t n = strlen(root);
    REQUIRE(!strncmp(path, root, n) && (path[n] == '/' || path[n] == '\0'),
            "%s is outside the root %s", path, root);
    return path[n] ? path + n + 1 : NULL;
}

/* Directory ops get a new object or move one; the others name one. */
static void build(model *m, const char *root)
{
    obj *cur = m->cur;
    m->op_obj = calloc(m->nops, sizeof *m->op_obj);
    m->op_dir = calloc(m->nops, sizeof *m->op_dir);
    m->to_parent = calloc(m->nops, sizeof *m->to_parent);
    m->to_name = calloc(m->nops, sizeof *m->to_name);
    m->commit_rename = m->committed = m->cat_step = SIZE_MAX;
    for (size_t k = 0; k < m->nops; k++) {
        const ck_rec_op *op = &m->ops[k];
        m->op_dir[k] = -2;
        if (op->kind == CK_REC_STEP && !strcmp(op->path, "catalog"))
            m->cat_step = k;
        if (op->kind == CK_REC_STEP)
            continue;
        const char *rel = rel_of(root, op->path);
        REQUIRE(op->kind != CK_REC_LINK, "op %zu (link on %s): links are not modelled", k,
                op->path);
        if (op->kind == CK_REC_UNLINK || op->kind == CK_REC_RMDIR) {
            int i = find(m, rel, true);
            m->op_obj[k] = i;
            m->op_dir[k] = cur[i].parent;
            cur[i].gone = true;
        } else if (op->kind == CK_REC_CREATE || op->kind == CK_REC_MKDIR) {
            REQUIRE(rel && find(m, rel, false) == -2, "op %zu creates %s twice", k, op->path);
            const char *leaf;
            int pi = parent_of(m, rel, &leaf);
            REQUIRE(m->nobj < MAX_OBJ, "too many objects");
            int i = m->nobj++;
            cur[i] = (obj){ .parent = pi, .dir = op->kind == CK_REC_MKDIR, .created = (long)k };
            snprintf(cur[i].name, sizeof cur[i].name, "%s", leaf);
            m->objs[i] = cur[i];
            m->op_obj[k] = i;
            m->op_dir[k] = pi;
        } else if (op->kind == CK_REC_RENAME) {
            int i = find(m, rel, true);
            const char *leaf;
            int pi = parent_of(m, rel_of(root, op->to), &leaf);
            m->op_obj[k] = i;
            m->op_dir[k] = pi;
            m->to_parent[k] = pi;
            m->to_name[k] = strdup(leaf);
            cur[i].parent = pi;
            snprintf(cur[i].name, sizeof cur[i].name, "%s", m->to_name[k]);
            if (pi == -1)
                m->commit_rename = k;
        } else {
            m->op_obj[k] = rel ? find(m, rel, true) : -1;
            if (op->kind == CK_REC_FSYNC && m->op_obj[k] == -1 && m->commit_rename != SIZE_MAX &&
                m->committed == SIZE_MAX)
                m->committed = k + 1;
        }
    }
}

static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Is op i (on object o, a file or a directory) made durable by an fsync of o before
 * op k? */
static bool synced_after(const model *m, size_t i, size_t k, int o)
{
    for (size_t j = i + 1; j < k; j++)
        if (m->ops[j].kind == CK_REC_FSYNC && m->op_obj[j] == o)
            return true;
    return false;
}

enum mode { ALL_LOST, ALL_KEPT, RANDOM };

/* Chooses which of ops [0, k) survive: keep[i]. */
static void choose(const model *m, size_t k, enum mode mode, uint64_t rng, bool *keep)
{
    /* directory ops: per directory, a prefix at least as long as its durable part */
    for (int d = -1; d < m->nobj; d++) {
        size_t durable = 0, total = 0;
        for (size_t i = 0; i < k; i++)
            if (m->op_dir[i] == d && m->op_dir[i] != -2) {
                total++;
                if (synced_after(m, i, k, d))
                    durable = total;
            }
        size_t c = mode == ALL_LOST ? durable : mode == ALL_KEPT ? total
                   : durable + (size_t)(mix(rng ^ (uint64_t)(d + 7) * 0x100000001b3ull) %
                                        (total - durable + 1));
        for (size_t i = 0, seen = 0; i < k; i++)
            if (m->op_dir[i] == d && m->op_dir[i] != -2)
                keep[i] = seen++ < c;
    }
    /* what a kept op needs: its parent made, its source made (journal order) */
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t i = 0; i < k; i++) {
            if (!keep[i] || m->op_dir[i] == -2)
                continue;
            int need[2] = { m->op_dir[i], m->ops[i].kind == CK_REC_RENAME ? m->op_obj[i] : -1 };
            for (int n = 0; n < 2; n++) {
                long c = need[n] >= 0 ? m->objs[need[n]].created : -1;
                if (c < 0 || keep[c])
                    continue;
                /* its directory keeps every op up to it */
                for (size_t j = 0; j <= (size_t)c; j++)
                    if (m->op_dir[j] == m->op_dir[c] && !keep[j])
                        keep[j] = changed = true;
            }
        }
    }
    /* data: durable, or by the mode */
    for (size_t i = 0; i < k; i++) {
        ck_rec_kind kd = m->ops[i].kind;
        if (kd != CK_REC_WRITE && kd != CK_REC_FALLOCATE)
            continue;
        keep[i] = synced_after(m, i, k, m->op_obj[i]) || mode == ALL_KEPT ||
                  (mode == RANDOM && (mix(rng ^ (i * 0x9E37ull)) & 1));
    }
}

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    REQUIRE(f && (n == 0 || fwrite(p, 1, n, f) == n) && fclose(f) == 0, "%s: write", path);
}

static void *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    REQUIRE(f, "%s", path);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(*n ? *n : 1);
    REQUIRE(p && fread(p, 1, *n, f) == *n, "%s: read", path);
    fclose(f);
    return p;
}

/* Builds the state: base, then the kept ops. */
static void materialize(const model *m, size_t k, const bool *keep, const char *base,
                        const char *dst, const void *cat_after, size_t cat_len, bool cat_new)
{
    tl_rmtree(dst);
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "cp -a '%s' '%s'", base, dst);
    REQUIRE(system(cmd) == 0, "%s", cmd);
    if (cat_new) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", dst, CK_CATALOG);
        write_file(p, cat_after, cat_len);
    }
    obj o[MAX_OBJ];
    bool live[MAX_OBJ];
    for (int i = 0; i < m->nobj; i++) {
        o[i] = m->objs[i];
        live[i] = o[i].created < 0;
    }
    char rel[PATH_MAX], p[2 * PATH_MAX], to[2 * PATH_MAX];
    /* Kept operations in order. Created objects are only placed here (built below);
     * those that existed before are moved and removed in the copy as they go. */
    for (size_t i = 0; i < k; i++) {
        if (!keep[i] || m->op_dir[i] == -2)
            continue;
        int x = m->op_obj[i];
        bool ok = true, before = o[x].created < 0;
        obj_path(o, live, x, rel, sizeof rel, &ok);
        snprintf(p, sizeof p, "%s/%s", dst, rel);
        if (m->ops[i].kind == CK_REC_RENAME) {
            o[x].parent = m->to_parent[i];
            snprintf(o[x].name, sizeof o[x].name, "%s", m->to_name[i]);
            obj_path(o, live, x, rel, sizeof rel, &ok);
            snprintf(to, sizeof to, "%s/%s", dst, rel);
            REQUIRE(!before || !ok || rename(p, to) == 0, "state: rename %s %s", p, to);
        } else if (m->ops[i].kind == CK_REC_UNLINK || m->ops[i].kind == CK_REC_RMDIR) {
            if (before && ok)
                tl_rmtree(p);
            live[x] = false;
        } else {
            live[x] = true;
        }
    }
    /* directories, parents first (a parent may come later in the list) */
    for (int pass = 0; pass < 4; pass++)
        for (int i = 0; i < m->nobj; i++) {
            bool ok = true;
            obj_path(o, live, i, rel, sizeof rel, &ok);
            if (ok && o[i].dir && o[i].created >= 0) {
                snprintf(p, sizeof p, "%s/%s", dst, rel);
                mkdir(p, 0755);
            }
        }
    for (int i = 0; i < m->nobj; i++) {
        bool ok = true;
        obj_path(o, live, i, rel, sizeof rel, &ok);
        if (!ok || o[i].dir || o[i].created < 0)
            continue;
        uint8_t *buf = NULL;
        size_t len = 0;
        for (size_t j = 0; j < k; j++) {
            const ck_rec_op *op = &m->ops[j];
            if (!keep[j] || m->op_obj[j] != i ||
                (op->kind != CK_REC_WRITE && op->kind != CK_REC_FALLOCATE))
                continue;
            size_t end = op->kind == CK_REC_WRITE ? op->off + op->len : op->len;
            if (end > len) {
                buf = realloc(buf, end);
                REQUIRE(buf, "oom");
                memset(buf + len, 0, end - len);
                len = end;
            }
            if (op->kind == CK_REC_WRITE)
                memcpy(buf + op->off, op->data, op->len);
        }
        snprintf(p, sizeof p, "%s/%s", dst, rel);
        write_file(p, buf, len);
        free(buf);
    }
}

static bool exists(const char *root, const char *name)
{
    char p[PATH_MAX];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", root, name);
    return stat(p, &st) == 0;
}

/* The three recorded scenarios. */
enum scene { SAVE_EMPTY, SAVE_BESIDE_A, REMOVE_BESIDE_A };

static const char *scene_name[] = { "empty root", "beside A", "removal beside A" };

/* What every state must show: A intact, B visible only whole, B committed or gone
 * once that is durable; then recovery leaves the visible checkpoints and nothing
 * else. */
static void check_state(const model *m, size_t k, const char *dir, enum scene sc_kind,
                        const char *ctx)
{
    bool with_a = sc_kind != SAVE_EMPTY;
    if (with_a)
        CHECK(tl_verify_deep(dir, "A", seed) == 0, "%s: A was damaged", ctx);
    CHECK(with_a || !exists(dir, "A"), "%s: A appeared", ctx);
    bool b = exists(dir, "B");
    unsigned expect = with_a + b;
    if (b)
        CHECK(tl_verify_deep(dir, "B", seed) == 0, "%s: B is visible but not whole", ctx);
    if (sc_kind != REMOVE_BESIDE_A && k >= m->committed)
        CHECK(b, "%s: B was committed (the root's fsync returned) but is gone", ctx);
    if (sc_kind == REMOVE_BESIDE_A && k >= m->committed)
        CHECK(!b, "%s: B's move out of the root was made durable, but B is back", ctx);
    ck_err err = { 0 };
    size_t removed;
    REQUIRE(ck_root_recover(dir, &removed, NULL, NULL, &err) == 0, "%s: recover: %s", ctx,
            ck_err_msg(&err));
    ck_scan sc;
    REQUIRE(ck_root_scan(dir, &sc, NULL) == 0, "%s: scan", ctx);
    CHECK(sc.n_pending == 0, "%s: recovery left %zu .pending entries", ctx, sc.n_pending);
    CHECK(sc.n_committed == expect, "%s: %zu checkpoints after recovery", ctx, sc.n_committed);
    ck_scan_free(&sc);
    ck_cat_entry *ents;
    size_t n;
    REQUIRE(ck_catalog_list(dir, &ents, &n, &err) == 0, "%s: %s", ctx, ck_err_msg(&err));
    CHECK(n == expect, "%s: the catalog lists %zu after recovery", ctx, n);
    free(ents);
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        const char *nm = de->d_name;
        CHECK(!strcmp(nm, ".") || !strcmp(nm, "..") || !strcmp(nm, "A") || !strcmp(nm, "B") ||
              !strcmp(nm, CK_PENDING) || !strncmp(nm, CK_CATALOG, strlen(CK_CATALOG)),
              "%s: stray entry %s in the root", ctx, nm);
    }
    if (d)
        closedir(d);
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : dflt;
}

typedef struct tally {
    uint64_t states, visible, prefixes;
} tally;

/* The removal's point of no return: the op after the first fsync of the directory
 * its rename moved B into. */
static size_t removal_durable(model *m)
{
    for (size_t k = 0; k < m->nops; k++)
        if (m->ops[k].kind == CK_REC_RENAME)
            for (size_t j = k + 1; j < m->nops; j++)
                if (m->ops[j].kind == CK_REC_FSYNC && m->op_obj[j] == m->to_parent[k])
                    return j + 1;
    return SIZE_MAX;
}

/* Records the scenario's operation on B, then checks the crash states of every
 * prefix. */
static void scenario(const char *top, const char *scratch, enum scene sc_kind, uint64_t samples,
                     uint64_t rseed, tally *t)
{
    char root[PATH_MAX + 16], base[PATH_MAX + 16], state[PATH_MAX + 16];
    snprintf(root, sizeof root, "%s/rec-%d", top, (int)sc_kind);
    snprintf(base, sizeof base, "%s/base", scratch);
    snprintf(state, sizeof state, "%s/state", scratch);
    tl_rmtree(base);
    REQUIRE(mkdir(root, 0755) == 0, "mkdir %s", root);
    ck_err err = { 0 };
    gen g;
    if (sc_kind != SAVE_EMPTY)
        REQUIRE(save(root, "A", NULL, &g, &err) == 0, "save A: %s", ck_err_msg(&err));
    if (sc_kind == REMOVE_BESIDE_A)
        REQUIRE(save(root, "B", NULL, &g, &err) == 0, "save B: %s", ck_err_msg(&err));
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "cp -a '%s' '%s'", root, base);
    REQUIRE(system(cmd) == 0, "%s", cmd);

    ck_engine *rec;
    REQUIRE(ck_engine_record_new(ck_engine_default(), &rec) == 0, "engine");
    if (sc_kind == REMOVE_BESIDE_A)
        REQUIRE(ck_root_remove(root, "B", rec, &err) == 0, "remove B: %s", ck_err_msg(&err));
    else
        REQUIRE(save(root, "B", rec, &g, &err) == 0, "save B: %s", ck_err_msg(&err));
    model m = { 0 };
    REQUIRE(ck_engine_record_ops(rec, &m.ops, &m.nops) == 0, "the record lost operations");
    char catp[PATH_MAX + 32];
    snprintf(catp, sizeof catp, "%s/%s", root, CK_CATALOG);
    size_t cat_len;
    void *cat_after = read_file(catp, &cat_len);
    build(&m, root);
    if (sc_kind == REMOVE_BESIDE_A)
        m.committed = removal_durable(&m);
    REQUIRE(m.committed != SIZE_MAX && m.cat_step != SIZE_MAX &&
            (sc_kind == REMOVE_BESIDE_A || m.commit_rename != SIZE_MAX),
            "%s: the record lacks its durable rename or its catalog step", scene_name[sc_kind]);

    size_t counts[CK_REC_STEP + 1] = { 0 };
    for (size_t i = 0; i < m.nops; i++)
        counts[m.ops[i].kind]++;
    printf("%s: recorded %zu operations: %zu creates, %zu mkdirs, %zu renames, %zu unlinks, "
           "%zu rmdirs, %zu fallocates, %zu writes, %zu fsyncs, %zu steps; %s after op %zu\n",
           scene_name[sc_kind], m.nops, counts[CK_REC_CREATE], counts[CK_REC_MKDIR],
           counts[CK_REC_RENAME], counts[CK_REC_UNLINK], counts[CK_REC_RMDIR],
           counts[CK_REC_FALLOCATE], counts[CK_REC_WRITE], counts[CK_REC_FSYNC],
           counts[CK_REC_STEP], sc_kind == REMOVE_BESIDE_A ? "gone" : "committed",
           m.committed - 1);

    bool *keep = calloc(m.nops + 1, sizeof *keep);
    REQUIRE(keep, "oom");
    for (size_t k = 0; k <= m.nops && tl_failures < 10; k++) {
        for (uint64_t s = 0; s < 2 + samples && tl_failures < 10; s++) {
            enum mode mode = s == 0 ? ALL_LOST : s == 1 ? ALL_KEPT : RANDOM;
            uint64_t rng = mix(rseed ^ mix(k << 20 ^ s ^ (uint64_t)sc_kind << 60));
            memset(keep, 0, (m.nops + 1) * sizeof *keep);
            choose(&m, k, mode, rng, keep);
            char ctx[160];
            snprintf(ctx, sizeof ctx, "%s: power cut after %zu ops, state %llu "
                     "(CK_CRASH_SEED=%llu)", scene_name[sc_kind], k, (unsigned long long)s,
                     (unsigned long long)rseed);
            /* the catalog is LMDB's own durable commit, right after its step: old
             * before it, new from the op after, either in between */
            bool cat_new = k > m.cat_step + 1 ||
                           (k == m.cat_step + 1 &&
                            (mode == ALL_KEPT || (mode == RANDOM && (rng >> 63))));
            materialize(&m, k, keep, base, state, cat_after, cat_len, cat_new);
            check_state(&m, k, state, sc_kind, ctx);
            t->visible += exists(state, "B");
            t->states++;
        }
    }
    t->prefixes += m.nops + 1;
    free(keep);
    free(cat_after);
    for (size_t i = 0; i < m.nops; i++)
        free(m.to_name[i]);
    free(m.op_obj), free(m.op_dir), free(m.to_parent), free(m.to_name);
    ck_engine_destroy(rec);
    tl_rmtree(state);
}

int main(void)
{
    uint64_t samples = env_u64("CK_CRASH_SAMPLES", 3), rseed = env_u64("CK_CRASH_SEED", 1);
    char top[PATH_MAX];
    tl_tmpdir(top, sizeof top, "crashstates");
    /* States are read, never crashed: tmpfs holds them when there is one, so that the
     * fsyncs of recovery and cp cost nothing. */
    char scratch[PATH_MAX];
    bool on_shm = access("/dev/shm", W_OK) == 0;
    if (on_shm) {
        snprintf(scratch, sizeof scratch, "/dev/shm/crashstates.XXXXXX");
        REQUIRE(mkdtemp(scratch), "mkdtemp %s", scratch);
    } else {
        snprintf(scratch, sizeof scratch, "%s", top);
    }
    tally t = { 0 };
    for (int sc_kind = SAVE_EMPTY; sc_kind <= REMOVE_BESIDE_A; sc_kind++)
        scenario(top, scratch, (enum scene)sc_kind, samples, rseed, &t);
    tl_rmtree(top);
    if (on_shm)
        tl_rmtree(scratch);
    if (tl_failures)
        return 1;
    printf("ok: %llu crash states checked (%llu prefixes x %llu states), B visible and "
           "whole in %llu\n", (unsigned long long)t.states, (unsigned long long)t.prefixes,
           (unsigned long long)(2 + samples), (unsigned long long)t.visible);
    return 0;
}
