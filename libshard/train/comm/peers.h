/* comm/peers.h - the peer watchdog (peers.c): a wait on a collective that notices a
 * dead rank of this host instead of waiting for it forever. */
#ifndef SH_COMM_PEERS_H
#define SH_COMM_PEERS_H

#include "comm/comm.h"

/* Learns the pids of the ranks of this host (collective over `local`, whose size is
 * local_size); job gives this rank's place. */
int sh_peers_new(const sh_comm_job *job, MPI_Comm local, int local_size, sh_peers **out,
                 ck_err *err);
void sh_peers_free(sh_peers *p);
/* Called in the loop of a blocking wait, *next zero at its start: -EPIPE, with a
 * message naming the collective, the comm and the dead rank, once a peer of this host
 * has exited; it looks at most once a second, and not in the first second. */
int sh_peers_watch(const sh_comm_job *job, double *next, const char *what, const char *comm,
                   ck_err *err);

#endif
