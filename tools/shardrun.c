/* shardrun - torchrun's command-line shape over OpenMPI's mpirun.
 *
 *   shardrun --nproc-per-node N [--] PROGRAM [ARGS...]
 *
 * Starts N copies of PROGRAM on this host with mpirun and gives each the variables
 * torchrun would: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE. It passes
 * --oversubscribe (N may exceed the cores, as in tests) and --allow-run-as-root when
 * run as root (containers). Multi-node jobs use mpirun (or srun) with a host file
 * directly: libshard reads MPI's own view of the job.
 *
 * mpirun starts this same binary in worker mode (an internal first argument), which
 * turns OpenMPI's variables into torchrun's and then execs PROGRAM, so PROGRAM needs
 * no wrapper and non-MPI programs see the variables too.
 *
 * Ranks die with their launcher. OpenMPI puts each rank in a process group of its
 * own, so a kill of the launcher's group (or of mpirun alone, by any signal) used to
 * leave the ranks training and committing checkpoints with nobody watching. The
 * worker asks the kernel for SIGKILL when its parent (mpirun) dies, before it execs
 * PROGRAM; the request survives the exec.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#ifndef SHARDRUN_MPIRUN
#define SHARDRUN_MPIRUN "mpirun"
#endif

#define WORKER_FLAG "--shardrun-worker"

static void usage(FILE *f)
{
    fprintf(f, "usage: shardrun --nproc-per-node N [--] PROGRAM [ARGS...]\n"
               "Runs N ranks of PROGRAM under mpirun with RANK, WORLD_SIZE, LOCAL_RANK and\n"
               "LOCAL_WORLD_SIZE set (torchrun's variables).\n");
}

static int export_from(const char *name, const char *from)
{
    const char *v = getenv(from);
    if (!v) {
        fprintf(stderr, "shardrun: %s is not set: the worker must be started by mpirun\n",
                from);
        return -1;
    }
    return setenv(name, v, 1);
}

static int worker(char **argv)
{
    pid_t parent = getppid();
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) {
        fprintf(stderr, "shardrun: PR_SET_PDEATHSIG: %s\n", strerror(errno));
        return 127;
    }
    if (getppid() != parent)    /* mpirun died before the request: never start */
        return 127;
    if (export_from("RANK", "OMPI_COMM_WORLD_RANK") ||
        export_from("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE") ||
        export_from("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK") ||
        export_from("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"))
        return 127;
    execvp(argv[0], argv);
    fprintf(stderr, "shardrun: cannot run %s: %s\n", argv[0], strerror(errno));
    return 127;
}

static int parse_n(const char *s, long *n)
{
    char *end;
    errno = 0;
    *n = strtol(s, &end, 10);
    return errno || *end || *n < 1 || *n > 4096 ? -1 : 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], WORKER_FLAG) == 0)
        return worker(argv + 2);

    long n = 0;
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--nproc-per-node") == 0 || strcmp(a, "--nproc_per_node") == 0) {
            if (i + 1 >= argc) {
                usage(stderr);
                return 2;
            }
            val = argv[++i];
        } else if (strncmp(a, "--nproc-per-node=", 17) == 0 ||
                   strncmp(a, "--nproc_per_node=", 17) == 0) {
            val = a + 17;
        } else if (a[0] == '-') {
            fprintf(stderr, "shardrun: unknown option %s\n", a);
            usage(stderr);
            return 2;
        } else {
            break;
        }
        if (parse_n(val, &n)) {
            fprintf(stderr, "shardrun: --nproc-per-node wants a count from 1 to 4096, not '%s'\n",
                    val);
            return 2;
        }
    }
    if (n == 0 || i >= argc) {
        usage(stderr);
        return 2;
    }

    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len < 0) {
        fprintf(stderr, "shardrun: cannot find its own path: %s\n", strerror(errno));
        return 1;
    }
    self[len] = '\0';
    char np[32];
    snprintf(np, sizeof np, "%ld", n);

    const char *fixed[] = {SHARDRUN_MPIRUN, "-np", np, "--oversubscribe", "--bind-to", "none"};
    size_t nfixed = sizeof fixed / sizeof fixed[0];
    char **cmd = calloc(nfixed + 3 + (size_t)(argc - i) + 1, sizeof *cmd);
    if (!cmd)
        return 1;
    size_t k = 0;
    for (size_t j = 0; j < nfixed; j++)
        cmd[k++] = (char *)fixed[j];
    if (geteuid() == 0)
        cmd[k++] = "--allow-run-as-root";
    cmd[k++] = self;
    cmd[k++] = WORKER_FLAG;
    for (; i < argc; i++)
        cmd[k++] = argv[i];
    cmd[k] = NULL;
    execvp(cmd[0], cmd);
    fprintf(stderr, "shardrun: cannot run %s: %s\n", cmd[0], strerror(errno));
    free(cmd);
    return 127;
}
