/* One owner per save, and recovery that removes only what is dead (docs/FORMAT.md,
 * "Owners and locks"). Writers are real processes on one root:
 *   - recovery (ck_root_recover) beside a live writer keeps its pending directory, and
 *     the writer then commits; the directory of a writer killed with SIGKILL is removed;
 *     the same for the coordinator of a save shared by several engines (ck__save_share,
 *     rank 0's engine's way), which holds the lock as it commits;
 *   - two writers of different names, both in flight at once, both commit;
 *   - a second writer of a name being saved gets -EBUSY naming the first one's pid at
 *     prepare, nothing of the first is touched, and the first commits intact. */
#include <signal.h>
#include <sys/wait.h>

#include "ck/catalog.h"
#include "ck/save.h"
#include "save/save_int.h"
#include "ckpt_testlib.h"
#include "format/layout.h"

static const uint64_t seed = 11;
static const uint64_t shape[2] = { 300, 40 };

typedef struct writer {
    pid_t pid;
    int go;                 /* parent writes a byte: commit now */
    int ready;              /* child writes a byte once prepared */
} writer;

/* shared false: a save of one process (ck__save_prepare); true: the coordinator of a
 * save shared with other engines (ck__save_share). */
static int begin(const char *root, const char *name, bool shared, ck_save **s,
                 ck_synth_src *src, ck_err *err)
{
    ck_mesh mesh;
    ck_placement pl[1];
    ck_mesh_parse("1", NULL, &mesh, NULL);
    ck_placements_parse("R", 1, 2, pl, NULL);
    ck_save_opts so = { .hash_threads = 1, .block_size = 16384 };
    ck_decl *d = tl_decl1(&mesh, "t0", CK_F32, 2, shape, pl);
    int r = ck_save_begin(s, root, name, 3, d, &so, err);
    ck_decl_free(d);
    if (r < 0)
        return r;
    *src = (ck_synth_src){ .seed = seed, .tensor = 0, .itemsize = 4, .ndim = 2,
                           .shape = { shape[0], shape[1] } };
    uint32_t coord[1] = { 0 };
    ck_shard_box(2, shape, &mesh, pl, coord, &src->box);
    if ((r = ck_save_shard_fill(*s, "t0", 0, ck_synth_fill, src, err)) == 0) {
        char token[CK_TOKEN_MAX];
        r = shared ? ck__save_share(*s, token, err) : ck__save_prepare(*s, err);
    }
    if (r < 0)
        ck_save_abort(*s);
    return r;
}

/* A child that prepares NAME (its pending directory exists and it holds the lock),
 * says so, and commits when told; exits 0 once committed. */
static writer start_writer(const char *root, const char *name, bool shared)
{
    int go[2], ready[2];
    REQUIRE(pipe(go) == 0 && pipe(ready) == 0, "pipe");
    writer w = { .pid = fork() };
    REQUIRE(w.pid >= 0, "fork");
    if (w.pid == 0) {
        close(go[1]);
        close(ready[0]);
        ck_save *s;
        ck_synth_src src;
        ck_err err = { 0 };
        if (begin(root, name, shared, &s, &src, &err) < 0) {
            fprintf(stderr, "writer %s: %s\n", name, ck_err_msg(&err));
            _exit(2);
        }
        char b = 1;
        if (write(ready[1], &b, 1) != 1 || read(go[0], &b, 1) != 1)
            _exit(3);
        if (shared && ck__save_write_rank(s, 0, &err) < 0) {
            fprintf(stderr, "writer %s: write: %s\n", name, ck_err_msg(&err));
            _exit(4);
        }
        if (ck_save_commit(s, NULL, &err) < 0) {
            fprintf(stderr, "writer %s: commit: %s\n", name, ck_err_msg(&err));
            _exit(4);
        }
        _exit(0);
    }
    close(go[0]);
    close(ready[1]);
    w.go = go[1];
    w.ready = ready[0];
    char b;
    REQUIRE(read(w.ready, &b, 1) == 1, "writer %s did not get ready", name);
    return w;
}

static int finish_writer(writer *w)
{
    char b = 1;
    int st = 0;
    CHECK(write(w->go, &b, 1) == 1, "telling writer %d to commit", (int)w->pid);
    waitpid(w->pid, &st, 0);
    close(w->go);
    close(w->ready);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static size_t pending_saves(const char *root)
{
    ck_scan sc;
    REQUIRE(ck_root_scan(root, &sc, NULL) == 0, "scan %s", root);
    size_t n = sc.n_pending;
    ck_scan_free(&sc);
    return n;
}

int main(void)
{
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "owners");
    ck_err err = { 0 };

    /* A live writer and a dead one, then recovery. */
    writer live = start_writer(root, "live", false);
    writer dead = start_writer(root, "dead", false);
    kill(dead.pid, SIGKILL);
    waitpid(dead.pid, NULL, 0);
    close(dead.go);
    close(dead.ready);
    CHECK(pending_saves(root) == 2, "expected two saves in .pending before recovery");
    size_t removed = 0;
    REQUIRE(ck_root_recover(root, &removed, NULL, NULL, &err) == 0, "recover: %s",
            ck_err_msg(&err));
    CHECK(removed == 1, "recovery removed %zu saves; only the dead writer's is debris",
          removed);
    CHECK(pending_saves(root) == 1, "recovery removed the live writer's save");
    CHECK(finish_writer(&live) == 0, "the live writer could not commit after recovery");
    CHECK(tl_verify_deep(root, "live", seed) == 0, "live does not verify");

    /* The same for the coordinator of a shared save. */
    writer group = start_writer(root, "group", true);
    REQUIRE(ck_root_recover(root, &removed, NULL, NULL, &err) == 0, "recover: %s",
            ck_err_msg(&err));
    CHECK(removed == 0 && pending_saves(root) == 1, "recovery removed the save of a live "
          "coordinator of a shared save");
    CHECK(finish_writer(&group) == 0, "the coordinator could not commit after recovery");
    CHECK(tl_verify_deep(root, "group", seed) == 0, "group does not verify");

    /* Two names at once: both commit. */
    writer a = start_writer(root, "a", false);
    writer b = start_writer(root, "b", false);
    CHECK(finish_writer(&b) == 0 && finish_writer(&a) == 0, "two writers of different "
          "names on one root did not both commit");
    CHECK(tl_verify_deep(root, "a", seed) == 0 && tl_verify_deep(root, "b", seed) == 0,
          "a or b does not verify");

    /* One name twice: the second is refused at once, naming the first. */
    writer first = start_writer(root, "same", false);
    ck_save *s;
    ck_synth_src src;
    ck_err_clear(&err);
    int r = begin(root, "same", NULL, &s, &src, &err);
    char pid[32];
    snprintf(pid, sizeof pid, "pid %d", (int)first.pid);
    CHECK(r == -EBUSY, "a second writer of 'same' got %d (%s), not -EBUSY", r, ck_err_msg(&err));
    CHECK(strstr(ck_err_msg(&err), "same") && strstr(ck_err_msg(&err), pid),
          "the refusal does not name the save and the first writer's %s: %s", pid,
          ck_err_msg(&err));
    if (r == 0)
        ck_save_abort(s);
    CHECK(pending_saves(root) == 1, "the refused writer touched the first one's directory");
    CHECK(finish_writer(&first) == 0, "the first writer of 'same' could not commit");
    CHECK(tl_verify_deep(root, "same", seed) == 0, "same does not verify");
    ck_err_clear(&err);
    r = begin(root, "same", NULL, &s, &src, &err);
    CHECK(r == -EEXIST, "saving 'same' again after its commit got %d (%s), not -EEXIST", r,
          ck_err_msg(&err));

    /* Nothing left behind: no saves, no stale locks. */
    REQUIRE(ck_root_recover(root, &removed, NULL, NULL, &err) == 0, "recover: %s",
            ck_err_msg(&err));
    char pend[PATH_MAX + 16];
    snprintf(pend, sizeof pend, "%s/%s", root, CK_PENDING);
    DIR *d = opendir(pend);
    int left = 0;
    for (struct dirent *de; d && (de = readdir(d));)
        left += de->d_name[0] != '.';
    if (d)
        closedir(d);
    CHECK(left == 0, "%d entries left in %s after every writer finished", left, pend);
    if (tl_failures)
        return 1;
    tl_rmtree(root);
    printf("ok: recovery spared a live writer and a live group's rank 0 and removed a dead "
           "writer's save; two names "
           "committed side by side; a second writer of one name was refused\n");
    return 0;
}
