/* An engine that starts while another engine's recovery probes its lock starts; a live
 * engine of its id still refuses it.
 *
 * Recovery takes a free engine lock (.ckptd.ID.lock) for an instant, to remove the
 * heartbeat and address of the engine that died (catalog.c, drop_dead_beats:
 * ck__lock_probe, then ck__lock_drop). When a job's daemons all start at once, one's
 * recovery can hold the lock of another that is taking it: the starting engine was
 * refused as "served by another ckptd with id ID", naming the dead engine's pid. Here a
 * probe holds engine n1's lock, the way drop_dead_beats does, for 300 ms (longer than
 * an unlink, so that the engine surely meets it) while engine n1 starts:
 *   - n1 takes its lock once the probe drops it (on main before the fix: -EBUSY at
 *     once);
 *   - the lock it holds is the file the root names (the probe unlinked the old one);
 *   - a second engine of n1, meeting a lock held by a live engine, is still refused
 *     (-EBUSY, naming the holder: this process) after CK_ENGINE_LOCK_WAIT_MS. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "format/owner.h"
#include "io/rootfs.h"
#include "ckpt_testlib.h"

typedef struct probe {
    const char *root;
    atomic_int holds;              /* 1 once the probe holds the lock, 2 once it dropped it */
} probe;

static void *run_probe(void *arg)
{
    probe *p = arg;
    ck_err err = { 0 };
    char who[CK_LOCK_WHO_MAX];
    int fd = -1, rootfd = ck__root_open(p->root, &err);
    REQUIRE(rootfd >= 0, "%s", ck_err_msg(&err));
    REQUIRE(ck__lock_probe(rootfd, ".ckptd.n1.lock", &fd, who, sizeof who) == 1,
            "the probe found n1's lock held");
    atomic_store(&p->holds, 1);
    struct timespec ts = { 0, 300 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    atomic_store(&p->holds, 2);
    ck__lock_drop(rootfd, ".ckptd.n1.lock", &fd);
    close(rootfd);
    return NULL;
}

int main(void)
{
    char root[PATH_MAX];
    ck_err err = { 0 };
    tl_tmpdir(root, sizeof root, "englock");
    /* The lock a dead engine n1 left: its file, held by nobody. */
    int fd = -1;
    REQUIRE(ck__engine_lock(root, "n1", "engine n1", &fd, &err) == 0, "%s", ck_err_msg(&err));
    ck__lock_close(fd);

    probe p = { .root = root };
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, run_probe, &p) == 0, "pthread_create");
    while (atomic_load(&p.holds) == 0)
        sched_yield();
    int r = ck__engine_lock(root, "n1", "engine n1 is served by another engine", &fd, &err);
    int after = atomic_load(&p.holds);
    pthread_join(th, NULL);
    CHECK(r == 0, "engine n1 starting beside a recovery probe: %d (%s)", r, ck_err_msg(&err));
    CHECK(after == 2, "engine n1 took its lock while the probe held it");

    /* What it holds is the lock the root names, held. */
    int rootfd = ck__root_open(root, &err);
    REQUIRE(rootfd >= 0, "%s", ck_err_msg(&err));
    char who[CK_LOCK_WHO_MAX] = "";
    CHECK(r != 0 || ck__lock_held(rootfd, ".ckptd.n1.lock", who, sizeof who) == 1,
          "root/.ckptd.n1.lock is not held after engine n1 took it");

    /* A live engine of the id: the second is refused, naming it. */
    int fd2 = -1;
    ck_err e2 = { 0 };
    int r2 = ck__engine_lock(root, "n1", "engine n1 is served by another engine", &fd2, &e2);
    char pid[32];
    snprintf(pid, sizeof pid, "pid %d", (int)getpid());
    CHECK(r2 == -EBUSY, "a second engine n1 beside a live one: %d, not -EBUSY", r2);
    CHECK(strstr(ck_err_msg(&e2), "engine n1 is served by another engine") &&
          strstr(ck_err_msg(&e2), pid), "the refusal does not name the live engine: %s",
          ck_err_msg(&e2));
    if (fd2 >= 0)
        ck__lock_close(fd2);
    if (r == 0)
        ck__engine_unlock(root, "n1", &fd);
    close(rootfd);
    if (!tl_failures)
        tl_rmtree(root);
    return tl_failures ? 1 : 0;
}
