/* kd_testlib.h - running real ckptd processes in tests: start, wait for the socket,
 * SIGKILL or SIGTERM, run the tools, inspect the root. Header-only, as ckpt_testlib.h. */
#ifndef KD_TESTLIB_H
#define KD_TESTLIB_H

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>

#include "ckpt_testlib.h"

/* Whether a daemon's RSS says what it holds: under ASan freed memory waits in the
 * allocator's quarantine, so tests that check RSS falling back only print it there
 * (and rely on LeakSanitizer at the daemon's exit instead). */
#ifdef __SANITIZE_ADDRESS__
#define KD_RSS_CHECKED false
#else
#define KD_RSS_CHECKED true
#endif

typedef struct kd_proc {
    pid_t pid;
    char root[PATH_MAX];
    char sock[PATH_MAX];
    char log[PATH_MAX];
} kd_proc;

static inline double kd_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline void kd_sleep_ms(double ms)
{
    struct timespec ts = { .tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)((ms - 1000.0 * (double)(time_t)(ms / 1000)) * 1e6) };
    nanosleep(&ts, NULL);
}

static inline bool kd_sock_alive(const char *path)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool ok = connect(s, (struct sockaddr *)&a, sizeof a) == 0;
    close(s);
    return ok;
}

/* Starts ckptd on root in the foreground, with extra arguments (NULL-terminated), and
 * waits until it accepts connections (at most 30 s). With id, it is one of several
 * daemons of the root: --id id, socket root/.ckptd-ID.sock, log root.ID.log. */
static inline void kd_start_id(kd_proc *d, const char *root, const char *id,
                               const char *const *extra)
{
    snprintf(d->root, sizeof d->root, "%s", root);
    snprintf(d->sock, sizeof d->sock, id ? "%s/.ckptd-%s.sock" : "%s/.ckptd.sock", root, id);
    snprintf(d->log, sizeof d->log, id ? "%s.%s.log" : "%s.log", root, id);
    const char *argv[40] = { CKPTD_PATH, "--root", root, "--foreground", "--log", d->log,
                             "--staging", "512MiB", "--hash-threads", "2" };
    int n = 10;
    if (id) {
        argv[n++] = "--id";
        argv[n++] = id;
        argv[n++] = "--socket";
        argv[n++] = d->sock;
    }
    for (int i = 0; extra && extra[i] && n < 38; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    d->pid = fork();
    REQUIRE(d->pid >= 0, "fork");
    if (d->pid == 0) {
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    /* Recovery reads every committed checkpoint's manifest to reconcile the catalog:
     * seconds for hundreds of them on a loaded machine (scripts/soak). */
    for (int i = 0; i < 6000; i++) {
        if (kd_sock_alive(d->sock))
            return;
        int st;
        REQUIRE(waitpid(d->pid, &st, WNOHANG) == 0, "ckptd exited at start (see %s)", d->log);
        kd_sleep_ms(5);
    }
    REQUIRE(0, "ckptd did not start listening in 30 s (see %s)", d->log);
}

static inline void kd_start(kd_proc *d, const char *root, const char *const *extra)
{
    kd_start_id(d, root, NULL, extra);
}

/* Waits for pid up to secs; kills it and returns -1 if it is still running. */
static inline int kd_wait_pid(pid_t pid, double secs)
{
    double t0 = kd_now();
    int st;
    while (kd_now() - t0 < secs) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        kd_sleep_ms(2);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

static inline void kd_kill9(kd_proc *d)
{
    kill(d->pid, SIGKILL);
    waitpid(d->pid, NULL, 0);
    d->pid = 0;
}

/* SIGTERM; returns the exit status (or -1 when it did not exit in secs). */
static inline int kd_term(kd_proc *d, double secs)
{
    kill(d->pid, SIGTERM);
    int r = kd_wait_pid(d->pid, secs);
    d->pid = 0;
    return r;
}

/* Runs argv (NULL-terminated) with stdout and stderr appended to out (or inherited),
 * in the background. */
static inline pid_t kd_spawn(const char *const *argv, const char *out)
{
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        if (out) {
            int fd = open(out, O_WRONLY | O_CREAT | O_APPEND, 0644);
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static inline int kd_run(const char *const *argv, const char *out, double secs)
{
    return kd_wait_pid(kd_spawn(argv, out), secs);
}

/* Entries of dir other than "." and ".."; dotfiles only when dots. */
static inline int kd_count_entries(const char *dir, bool dots)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && (dots || de->d_name[0] != '.'))
            n++;
    closedir(d);
    return n;
}

static inline bool kd_exists(const char *root, const char *name)
{
    char p[PATH_MAX];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", root, name);
    return stat(p, &st) == 0;
}

/* A process's resident memory (KiB, -1 when unknown) and its open descriptors. */
static inline long kd_rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

static inline int kd_count_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    return kd_count_entries(path, true);
}

/* Whether the log file holds needle. */
static inline bool kd_log_has(const char *log, const char *needle)
{
    FILE *f = fopen(log, "r");
    char line[4096];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f))
        found = strstr(line, needle) != NULL;
    if (f)
        fclose(f);
    return found;
}

/* Occurrences of needle in the file at path (lines of several writers may interleave
 * mid-line, so the whole file is searched, not line by line; its first MiB). */
static inline int kd_count_in(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    static char buf[1 << 20];
    size_t len = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[len] = 0;
    int n = 0;
    for (const char *p = buf; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* ckpt-synth as world ranks through ckptd at sock (NULL: the embedded engine), seed 7,
 * in the background. */
static inline pid_t kd_synth(const char *root, const char *sock, const char *name,
                             const char *mesh, const char *tensors, const char *bytes,
                             const char *out)
{
    char world[16];
    ck_mesh m;
    REQUIRE(ck_mesh_parse(mesh, NULL, &m, NULL) == 0, "mesh %s", mesh);
    snprintf(world, sizeof world, "%llu", (unsigned long long)ck_mesh_world(&m));
    const char *argv[24] = { CKPT_SYNTH_PATH, root, "--name", name, "--mesh", mesh,
                             "--tensors", tensors, "--bytes", bytes, "--seed", "7",
                             "--uneven", "--hash-threads", "2", "--world", world };
    int n = 17;
    if (sock) {
        argv[n++] = "--daemon";
        argv[n++] = sock;
    }
    argv[n] = NULL;
    return kd_spawn(argv, out);
}

static inline int kd_verify_tool(const char *root, const char *name)
{
    const char *argv[] = { CKPT_VERIFY_PATH, "--deep", root, name, NULL };
    return kd_run(argv, NULL, 60);
}

#endif
