/* A lock never outlives the process that took it, even when a child forked without
 * exec (a DataLoader or Pool worker) outlives it (issue 28, defect 5; decision 0144).
 * A writer process takes the lock, forks a child that only sleeps, and is killed with
 * SIGKILL; while the child lives:
 *   - a save lock (.pending/NAME.lock, a save prepared through ck/save.h): the save is
 *     debris, not a save in progress (ck_pending_live, ck_name_probe), recovery
 *     removes it, and a new save of NAME commits (on main: "held by pid N", the dead
 *     writer, until the child exits);
 *   - an engine lock (.ckptd.ID.lock of an embedded engine that meets other processes'
 *     engines, ck/client.h with nodes = 2): nobody holds it.
 * And a lock still held by a live writer is not lost when that writer forks. */
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>

#include "ck/catalog.h"
#include "ck/client.h"
#include "save/save_int.h"
#include "ckpt_testlib.h"

static const uint64_t shape[1] = { 4096 };

typedef struct writer {
    pid_t pid, child;       /* the writer, and the child it forked */
    int hold;               /* the child lives until this pipe closes */
} writer;

/* Begins and prepares a save of name: its pending directory exists and the lock is
 * held. Returns the save. */
static ck_save *prepare(const char *root, const char *name)
{
    ck_mesh mesh;
    ck_placement pl[1];
    ck_err err = { 0 };
    ck_mesh_parse("1", NULL, &mesh, NULL);
    ck_placements_parse("R", 1, 1, pl, NULL);
    ck_save *s;
    ck_save_opts so = { .hash_threads = 1 };
    static ck_synth_src src = { .seed = 5, .itemsize = 4, .ndim = 1, .shape = { 4096 } };
    ck_shard_box(1, shape, &mesh, pl, (const uint32_t[]){ 0 }, &src.box);
    ck_decl *d = tl_decl1(&mesh, "t0", CK_F32, 1, shape, pl);
    REQUIRE(ck_save_begin(&s, root, name, 1, d, &so, &err) == 0 &&
            ck_save_shard_fill(s, "t0", 0, ck_synth_fill, &src, &err) == 0 &&
            ck__save_prepare(s, &err) == 0, "preparing %s: %s", name, ck_err_msg(&err));
    ck_decl_free(d);
    return s;
}

/* A writer process that takes a lock (a save of name's, or with name NULL an embedded
 * engine's), forks a child that sleeps until the pipe closes, and waits to be killed. */
static writer start(const char *root, const char *name)
{
    int hold[2], ready[2];
    REQUIRE(pipe(hold) == 0 && pipe(ready) == 0, "pipe");
    writer w = { .pid = fork() };
    REQUIRE(w.pid >= 0, "fork");
    if (w.pid == 0) {
        close(hold[1]);
        close(ready[0]);
        ck_client *cl = NULL;
        ck_err err = { 0 };
        if (name)
            prepare(root, name);
        else if (ck_client_open(&cl, root, &(ck_client_opts){ .embedded = true, .nodes = 2 },
                                &err) < 0)
            _exit(2);
        pid_t child = fork();
        if (child == 0) {               /* no exec: a worker of the writer */
            /* The child says it is ready itself: fork() returns here only after the
             * atfork child handlers ran, so the test never looks before they did. */
            pid_t me = getpid();
            if (write(ready[1], &me, sizeof me) != sizeof me)
                _exit(3);
            char b;
            while (read(hold[0], &b, 1) > 0)
                ;
            _exit(0);
        }
        if (child < 0)
            _exit(3);
        for (;;)
            pause();
    }
    close(hold[0]);
    close(ready[1]);
    w.hold = hold[1];
    REQUIRE(read(ready[0], &w.child, sizeof w.child) == sizeof w.child, "the writer of %s "
            "did not get ready", name ? name : "an engine");
    close(ready[0]);
    return w;
}

static void kill_writer(writer *w)
{
    kill(w->pid, SIGKILL);
    waitpid(w->pid, NULL, 0);
    CHECK(kill(w->child, 0) == 0, "the writer's child %d is gone already", (int)w->child);
}

static void end_child(writer *w)
{
    close(w->hold);     /* the child reads EOF and exits (it is init's now) */
}

/* Whether someone holds the lock file at path (a non-blocking flock fails). */
static bool held(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0, "open %s", path);
    bool h = flock(fd, LOCK_EX | LOCK_NB) < 0;
    close(fd);
    return h;
}

static void save_lock(const char *root)
{
    ck_err err = { 0 };
    char lock[PATH_MAX];
    snprintf(lock, sizeof lock, "%s/.pending/s.lock", root);
    writer w = start(root, "s");
    CHECK(held(lock), "the writer does not hold %s", lock);
    kill_writer(&w);
    CHECK(!held(lock), "%s is still held after its writer died (its child, pid %d, lives)",
          lock, (int)w.child);
    char who[256] = "";
    CHECK(ck_name_probe(root, "s", who, sizeof who, &err) == CK_NAME_DEBRIS,
          "s is not debris once its writer died (held by %s)", who);
    size_t removed = 0;
    REQUIRE(ck_root_recover(root, &removed, NULL, NULL, &err) == 0, "recover: %s",
            ck_err_msg(&err));
    CHECK(removed == 1, "recovery removed %zu saves; the dead writer's is debris", removed);
    ck_save *s = prepare(root, "s");
    CHECK(ck_save_commit(s, NULL, &err) == 0, "a new save of s: %s", ck_err_msg(&err));
    CHECK(tl_verify_deep(root, "s", 5) == 0, "s does not verify");
    CHECK(kill(w.child, 0) == 0, "the child exited before the checks");
    end_child(&w);
}

static void engine_lock(const char *root)
{
    writer w = start(root, NULL);
    glob_t g;
    char pattern[PATH_MAX];
    snprintf(pattern, sizeof pattern, "%s/.ckptd.*.lock", root);
    REQUIRE(glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc == 1, "no engine lock %s", pattern);
    CHECK(held(g.gl_pathv[0]), "the engine does not hold %s", g.gl_pathv[0]);
    kill_writer(&w);
    CHECK(!held(g.gl_pathv[0]), "%s is still held after its engine's process died (its "
          "child, pid %d, lives)", g.gl_pathv[0], (int)w.child);
    end_child(&w);
    globfree(&g);
}

/* The other way round: a writer that forks keeps its lock. */
static void parent_keeps_its_lock(const char *root)
{
    ck_save *s = prepare(root, "p");
    pid_t child = fork();
    REQUIRE(child >= 0, "fork");
    if (child == 0)
        _exit(0);
    waitpid(child, NULL, 0);
    char lock[PATH_MAX], who[256];
    snprintf(lock, sizeof lock, "%s/.pending/p.lock", root);
    CHECK(held(lock), "the writer lost %s when its child exited", lock);
    ck_err err = { 0 };
    CHECK(ck_name_probe(root, "p", who, sizeof who, &err) == CK_NAME_BUSY, "p is not busy");
    CHECK(ck_save_commit(s, NULL, &err) == 0, "committing p after a fork: %s",
          ck_err_msg(&err));
}

int main(void)
{
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "forklock");
    signal(SIGPIPE, SIG_IGN);
    save_lock(root);
    engine_lock(root);
    parent_keeps_its_lock(root);
    if (!tl_failures)
        tl_rmtree(root);
    return tl_failures ? 1 : 0;
}
