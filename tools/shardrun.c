/* shardrun - torchrun's command-line shape over OpenMPI's mpirun.
 *
 *   shardrun --nproc-per-node N [--] PROGRAM [ARGS...]                       one node
 *   shardrun --nproc-per-node N --hostfile FILE PROGRAM [ARGS...]            its hosts
 *   shardrun --nproc-per-node N --nnodes M --node-rank I --master-addr A
 *            [--master-port P] [--join-timeout S] PROGRAM [ARGS...]          on each node
 *
 * Starts N copies of PROGRAM on each node with mpirun and gives each the variables
 * torchrun would: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK. Ranks are
 * numbered node by node (node I holds ranks I*N .. I*N+N-1). It passes --oversubscribe
 * (N may exceed the cores, as in tests), --bind-to none, and --allow-run-as-root when
 * run as root (containers).
 *
 * Several nodes: with --hostfile, this one command starts every node's ranks (mpirun
 * reaches the hosts with its rsh agent, ssh by default). With torchrun's --nnodes
 * shape, every node runs shardrun; they meet at node 0 (shardrun_join.h), which then
 * starts the whole job with one mpirun, and every node's shardrun ends with the job's
 * exit status. Each node's ranks get that node's CKPTD_SOCKET (its own shardrun's, or
 * with --hostfile this one's), with %n replaced by the node rank and %h by the host
 * name: one ckptd per node, found by each rank, which also gets CKPTD_NODES (the
 * number of nodes, unless set: with --hostfile it is forwarded) so that the daemons
 * know how many of them share each save.
 *
 * mpirun starts this same binary in worker mode (an internal first argument), which
 * turns OpenMPI's variables into torchrun's and then execs PROGRAM, so PROGRAM needs
 * no wrapper and non-MPI programs see the variables too.
 *
 * Ranks die with their launcher. OpenMPI puts each rank in a process group of its
 * own, so a kill of the launcher's group (or of mpirun alone, by any signal) used to
 * leave the ranks training and committing checkpoints with nobody watching. The
 * worker asks the kernel for SIGKILL when its parent (mpirun, or orted on another
 * node) dies, before it execs PROGRAM; the request survives the exec. Node 0's
 * shardrun, which forks mpirun rather than becoming it, asks the same for mpirun; a
 * node whose shardrun goes away stops the job.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "shardrun_join.h"

#ifndef SHARDRUN_MPIRUN
#define SHARDRUN_MPIRUN "mpirun"
#endif

#define WORKER_FLAG "--shardrun-worker"
#define NODE_VAR "SHARDRUN_NODE_RANK"   /* mpirun -x, per node, for the worker */
#define NODES_MAX 4096

static void usage(FILE *f)
{
    fprintf(f,
        "usage: shardrun --nproc-per-node N [options] [--] PROGRAM [ARGS...]\n"
        "Runs N ranks of PROGRAM per node under mpirun with RANK, WORLD_SIZE, LOCAL_RANK,\n"
        "LOCAL_WORLD_SIZE and NODE_RANK set (torchrun's variables).\n"
        "  --hostfile FILE       run on the hosts of FILE (one a line: HOST [slots=K]),\n"
        "                        started from here; node ranks in the file's order\n"
        "  --nnodes M            torchrun's shape: run shardrun on each of M nodes with\n"
        "  --node-rank I         its rank (0..M-1); they meet at node 0's\n"
        "  --master-addr A       address A (node 0 listens there) and\n"
        "  --master-port P       port P (default 29500)\n"
        "  --join-timeout S      seconds to wait for every node to join (default 900)\n"
        "  --node-name NAME      the name mpirun reaches this node by (default: hostname)\n"
        "CKPTD_SOCKET is passed to each node's ranks, %%n replaced by the node rank and\n"
        "%%h by the host name; with it, CKPTD_NODES (one ckptd per node) is set to the\n"
        "number of nodes unless it is set.\n");
}

/* ---- the worker: runs as each rank, under mpirun ---- */

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

/* CKPTD_SOCKET with %n (node rank) and %h (host name) replaced, %% a percent. */
static int expand_socket(const char *node)
{
    const char *v = getenv("CKPTD_SOCKET");
    if (!v || !strchr(v, '%'))
        return 0;
    char host[SR_HOST_MAX] = "", out[PATH_MAX];
    gethostname(host, sizeof host - 1);
    size_t n = 0;
    for (const char *s = v; *s && n < sizeof out; s++) {
        const char *put = NULL;
        char one[2] = { *s, '\0' };
        if (*s != '%')
            put = one;
        else if (s[1] == 'n' || s[1] == 'h' || s[1] == '%')
            put = *++s == 'n' ? node : *s == 'h' ? host : "%";
        else {
            fprintf(stderr, "shardrun: CKPTD_SOCKET %s: '%%%c' is neither %%n (node rank), "
                    "%%h (host name) nor %%%%\n", v, s[1] ? s[1] : ' ');
            return -1;
        }
        n += (size_t)snprintf(out + n, sizeof out - n, "%s", put);
    }
    if (n >= sizeof out) {
        fprintf(stderr, "shardrun: CKPTD_SOCKET %s: too long once expanded\n", v);
        return -1;
    }
    return setenv("CKPTD_SOCKET", out, 1);
}

/* A job with a ckptd on each node: the client must know how many daemons serve the
 * job (CKPTD_NODES, docs/PROTOCOL.md), one per node unless the caller said otherwise. */
static int daemon_count(void)
{
    const char *sock = getenv("CKPTD_SOCKET"), *ws = getenv("OMPI_COMM_WORLD_SIZE"),
               *lws = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!sock || !*sock || getenv("CKPTD_NODES") || !ws || !lws || atoi(lws) < 1)
        return 0;
    char n[16];
    snprintf(n, sizeof n, "%d", atoi(ws) / atoi(lws));
    return setenv("CKPTD_NODES", n, 1);
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
    const char *node = getenv(NODE_VAR);
    if (!node)
        node = "0";
    if (export_from("RANK", "OMPI_COMM_WORLD_RANK") ||
        export_from("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE") ||
        export_from("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK") ||
        export_from("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE") ||
        setenv("NODE_RANK", node, 1) || expand_socket(node) || daemon_count())
        return 127;
    unsetenv(NODE_VAR);
    execvp(argv[0], argv);
    fprintf(stderr, "shardrun: cannot run %s: %s\n", argv[0], strerror(errno));
    return 127;
}

/* ---- the command line ---- */

typedef struct opts {
    long nproc, nnodes, node_rank, port;
    double join_timeout;
    const char *master_addr, *hostfile, *node_name;
    bool given_nnodes, given_node_rank, given_port;
    char **prog;                   /* PROGRAM [ARGS...], NULL-terminated */
} opts;

static int parse_long(const char *opt, const char *s, long lo, long hi, long *v)
{
    char *end;
    errno = 0;
    *v = strtol(s, &end, 10);
    if (errno || end == s || *end || *v < lo || *v > hi) {
        fprintf(stderr, "shardrun: %s wants a whole number from %ld to %ld, not '%s'\n", opt,
                lo, hi, s);
        return -1;
    }
    return 0;
}

/* Matches option a (after normalizing torchrun's underscores) against name; takes its
 * value from "=VALUE" or the next argument. Returns 1 matched, 0 not, -1 no value. */
static int opt_value(char **argv, int argc, int *i, const char *name, const char **val)
{
    char a[64];
    snprintf(a, sizeof a, "%s", argv[*i]);
    for (char *p = a + 2; *p && *p != '='; p++)
        if (*p == '_')
            *p = '-';
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0 || (a[n] != '\0' && a[n] != '='))
        return 0;
    if (a[n] == '=') {
        *val = argv[*i] + n + 1;
        return 1;
    }
    if (*i + 1 >= argc) {
        fprintf(stderr, "shardrun: %s needs a value\n", name);
        return -1;
    }
    *val = argv[++*i];
    return 1;
}

/* Returns 0, 1 after --help, or 2 (a usage error, already said). */
static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){ .nnodes = 1, .port = 29500, .join_timeout = 900 };
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 1;
        }
        if (a[0] != '-')
            break;
        int m;
        if ((m = opt_value(argv, argc, &i, "--nproc-per-node", &v))) {
            if (m < 0 || parse_long("--nproc-per-node", v, 1, 4096, &o->nproc))
                return 2;
        } else if ((m = opt_value(argv, argc, &i, "--nnodes", &v))) {
            if (m < 0 || parse_long("--nnodes", v, 1, NODES_MAX, &o->nnodes))
                return 2;
            o->given_nnodes = true;
        } else if ((m = opt_value(argv, argc, &i, "--node-rank", &v))) {
            if (m < 0 || parse_long("--node-rank", v, 0, NODES_MAX - 1, &o->node_rank))
                return 2;
            o->given_node_rank = true;
        } else if ((m = opt_value(argv, argc, &i, "--master-port", &v))) {
            if (m < 0 || parse_long("--master-port", v, 1, 65535, &o->port))
                return 2;
            o->given_port = true;
        } else if ((m = opt_value(argv, argc, &i, "--master-addr", &o->master_addr)) ||
                   (m = opt_value(argv, argc, &i, "--hostfile", &o->hostfile)) ||
                   (m = opt_value(argv, argc, &i, "--node-name", &o->node_name))) {
            if (m < 0)
                return 2;
            const char *bad = o->master_addr && !*o->master_addr ? "--master-addr"
                            : o->hostfile && !*o->hostfile ? "--hostfile"
                            : o->node_name && !*o->node_name ? "--node-name" : NULL;
            if (bad) {
                fprintf(stderr, "shardrun: %s needs a value, not an empty string\n", bad);
                return 2;
            }
        } else if ((m = opt_value(argv, argc, &i, "--join-timeout", &v))) {
            char *end;
            if (m > 0) {
                errno = 0;
                o->join_timeout = strtod(v, &end);
            }
            if (m < 0 || errno || end == v || *end || !(o->join_timeout > 0) ||
                o->join_timeout > 1e7) {
                if (m > 0)
                    fprintf(stderr, "shardrun: --join-timeout wants seconds above 0, not "
                            "'%s'\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "shardrun: unknown option %s (see --help)\n", a);
            return 2;
        }
    }
    o->prog = argv + i;
    if (!o->nproc) {
        fprintf(stderr, "shardrun: --nproc-per-node is required (see --help)\n");
        return 2;
    }
    if (i >= argc) {
        fprintf(stderr, "shardrun: no PROGRAM to run (see --help)\n");
        return 2;
    }
    if (o->hostfile && (o->master_addr || o->given_node_rank || o->given_port)) {
        fprintf(stderr, "shardrun: --hostfile starts every node from here; --node-rank, "
                "--master-addr and --master-port are for running shardrun on each node: "
                "give one or the other\n");
        return 2;
    }
    if (o->node_rank >= o->nnodes) {
        fprintf(stderr, "shardrun: --node-rank %ld is not below --nnodes %ld (node ranks "
                "are 0..%ld)\n", o->node_rank, o->nnodes, o->nnodes - 1);
        return 2;
    }
    if (!o->hostfile && o->nnodes > 1 && !o->master_addr) {
        fprintf(stderr, "shardrun: --nnodes %ld needs --master-addr (node 0's address, "
                "where the nodes meet) and --node-rank, or a --hostfile\n", o->nnodes);
        return 2;
    }
    if (!o->hostfile && o->nnodes > 1 && !o->given_node_rank) {
        fprintf(stderr, "shardrun: --nnodes %ld needs this node's --node-rank (0..%ld)\n",
                o->nnodes, o->nnodes - 1);
        return 2;
    }
    if (o->nnodes == 1 && (o->master_addr || o->given_port))
        fprintf(stderr, "shardrun: one node: --master-addr and --master-port are not used\n");
    return 0;
}

/* The hosts of an mpirun-style host file: "HOST [slots=K] [max_slots=K]" a line, '#'
 * comments. The slot counts are checked, not used: --nproc-per-node decides. */
static int read_hostfile(const opts *o, sr_node **out, long *n)
{
    FILE *f = fopen(o->hostfile, "r");
    if (!f) {
        fprintf(stderr, "shardrun: --hostfile %s: %s\n", o->hostfile, strerror(errno));
        return 2;
    }
    sr_node *nodes = NULL;
    char line[1024];
    int lineno = 0, rc = 0;
    *n = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            fprintf(stderr, "shardrun: %s:%d: line too long\n", o->hostfile, lineno);
            rc = 2;
            break;
        }
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *save = NULL, *host = strtok_r(line, " \t\r\n", &save);
        if (!host)
            continue;
        if (!sr_host_name_ok(host)) {
            fprintf(stderr, "shardrun: %s:%d: '%s' is not a host name\n", o->hostfile,
                    lineno, host);
            rc = 2;
        }
        for (char *kv; !rc && (kv = strtok_r(NULL, " \t\r\n", &save));) {
            long k;
            char *eq = strchr(kv, '=');
            if (!eq || (strncmp(kv, "slots=", 6) != 0 && strncmp(kv, "max_slots=", 10) != 0 &&
                        strncmp(kv, "max-slots=", 10) != 0)) {
                fprintf(stderr, "shardrun: %s:%d: '%s': a host line is HOST [slots=K] "
                        "[max_slots=K]\n", o->hostfile, lineno, kv);
                rc = 2;
            } else if (parse_long(kv, eq + 1, 1, 1 << 20, &k)) {
                fprintf(stderr, "shardrun: (in %s:%d)\n", o->hostfile, lineno);
                rc = 2;
            }
        }
        for (long j = 0; !rc && j < *n; j++)
            if (strcmp(nodes[j].host, host) == 0) {
                fprintf(stderr, "shardrun: %s:%d: host %s is listed twice (one line per "
                        "node; --nproc-per-node sets its ranks)\n", o->hostfile, lineno, host);
                rc = 2;
            }
        if (!rc && *n == NODES_MAX) {
            fprintf(stderr, "shardrun: %s: more than %d hosts\n", o->hostfile, NODES_MAX);
            rc = 2;
        }
        sr_node *g = rc ? NULL : realloc(nodes, sizeof *nodes * (size_t)(*n + 1));
        if (!rc && !g)
            rc = 1;
        if (!rc) {
            nodes = g;
            nodes[*n] = (sr_node){ .fd = -1 };
            snprintf(nodes[*n].host, SR_HOST_MAX, "%s", host);
            (*n)++;
        }
    }
    if (!rc && ferror(f)) {
        fprintf(stderr, "shardrun: --hostfile %s: %s\n", o->hostfile, strerror(errno));
        rc = 2;
    }
    fclose(f);
    if (!rc && *n == 0) {
        fprintf(stderr, "shardrun: --hostfile %s names no host\n", o->hostfile);
        rc = 2;
    }
    if (!rc && o->given_nnodes && *n != o->nnodes) {
        fprintf(stderr, "shardrun: --nnodes %ld, but --hostfile %s lists %ld hosts\n",
                o->nnodes, o->hostfile, *n);
        rc = 2;
    }
    if (rc) {
        free(nodes);
        return rc;
    }
    *out = nodes;
    return 0;
}

/* mpirun's command line and the strings made for it. */
typedef struct command {
    char **argv;                   /* NULL-terminated */
    char **owned;
    size_t nowned;
} command;

static void command_free(command *c)
{
    for (size_t i = 0; i < c->nowned; i++)
        free(c->owned[i]);
    free(c->owned);
    free(c->argv);
}

/* Appends a formatted argument that c owns; -1 when out of memory. */
__attribute__((format(printf, 3, 4)))
static int add_owned(command *c, size_t *k, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *a = NULL;
    int n = vasprintf(&a, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    c->owned[c->nowned++] = a;
    c->argv[(*k)++] = a;
    return 0;
}

/* mpirun's command: one app context per node (its host, its node rank, its
 * CKPTD_SOCKET), in node-rank order, so ranks are numbered node by node. With nodes
 * NULL, one context on this host. Returns 0, or -1 when out of memory. */
static int mpirun_cmd(const opts *o, const sr_node *nodes, long nnodes, const char *self,
                      command *c)
{
    size_t nprog = 0;
    while (o->prog[nprog])
        nprog++;
    /* A node's context at most: ":", -np N, -H h, three -x pairs, self, the worker
     * flag (13), and the program; before them mpirun and four options, after, NULL. */
    size_t per = 13 + nprog, k = 0;
    *c = (command){ calloc(6 + (size_t)nnodes * per, sizeof(char *)),
                    calloc(4 * (size_t)nnodes, sizeof(char *)), 0 };   /* 4 a node at most */
    if (!c->argv || !c->owned)
        goto oom;
    c->argv[k++] = SHARDRUN_MPIRUN;
    c->argv[k++] = "--oversubscribe";
    c->argv[k++] = "--bind-to";
    c->argv[k++] = "none";
    if (geteuid() == 0)
        c->argv[k++] = "--allow-run-as-root";
    for (long i = 0; i < nnodes; i++) {
        if (i)
            c->argv[k++] = ":";
        c->argv[k++] = "-np";
        if (add_owned(c, &k, "%ld", o->nproc))
            goto oom;
        if (nodes) {
            c->argv[k++] = "-H";
            if (add_owned(c, &k, "%s:%ld", nodes[i].host, o->nproc))
                goto oom;
        }
        c->argv[k++] = "-x";
        if (add_owned(c, &k, NODE_VAR "=%ld", i))
            goto oom;
        /* Across nodes, each node's own socket (mpirun forwards no variable by itself;
         * by rendezvous an unset one is passed empty, which clients take as unset). */
        if (nodes && (o->master_addr || nodes[i].socket[0])) {
            c->argv[k++] = "-x";
            if (add_owned(c, &k, "CKPTD_SOCKET=%s", nodes[i].socket))
                goto oom;
        }
        if (nodes && getenv("CKPTD_NODES")) {
            c->argv[k++] = "-x";
            c->argv[k++] = "CKPTD_NODES";
        }
        c->argv[k++] = (char *)self;
        c->argv[k++] = WORKER_FLAG;
        for (size_t j = 0; j < nprog; j++)
            c->argv[k++] = o->prog[j];
    }
    c->argv[k] = NULL;
    return 0;
oom:
    command_free(c);
    fprintf(stderr, "shardrun: out of memory for mpirun's command line\n");
    return -1;
}

static void node_defaults(const opts *o, sr_node *me)
{
    *me = (sr_node){ .fd = -1 };
    if (o->node_name)
        snprintf(me->host, SR_HOST_MAX, "%s", o->node_name);
    else if (gethostname(me->host, SR_HOST_MAX - 1))
        snprintf(me->host, SR_HOST_MAX, "localhost");
    const char *s = getenv("CKPTD_SOCKET");
    snprintf(me->socket, SR_SOCKET_MAX, "%s", s ? s : "");
}

static int run_mpirun(char **cmd)
{
    execvp(cmd[0], cmd);
    fprintf(stderr, "shardrun: cannot run %s: %s\n", cmd[0], strerror(errno));
    return 127;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], WORKER_FLAG) == 0)
        return worker(argv + 2);

    opts o;
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : rc;
    sr_node me;
    node_defaults(&o, &me);
    if (o.node_name && !sr_host_name_ok(o.node_name)) {
        fprintf(stderr, "shardrun: --node-name '%s' is not a host name\n", o.node_name);
        return 2;
    }
    if (strlen(me.socket) >= SR_SOCKET_MAX - 1 || strpbrk(me.socket, "\t\n")) {
        fprintf(stderr, "shardrun: CKPTD_SOCKET is too long or holds a tab or newline\n");
        return 2;
    }
    sr_join_opts jo = { (int)o.nnodes, (int)o.node_rank, (int)o.nproc, o.master_addr, NULL,
                        o.join_timeout };
    char port[16];
    snprintf(port, sizeof port, "%ld", o.port);
    jo.master_port = port;
    if (o.nnodes > 1 && !o.hostfile && o.node_rank > 0)
        return sr_node_join(&jo, &me);

    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len < 0) {
        fprintf(stderr, "shardrun: cannot find its own path: %s\n", strerror(errno));
        return 1;
    }
    self[len] = '\0';

    sr_node *nodes = NULL;
    long nnodes = 1;
    if (o.hostfile && (rc = read_hostfile(&o, &nodes, &nnodes)))
        return rc;
    if (o.hostfile) {
        /* One command for every node: this shardrun's socket, expanded on each. */
        for (long i = 0; i < nnodes; i++)
            snprintf(nodes[i].socket, SR_SOCKET_MAX, "%s", me.socket);
    } else if (o.nnodes > 1) {
        nnodes = o.nnodes;
        nodes = calloc((size_t)nnodes, sizeof *nodes);
        if (!nodes)
            return 1;
        nodes[0] = me;
        char err[SR_ERR_MAX];
        if (sr_master_gather(&jo, nodes, err)) {
            fprintf(stderr, "shardrun: node 0: %s\n", err);
            free(nodes);
            return 2;
        }
    }
    command cmd;
    if (mpirun_cmd(&o, nodes, nnodes, self, &cmd)) {
        free(nodes);
        return 1;
    }
    if (!(o.nnodes > 1 && !o.hostfile))
        return run_mpirun(cmd.argv);

    pid_t pid = fork();
    if (pid == 0) {
        pid_t parent = getppid();
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
            _exit(127);
        _exit(run_mpirun(cmd.argv));
    }
    command_free(&cmd);
    if (pid < 0) {
        fprintf(stderr, "shardrun: fork: %s\n", strerror(errno));
        rc = 1;
    } else {
        rc = sr_master_supervise(&jo, nodes, pid);
    }
    free(nodes);
    return rc;
}
