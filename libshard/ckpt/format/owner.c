/* owner.c - lock files naming the owner of a root or a save (see format/owner.h). */
#include "format/owner.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ck/ckpt.h"
#include "format/layout.h"
#include "io/rootfs.h"
#include "model/grow.h"

/* Records the calling process as the holder (the lock's "pid P on HOST", then " job J"
 * with job, a job id in hex, when not NULL). */
static void note_pid(int fd, const char *job)
{
    char host[128] = "";
    gethostname(host, sizeof host - 1);
    char buf[200];
    int n = snprintf(buf, sizeof buf, "pid %d on %s%s%s\n", (int)getpid(), host[0] ? host : "?",
                     job ? " job " : "", job ? job : "");
    if (ftruncate(fd, 0) == 0 && pwrite(fd, buf, (size_t)n, 0) != n)
        (void)ftruncate(fd, 0);   /* a holder without a name is still a holder */
}

/* ---- the lock descriptors this process holds ----
 *
 * A flock belongs to the open file description, which fork() shares with the child: a
 * child forked without exec (a DataLoader or Pool worker) would hold every lock of
 * its parent until it exits, and a dead trainer's save would look alive. So every
 * lock file is opened here and its descriptor listed, and a child handler of
 * pthread_atfork closes the child's copies: a lock dies with the process that took
 * it (decision 0144). Process-wide state, as the fork is: one short list under one
 * mutex, which the prepare handler takes so that no fork sees a descriptor opened and
 * not yet listed, or closed and still listed (its number may be another file's by
 * then). ckptd's detach, whose child takes the lock over, hands it on by hand. */
static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;
static int *held;
static size_t n_held, cap_held;
static pthread_once_t handlers_once = PTHREAD_ONCE_INIT;
static int handlers_rc;

static void before_fork(void)
{
    pthread_mutex_lock(&held_mu);
}

static void after_fork_parent(void)
{
    pthread_mutex_unlock(&held_mu);
}

static void after_fork_child(void)
{
    for (size_t i = 0; i < n_held; i++)
        close(held[i]);
    n_held = 0;
    pthread_mutex_unlock(&held_mu);
}

static void install_handlers(void)
{
    handlers_rc = pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

/* Lists fd; held_mu is held. */
static int list_fd(int fd)
{
    if (ck__grow(&held, &cap_held, n_held + 1, sizeof *held) < 0)
        return -ENOMEM;
    held[n_held++] = fd;
    return 0;
}

/* Drops fd from the list; held_mu is held. */
static void unlist_fd(int fd)
{
    for (size_t i = 0; i < n_held; i++)
        if (held[i] == fd) {
            held[i] = held[--n_held];
            return;
        }
}

int ck__lock_open(int dir, const char *rel, int flags, unsigned mode)
{
    pthread_once(&handlers_once, install_handlers);
    if (handlers_rc)
        return -handlers_rc;
    pthread_mutex_lock(&held_mu);
    int fd = ck__openat_reg(dir, rel, flags, mode);
    if (fd >= 0 && list_fd(fd) < 0) {
        close(fd);
        fd = -ENOMEM;
    }
    pthread_mutex_unlock(&held_mu);
    return fd;
}

void ck__lock_close(int fd)
{
    if (fd < 0)
        return;
    pthread_mutex_lock(&held_mu);
    unlist_fd(fd);
    close(fd);
    pthread_mutex_unlock(&held_mu);
}

void ck__lock_hand_on(int fd)
{
    pthread_mutex_lock(&held_mu);
    unlist_fd(fd);
    pthread_mutex_unlock(&held_mu);
}

int ck__lock_adopt(int fd)
{
    pthread_once(&handlers_once, install_handlers);
    if (handlers_rc)
        return -handlers_rc;
    pthread_mutex_lock(&held_mu);
    int r = list_fd(fd);
    pthread_mutex_unlock(&held_mu);
    if (r == 0)
        note_pid(fd, NULL);
    return r;
}

/* ---- lock files ---- */

static void read_holder(int fd, char *who, size_t len)
{
    char buf[256];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\0'))
        n--;
    buf[n > 0 ? n : 0] = '\0';
    snprintf(who, len, "%s", n > 0 ? buf : "a process that has not written its pid yet");
}

bool ck__lock_job(const char *who, char *job)
{
    /* The host name comes before it and may hold anything: the last " job " counts. */
    const char *at = NULL;
    for (const char *p = who; (p = strstr(p, " job ")); p++)
        at = p + 5;
    size_t n = at ? strspn(at, "0123456789abcdef") : 0;
    if (n != CK_JOB_HEX_MAX - 1 || at[n])
        return false;
    memcpy(job, at, n + 1);
    return true;
}

/* Whether rel still names the file open as fd: a lock taken on a file that its last
 * holder unlinked meanwhile guards nothing. */
static bool still_named(int dir, const char *rel, int fd)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && ck__statat(dir, rel, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

int ck__lock_take(int dir, const char *root, const char *rel, const char *what,
                  const char *job, char *who, int *fd, ck_err *err)
{
    *fd = -1;
    for (int tries = 0; tries < 64; tries++) {
        int f = ck__lock_open(dir, rel, O_RDWR | O_CREAT, 0644);
        if (f < 0)
            return ck_err_set(err, f, "%s/%s: %s; refusing it as a lock", root, rel, ck__why(f));
        int r = flock(f, LOCK_EX | LOCK_NB) < 0 ? -errno : 0;
        if (still_named(dir, rel, f)) {
            if (r == 0) {
                note_pid(f, job);
                *fd = f;
                return 0;
            }
            if (r == -EWOULDBLOCK) {
                char holder[CK_LOCK_WHO_MAX];
                read_holder(f, holder, sizeof holder);
                ck__lock_close(f);
                if (who)
                    snprintf(who, CK_LOCK_WHO_MAX, "%s", holder);
                return ck_err_set(err, -EBUSY, "%s (held by %s, lock %s/%s)", what, holder,
                                  root, rel);
            }
            ck__lock_close(f);
            return ck_err_set(err, r, "%s/%s: flock: %s", root, rel, strerror(-r));
        }
        ck__lock_close(f);  /* its holder dropped it between our open and flock: take the new one */
    }
    return ck_err_set(err, -EAGAIN, "%s/%s: the lock file keeps being replaced", root, rel);
}

void ck__lock_drop(int dir, const char *rel, int *fd)
{
    if (*fd < 0)
        return;
    ck__unlinkat(dir, rel, 0);
    ck__lock_close(*fd);
    *fd = -1;
}

int ck__lock_probe(int dir, const char *rel, int *fd, char *who, size_t len)
{
    *fd = -1;
    int f = ck__lock_open(dir, rel, O_RDWR, 0);
    if (f < 0)
        return f == -ENOENT ? 1 : f;
    if (flock(f, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        if (e == EWOULDBLOCK)
            read_holder(f, who, len);
        ck__lock_close(f);
        return e == EWOULDBLOCK ? 0 : -e;
    }
    *fd = f;
    return 1;
}

int ck__lock_held(int dir, const char *rel, char *who, size_t len)
{
    int f = ck__lock_open(dir, rel, O_RDONLY, 0);
    if (f < 0)
        return f == -ENOENT ? 0 : f;
    int r = flock(f, LOCK_SH | LOCK_NB) == 0 ? 0 : errno == EWOULDBLOCK ? 1 : -errno;
    if (r == 1)
        read_holder(f, who, len);
    ck__lock_close(f);
    return r;
}

int ck__save_lock_rel(const char *name, char *out, ck_err *err)
{
    if (ck__name_save_lock(name, out, PATH_MAX) < 0)
        return ck_err_set(err, -ENAMETOOLONG, "checkpoint %s: name too long", name);
    return 0;
}

int ck__engine_lock(const char *root, const char *id, const char *what, int *fd, ck_err *err)
{
    char rel[CK_NODE_ID_LOCK_MAX];
    *fd = -1;
    if (ck__name_engine(id, CK_ENGINE_LOCK, rel, sizeof rel) < 0)
        return ck_err_set(err, -ENAMETOOLONG, "engine %s: id too long", id);
    int rootfd = ck__root_open(root, err);
    if (rootfd < 0)
        return rootfd;
    /* Recovery in another engine takes a free engine lock for an instant, to remove
     * the heartbeat and address of an engine that died (catalog.c, drop_dead_beats):
     * an engine that starts in that instant, as every daemon of a restarted job does
     * at once, would take the probe for a live engine of its id. A probe lasts an
     * unlink; a live engine holds the lock for its whole life: what is still held
     * after CK_ENGINE_LOCK_WAIT_MS is one. */
    struct timespec t0, now, pause = { 0, 10 * 1000 * 1000 };
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int r;
    for (;;) {
        ck_err why = { 0 };
        if ((r = ck__lock_take(rootfd, root, rel, what, NULL, NULL, fd, &why)) != -EBUSY) {
            if (r < 0)
                *err = why;
            break;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 >=
            CK_ENGINE_LOCK_WAIT_MS) {
            *err = why;
            break;
        }
        nanosleep(&pause, NULL);
    }
    close(rootfd);
    return r;
}

void ck__engine_unlock(const char *root, const char *id, int *fd)
{
    char rel[CK_NODE_ID_LOCK_MAX];
    ck_err err;
    if (*fd < 0 || ck__name_engine(id, CK_ENGINE_LOCK, rel, sizeof rel) < 0)
        return;
    int rootfd = ck__root_open(root, &err);
    if (rootfd >= 0) {
        ck__lock_drop(rootfd, rel, fd);
        close(rootfd);
    } else {
        ck__lock_close(*fd);     /* the root is gone: nothing to unlink */
        *fd = -1;
    }
}
