/* shardrun_join.h - the rendezvous of shardrun's nodes (torchrun's --nnodes shape).
 *
 * Every node runs shardrun with the same --nnodes, --nproc-per-node, --master-addr and
 * --master-port and its own --node-rank. Node 0 listens on MASTER_ADDR:MASTER_PORT;
 * each other node connects (retrying until the join timeout), says who it is in one
 * line, and waits. Once every node has joined, node 0 starts the whole job with one
 * mpirun (its hosts in node-rank order) and, when it ends, sends every node the exit
 * status, which each node's shardrun exits with. The protocol (version 1), lines of
 * tab-separated fields:
 *
 *   node -> master   "shardrun-join\t1\tNNODES\tNODE_RANK\tNPROC\tHOSTNAME\tCKPTD_SOCKET\n"
 *   master -> node   "ok\n" (every node is here; the job starts)
 *                    "error\tMESSAGE\n" (the job will not run; the node exits 2)
 *                    "exit\tCODE\n" (the job ended with CODE)
 *
 * Nothing here compares clocks across hosts: every deadline is a local duration.
 */
#ifndef SHARDRUN_JOIN_H
#define SHARDRUN_JOIN_H

#include <stdbool.h>

#define SR_HOST_MAX 256
#define SR_SOCKET_MAX 1024
#define SR_ERR_MAX 512

typedef struct sr_node {
    char host[SR_HOST_MAX];        /* the name mpirun reaches the node by */
    char socket[SR_SOCKET_MAX];    /* its CKPTD_SOCKET; "" when unset */
    int fd;                        /* master: the node's connection; -1 for node 0 */
} sr_node;

typedef struct sr_join_opts {
    int nnodes, node_rank, nproc;
    const char *master_addr, *master_port;
    double timeout_s;              /* to join (nodes) or to be joined by all (master) */
} sr_join_opts;

/* A host name mpirun's -H can take: [A-Za-z0-9.-_:], under SR_HOST_MAX bytes. */
bool sr_host_name_ok(const char *h);

/* Node 0: listens and waits until all nnodes nodes have joined; nodes[0] is filled
 * by the caller (this node), nodes[1..nnodes) here, in node-rank order. Returns 0, or
 * -1 with a message in err (every node that had joined is told, and let go). */
int sr_master_gather(const sr_join_opts *o, sr_node *nodes, char err[SR_ERR_MAX]);

/* Node 0, once the job is started: waits for the child pid (mpirun) while watching
 * the nodes; a node that goes away stops the job. Tells every node the outcome and
 * returns the exit status to exit with. */
int sr_master_supervise(const sr_join_opts *o, sr_node *nodes, int pid);

/* Every other node: joins node 0 as *me and waits for the job to end. Returns the
 * exit status to exit with (2, with a message on stderr, when it could not join). */
int sr_node_join(const sr_join_opts *o, const sr_node *me);

#endif
