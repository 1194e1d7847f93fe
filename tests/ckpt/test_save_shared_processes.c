/* One save, many processes: each of 4 forked ranks builds the same ck_save, and the
 * group's collectives (ck_group) run over socket pairs to rank 0. Every rank writes
 * only its own data file into the shared pending directory; rank 0 gathers the
 * outcomes and hashes and commits. The checkpoint holds the formula's bytes and
 * deep-verifies. A rank that reports a failed part fails the save on rank 0, naming
 * it, and rank 0 removes the directory; a rank that dies before the gather leaves the
 * save uncommitted and only .pending debris, which recovery removes; rank 0 failing
 * to prepare fails every rank. */
#include <sys/socket.h>
#include <sys/wait.h>

#include "ck/catalog.h"
#include "ck/save.h"
#include "ckpt_testlib.h"

#define WORLD 4
static const uint64_t seed = 11;
static const uint64_t shapes[3][2] = { { 1001, 33 }, { 3, 8 }, { 4096, 16 } };

/* The group's links: rank 0 holds one socket per other rank, the others one to 0. */
typedef struct links {
    uint64_t rank;
    int fd[WORLD];
} links;

static int xfer(int fd, void *buf, size_t len, bool out)
{
    for (size_t at = 0; at < len;) {
        ssize_t n = out ? send(fd, (char *)buf + at, len - at, MSG_NOSIGNAL)
                        : recv(fd, (char *)buf + at, len - at, 0);
        if (n <= 0)
            return n < 0 ? -errno : -EPIPE;
        at += (size_t)n;
    }
    return 0;
}

static int broadcast(void *arg, void *buf, size_t len, ck_err *err)
{
    links *l = arg;
    for (int r = 1; r < WORLD; r++) {
        int e = l->rank == 0 ? xfer(l->fd[r], buf, len, true)
              : (uint64_t)r == l->rank ? xfer(l->fd[0], buf, len, false) : 0;
        if (e < 0)
            return ck_err_set(err, e, "broadcast to rank %d: %s", r, strerror(-e));
    }
    return 0;
}

static int gather(void *arg, const void *mine, void *all, size_t len, ck_err *err)
{
    links *l = arg;
    if (len % 8)
        return ck_err_set(err, -EINVAL, "gather of %zu bytes, not a multiple of 8", len);
    if (l->rank != 0) {
        int e = xfer(l->fd[0], (void *)mine, len, true);
        return e < 0 ? ck_err_set(err, e, "gather from rank %llu: %s",
                                  (unsigned long long)l->rank, strerror(-e)) : 0;
    }
    memcpy(all, mine, len);
    for (int r = 1; r < WORLD; r++) {
        int e = xfer(l->fd[r], (char *)all + (size_t)r * len, len, false);
        if (e < 0)
            return ck_err_set(err, e, "gather from rank %d: %s", r, strerror(-e));
    }
    return 0;
}

typedef struct scenario {
    const char *name;
    int dies;       /* this rank exits after writing its file, before the gather */
    int fails;      /* this rank reports its part as failed */
} scenario;

/* This rank's part: the formula's shards, copied into its image, written, gathered.
 * Returns what finish (and, on rank 0, the commit) returned. */
static int save_rank(const char *root, const scenario *sc, const ck_group *g, ck_err *err)
{
    ck_mesh mesh;
    ck_placement pl[2];
    ck_mesh_parse("2x2", NULL, &mesh, NULL);
    ck_placements_parse("R,S(0)", 2, 2, pl, NULL);
    ck_save *s;
    REQUIRE(ck_save_begin(&s, root, sc->name, 5, &mesh, &(ck_save_opts){ .block_size = 16384 },
                          err) == 0, "%s", ck_err_msg(err));
    uint8_t *shard[3] = { 0 };
    uint32_t coord[CK_MAX_MESH_DIMS];
    ck_mesh_coord(&mesh, g->rank, coord);
    for (int t = 0; t < 3; t++) {
        char tn[8];
        snprintf(tn, sizeof tn, "t%d", t);
        REQUIRE(ck_save_tensor(s, tn, CK_F32, 2, shapes[t], pl, err) == 0, "%s",
                ck_err_msg(err));
        ck_box box;
        ck_shard_box(2, shapes[t], &mesh, pl, coord, &box);
        shard[t] = tl_box_bytes(seed, (uint32_t)t, 4, 2, shapes[t], &box);
        REQUIRE(ck_save_shard(s, tn, g->rank, shard[t], err) == 0, "%s", ck_err_msg(err));
    }
    int r = ck_save_prepare_group(s, g, err);
    if (r < 0) {
        ck_save_abort(s);
        for (int t = 0; t < 3; t++)
            free(shard[t]);
        return r;
    }
    uint64_t size = ck_save_rank_bytes(s, g->rank);
    uint8_t *img = NULL;
    REQUIRE(posix_memalign((void **)&img, 4096, size ? size : 4096) == 0, "oom");
    memset(img, 0xee, size);      /* the gaps must come out as zeros */
    REQUIRE(ck_save_copy_rank(s, g->rank, img, err) == 0, "%s", ck_err_msg(err));
    for (int t = 0; t < 3; t++)
        free(shard[t]);           /* copied: the image is all the write reads */
    REQUIRE(ck_save_write_rank(s, g->rank, err) == 0, "rank %llu: %s",
            (unsigned long long)g->rank, ck_err_msg(err));
    if ((int)g->rank == sc->dies)
        _exit(3);
    ck_err outcome = { 0 };
    if ((int)g->rank == sc->fails)
        ck_err_set(&outcome, -EIO, "disk on fire");
    r = ck_save_finish_group(s, g, &outcome, err);
    if (r == 0 && g->rank == 0)
        r = ck_save_commit(s, NULL, err);
    free(img);
    return r;
}

/* Runs one save over WORLD processes. Returns rank 0's result (its message in err);
 * *others gets how many other ranks returned an error. */
static int run(const char *root, const scenario *sc, int *others, ck_err *err)
{
    int sp[WORLD][2];
    pid_t pid[WORLD];
    links l0 = { .rank = 0 };
    for (int r = 1; r < WORLD; r++) {
        REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sp[r]) == 0, "socketpair");
        pid[r] = fork();
        REQUIRE(pid[r] >= 0, "fork");
        if (pid[r] == 0) {
            for (int k = 1; k <= r; k++)
                close(sp[k][0]);
            links l = { .rank = (uint64_t)r, .fd = { sp[r][1] } };
            ck_group g = { (uint64_t)r, WORLD, broadcast, gather, &l };
            ck_err e = { 0 };
            int rc = save_rank(root, sc, &g, &e);
            _exit(tl_failures ? 1 : rc ? 2 : 0);
        }
        close(sp[r][1]);
        l0.fd[r] = sp[r][0];
    }
    ck_group g = { 0, WORLD, broadcast, gather, &l0 };
    int rc = save_rank(root, sc, &g, err);
    for (int r = 1; r < WORLD; r++)
        close(l0.fd[r]);
    *others = 0;
    for (int r = 1; r < WORLD; r++) {
        int st;
        waitpid(pid[r], &st, 0);
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 100;
        CHECK(r == sc->dies ? code == 3 : code == 0 || code == 2, "rank %d exited %d", r, code);
        *others += code == 2;
    }
    return rc;
}

static size_t pending_of(const char *root, const char *name)
{
    ck_scan sc;
    ck_err err = { 0 };
    REQUIRE(ck_root_scan(root, &sc, &err) == 0, "%s", ck_err_msg(&err));
    size_t n = 0, len = strlen(name);
    for (size_t i = 0; i < sc.n_pending; i++)
        n += strncmp(sc.pending[i], name, len) == 0 && sc.pending[i][len] == '.';
    ck_scan_free(&sc);
    return n;
}

static bool visible(const char *root, const char *name)
{
    char p[PATH_MAX];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", root, name);
    return stat(p, &st) == 0;
}

int main(void)
{
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "shared");
    ck_err err = { 0 };
    int others;

    int rc = run(root, &(scenario){ "together", -1, -1 }, &others, &err);
    REQUIRE(rc == 0 && others == 0, "the save did not commit: %s", ck_err_msg(&err));
    CHECK(tl_verify_deep(root, "together", seed) == 0, "the shared save has problems");

    ck_err_clear(&err);
    rc = run(root, &(scenario){ "refused", -1, 1 }, &others, &err);
    CHECK(rc == -EIO, "a save with a failed part: rank 0 got %d", rc);
    CHECK(strstr(ck_err_msg(&err), "rank 1") && strstr(ck_err_msg(&err), "disk on fire"),
          "the error does not name the rank and its reason: %s", ck_err_msg(&err));
    CHECK(!visible(root, "refused"), "a save with a failed part is visible");
    CHECK(pending_of(root, "refused") == 0, "rank 0 left the failed save's directory");

    ck_err_clear(&err);
    rc = run(root, &(scenario){ "torn", 2, -1 }, &others, &err);
    CHECK(rc < 0, "a save with a dead rank committed");
    CHECK(!visible(root, "torn"), "a torn save is visible");
    CHECK(pending_of(root, "torn") == 1, "a torn save left no debris for recovery");

    ck_err_clear(&err);
    rc = run(root, &(scenario){ "together", -1, -1 }, &others, &err);
    CHECK(rc == -EEXIST && others == WORLD - 1, "rank 0 could not prepare, yet %d of %d other "
          "ranks went on (rank 0: %d)", WORLD - 1 - others, WORLD - 1, rc);

    size_t removed = 0;
    REQUIRE(ck_root_recover(root, &removed, NULL, NULL, &err) == 0, "%s", ck_err_msg(&err));
    CHECK(removed == 1, "recovery removed %zu pending saves", removed);
    CHECK(tl_verify_deep(root, "together", seed) == 0, "recovery damaged the earlier save");
    tl_rmtree(root);
    if (tl_failures)
        return 1;
    printf("ok: %d processes wrote one checkpoint; a failed part was refused and cleaned "
           "up; a dead rank left only debris\n", WORLD);
    return 0;
}
