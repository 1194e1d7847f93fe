/* test_collective_fails_when_peer_dies: a collective that waits for a rank of this host
 * that has died returns -EPIPE naming that rank, instead of waiting forever. Run by
 * peer_dies.sh on 3 ranks under mpirun --enable-recovery (so mpirun does not end the
 * job itself): rank 2 dies by SIGKILL after a barrier; ranks 0 and 1 then enter an
 * all-reduce, and each prints "ok" or "FAILED" and ends the job with sh_abort. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sh/sh.h"

int main(int argc, char **argv)
{
    sh_world *w;
    ck_err err = {0};
    if (sh_init(&argc, &argv, &w, &err)) {
        fprintf(stderr, "FAILED: sh_init: %s\n", ck_err_msg(&err));
        return 1;
    }
    int rank = sh_world_rank(w);
    if (sh_world_size(w) != 3 || sh_world_local_size(w) != 3) {
        printf("FAILED: wants 3 ranks on one host\n");
        sh_abort(w, 1);
    }
    char pid[32];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    /* Every rank learns rank 2's pid, to find it in the message. */
    int dead = rank == 2 ? (int)getpid() : 0, dead_pid = 0;
    if (sh_all_reduce(sh_world_comm(w), &dead, &dead_pid, 1, CK_I32, SH_MAX, NULL, &err) ||
        sh_barrier(sh_world_comm(w), NULL, &err)) {
        printf("FAILED: rank %d: before the death: %s\n", rank, ck_err_msg(&err));
        sh_abort(w, 1);
    }
    if (rank == 2)
        raise(SIGKILL);
    double x = 1.0, sum = 0.0;
    int rc = sh_all_reduce(sh_world_comm(w), &x, &sum, 1, CK_F64, SH_SUM, NULL, &err);
    char want[64];
    snprintf(want, sizeof want, "rank 2 (pid %d, on this host) has died", dead_pid);
    bool ok = rc == -EPIPE && strstr(ck_err_msg(&err), want) &&
              strstr(ck_err_msg(&err), "all-reduce on world");
    printf("%s: rank %d: rc %d, \"%s\"\n", ok ? "ok" : "FAILED", rank, rc, ck_err_msg(&err));
    sh_abort(w, ok ? 0 : 1);
}
