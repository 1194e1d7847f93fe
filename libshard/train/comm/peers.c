/* comm/peers.c - the peer watchdog: a rank that loses a peer of its host stops waiting.
 *
 * MPI on one host (shared memory) has no notion of a dead peer: a collective that
 * waits for a rank killed by SIGKILL waits forever, and whether the job ends then is
 * the launcher's choice (mpirun tears it down; mpirun --enable-recovery, or srun
 * without --kill-on-bad-exit, does not). So the ranks of a host learn each other's
 * pids at sh_init, and a collective that is still waiting after a second looks, at
 * most once a second, whether one of them has exited. It has if its pidfd is readable
 * (the kernel marks it at exit, before the launcher reaps it); without pidfds (Linux
 * before 5.3) kill(pid, 0) tells, from the moment the launcher has reaped it.
 *
 * A dead peer turns the wait into -EPIPE with a message naming the rank. Ranks of
 * other hosts, and of other pid namespaces on this one, are not watched: their own host's ranks notice, and sh_abort ends the
 * whole job from there.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "comm/peers.h"
#include "sh/world.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

struct sh_peers {
    int n;                 /* the other ranks of this host */
    int *rank;             /* their world ranks */
    pid_t *pid;
    struct pollfd *fd;     /* pidfds, or -1 where pidfd_open failed */
};

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

void sh_peers_free(sh_peers *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n; i++)
        if (p->fd[i].fd >= 0)
            close(p->fd[i].fd);
    free(p->rank);
    free(p->pid);
    free(p->fd);
    free(p);
}

int sh_peers_new(const sh_comm_job *job, MPI_Comm local, int local_size, sh_peers **out,
                 ck_err *err)
{
    *out = NULL;
    /* A pid means something only inside its pid namespace: ranks of one host in
     * containers of their own cannot watch each other, and skip each other. */
    struct stat ns;
    uint64_t ino = stat("/proc/self/ns/pid", &ns) == 0 ? (uint64_t)ns.st_ino : 0;
    int me[4] = {(int)getpid(), job->rank, (int)(ino >> 32), (int)(uint32_t)ino};
    int *all = calloc((size_t)local_size * 4, sizeof *all);
    sh_peers *p = calloc(1, sizeof *p);
    int n = local_size - 1;
    if (p && all && n > 0) {
        p->rank = calloc((size_t)n, sizeof *p->rank);
        p->pid = calloc((size_t)n, sizeof *p->pid);
        p->fd = calloc((size_t)n, sizeof *p->fd);
    }
    if (!p || !all || (n > 0 && (!p->rank || !p->pid || !p->fd))) {
        free(all);
        sh_peers_free(p);
        return ck_err_set(err, -ENOMEM, "rank %d: out of memory for the peer watchdog",
                          job->rank);
    }
    if (MPI_Allgather(me, 4, MPI_INT, all, 4, MPI_INT, local) != MPI_SUCCESS) {
        free(all);
        sh_peers_free(p);
        return ck_err_set(err, -EIO, "rank %d: exchanging pids with the ranks of this host "
                          "failed", job->rank);
    }
    for (int i = 0; i < local_size; i++) {
        const int *o = all + 4 * i;
        if (o[1] == job->rank || o[2] != me[2] || o[3] != me[3])
            continue;
        int k = p->n++;
        p->pid[k] = (pid_t)o[0];
        p->rank[k] = o[1];
        p->fd[k] = (struct pollfd){.fd = (int)syscall(SYS_pidfd_open, p->pid[k], 0),
                                   .events = POLLIN};
    }
    free(all);
    *out = p;
    return 0;
}

/* The index of a peer that has exited, or -1. */
static int dead_peer(sh_peers *p)
{
    if (poll(p->fd, (nfds_t)p->n, 0) > 0)
        for (int i = 0; i < p->n; i++)
            if (p->fd[i].revents)
                return i;
    for (int i = 0; i < p->n; i++)
        if (p->fd[i].fd < 0 && kill(p->pid[i], 0) < 0 && errno == ESRCH)
            return i;
    return -1;
}

int sh_peers_watch(const sh_comm_job *job, double *next, const char *what, const char *comm,
                   ck_err *err)
{
    if (!job->peers || !job->peers->n)
        return 0;
    double now = mono_s();
    if (*next == 0.0)
        *next = now + 1.0;     /* short collectives never look */
    if (now < *next)
        return 0;
    *next = now + 1.0;
    int i = dead_peer(job->peers);
    if (i < 0)
        return 0;
    return ck_err_set(err, -EPIPE, "%s on %s (rank %d of %d): rank %d (pid %d, on this "
                      "host) has died; this rank stops waiting for it", what, comm,
                      job->rank, job->size, job->peers->rank[i], (int)job->peers->pid[i]);
}

void sh_abort(sh_world *w, int status)
{
    fflush(stdout);
    fflush(stderr);
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (w && up && !down)
        MPI_Abort(MPI_COMM_WORLD, status);
    _exit(status);
}
