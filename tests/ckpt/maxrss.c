/* maxrss - runs a command under a cap on its resident memory, for the tests that say
 * what a tool costs on a hostile file (tests/ckptd/sparse_lmdb.sh). A test helper:
 * never installed.
 *
 *   maxrss CAP_MIB CMD [ARGS...]
 *
 * Runs CMD, reads its VmRSS from /proc every 2 ms, and kills it (SIGKILL) the moment
 * it exceeds CAP_MIB: a build that copies a sparse terabyte into memory is stopped at
 * the cap instead of taking the machine with it. SIGTERM and SIGINT are passed on to
 * CMD. At the end it prints "maxrss: N KiB (cap M KiB)" on stderr, N the peak the
 * kernel recorded (ru_maxrss), and exits with CMD's status (128 + signal if it was
 * killed), or 125 with "maxrss: over the cap" when it went over. No rlimit: an address
 * space limit would stop a sanitized build, which reserves terabytes it never uses.
 */
#include <errno.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t child;

static void pass_on(int sig)
{
    if (child > 0)
        kill(child, sig);
}

/* VmRSS of pid in KiB, or -1 once it is gone. */
static long vm_rss(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) {
            kib = strtol(line + 6, NULL, 10);
            break;
        }
    if (f)
        fclose(f);
    return kib;
}

int main(int argc, char **argv)
{
    if (argc < 3 || atol(argv[1]) <= 0) {
        fprintf(stderr, "usage: maxrss CAP_MIB CMD [ARGS...]\n");
        return 2;
    }
    long cap = atol(argv[1]) * 1024;
    pid_t pid = fork();
    if (pid < 0) {
        perror("maxrss: fork");
        return 2;
    }
    if (pid == 0) {
        execvp(argv[2], argv + 2);
        fprintf(stderr, "maxrss: %s: %s\n", argv[2], strerror(errno));
        _exit(127);
    }
    child = pid;
    struct sigaction sa = { .sa_handler = pass_on };
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    bool over = false;
    int status = 0;
    struct rusage ru = { 0 };
    for (;;) {
        pid_t w = wait4(pid, &status, WNOHANG, &ru);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR) {
            perror("maxrss: wait4");
            return 2;
        }
        long rss = vm_rss(pid);
        if (!over && rss > cap) {
            over = true;
            fprintf(stderr, "maxrss: %s reached %ld KiB, over the cap of %ld KiB: killed\n",
                    argv[2], rss, cap);
            kill(pid, SIGKILL);
        }
        nanosleep(&(struct timespec){ .tv_nsec = 2 * 1000 * 1000 }, NULL);
    }
    fprintf(stderr, "maxrss: %ld KiB (cap %ld KiB)\n", ru.ru_maxrss, cap);
    if (over || ru.ru_maxrss > cap) {
        fprintf(stderr, "maxrss: over the cap\n");
        return 125;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
