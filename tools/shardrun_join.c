/* shardrun_join.c - the rendezvous of shardrun's nodes (see shardrun_join.h). */
#include "shardrun_join.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define JOIN_MAGIC "shardrun-join"
#define JOIN_VERSION 1
#define LINE_MAX_ (SR_HOST_MAX + SR_SOCKET_MAX + 128)

bool sr_host_name_ok(const char *h)
{
    if (!*h || strlen(h) >= SR_HOST_MAX)
        return false;
    for (; *h; h++)
        if (!isalnum((unsigned char)*h) && !strchr(".-_:", *h))
            return false;
    return true;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Milliseconds left until deadline, for poll: at least 0. */
static int left_ms(double deadline)
{
    double l = (deadline - now_s()) * 1e3;
    return l <= 0 ? 0 : l > 1e9 ? 1000000000 : (int)l;
}

static void say(char err[SR_ERR_MAX], const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, SR_ERR_MAX, fmt, ap);
    va_end(ap);
}

static int send_all(int fd, const char *buf, size_t len)
{
    while (len) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

static void send_line(int fd, const char *fmt, ...)
{
    char line[LINE_MAX_];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < sizeof line)
        send_all(fd, line, (size_t)n);   /* a node gone meanwhile learns nothing anyway */
}

/* Reads one line (without its '\n') by deadline. Returns its length, 0 at EOF, -1 on
 * an error, a timeout or a line longer than cap - 1. Reads byte by byte: the lines are
 * few and short, and nothing after a line may be consumed. */
static int read_line(int fd, char *buf, size_t cap, double deadline)
{
    size_t n = 0;
    for (;;) {
        struct pollfd p = { fd, POLLIN, 0 };
        int r = poll(&p, 1, left_ms(deadline));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        char ch;
        ssize_t got = read(fd, &ch, 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return -1;
        if (got == 0)
            return n ? -1 : 0;
        if (ch == '\n') {
            buf[n] = '\0';
            return (int)n;
        }
        if (n + 1 >= cap)
            return -1;
        buf[n++] = ch;
    }
}

/* Splits line at tabs into at most max fields; returns their count. */
static int fields(char *line, char **f, int max)
{
    int n = 0;
    for (char *s = line; n < max; n++) {
        f[n] = s;
        char *t = strchr(s, '\t');
        if (!t)
            return n + 1;
        *t = '\0';
        s = t + 1;
    }
    return n;
}

static void tell_all(sr_node *nodes, int nnodes, const char *fmt, const char *arg)
{
    for (int i = 1; i < nnodes; i++)
        if (nodes[i].fd >= 0)
            send_line(nodes[i].fd, fmt, arg);
}

static void close_all(sr_node *nodes, int nnodes)
{
    for (int i = 1; i < nnodes; i++)
        if (nodes[i].fd >= 0) {
            close(nodes[i].fd);
            nodes[i].fd = -1;
        }
}

static int listen_on(const sr_join_opts *o, char err[SR_ERR_MAX])
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE }, *ai;
    int r = getaddrinfo(o->master_addr, o->master_port, &hints, &ai);
    if (r) {
        say(err, "--master-addr %s --master-port %s: %s", o->master_addr, o->master_port,
            gai_strerror(r));
        return -1;
    }
    int fd = -1, e = 0;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        int one = 1;
        if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
                        bind(fd, a->ai_addr, a->ai_addrlen) || listen(fd, 64))) {
            e = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd < 0)
        say(err, "node 0 cannot listen on %s:%s (--master-addr must be an address of "
            "node 0): %s", o->master_addr, o->master_port, strerror(e ? e : errno));
    return fd;
}

/* The node already joined (or node 0) that goes by host, or -1. */
static int same_host(const sr_join_opts *o, const sr_node *nodes, const char *host)
{
    for (int i = 0; i < o->nnodes; i++)
        if ((i == 0 || nodes[i].fd >= 0) && strcmp(nodes[i].host, host) == 0)
            return i;
    return -1;
}

/* One connection's hello, checked against this job. Returns 0 (nodes[rank] filled),
 * 1 for a stranger (not a shardrun of this protocol: ignored) or -1 for a node of
 * another configuration (err says how; the job cannot run). */
static int take_hello(const sr_join_opts *o, int fd, sr_node *nodes, double deadline,
                      char err[SR_ERR_MAX])
{
    char line[LINE_MAX_], *f[8];
    /* A node sends its hello as soon as it connects: a connection that stays silent (a
     * port probe, a half-open socket) is dropped after a few seconds instead of
     * keeping the nodes behind it from joining until the join deadline. */
    double hello_by = now_s() + 5.0;
    int len = read_line(fd, line, sizeof line, hello_by < deadline ? hello_by : deadline);
    if (len <= 0 || fields(line, f, 8) != 7 || strcmp(f[0], JOIN_MAGIC) != 0)
        return 1;
    if (atoi(f[1]) != JOIN_VERSION) {
        say(err, "a node speaks join protocol %s, node 0 speaks %d (mixed shardrun "
            "versions)", f[1], JOIN_VERSION);
        return -1;
    }
    int nn = atoi(f[2]), rank = atoi(f[3]), np = atoi(f[4]), same;
    if (nn != o->nnodes)
        say(err, "node %d (%s) says --nnodes %d, node 0 says %d", rank, f[5], nn, o->nnodes);
    else if (rank < 1 || rank >= o->nnodes)
        say(err, "node %s joined as node rank %s, outside 1..%d", f[5], f[3], o->nnodes - 1);
    else if (nodes[rank].fd >= 0)
        say(err, "node rank %d joined twice (hosts %s and %s): every node needs its own "
            "--node-rank", rank, nodes[rank].host, f[5]);
    else if (np != o->nproc)
        say(err, "node %d (%s) says --nproc-per-node %d, node 0 says %d (every node runs "
            "as many ranks)", rank, f[5], np, o->nproc);
    else if (!sr_host_name_ok(f[5]) || strlen(f[6]) >= SR_SOCKET_MAX)
        say(err, "node %d sent a host name that is empty, overlong or not [A-Za-z0-9.-_:] "
            "(it goes into mpirun's -H), or an overlong socket", rank);
    else if ((same = same_host(o, nodes, f[5])) >= 0)
        say(err, "nodes %d and %d both go by host name %s (mpirun tells hosts apart by "
            "name: give each node its own, or --node-name)", same, rank, f[5]);
    else {
        nodes[rank].fd = fd;
        snprintf(nodes[rank].host, SR_HOST_MAX, "%s", f[5]);
        snprintf(nodes[rank].socket, SR_SOCKET_MAX, "%s", f[6]);
        return 0;
    }
    send_line(fd, "error\t%s\n", err);
    return -1;
}

int sr_master_gather(const sr_join_opts *o, sr_node *nodes, char err[SR_ERR_MAX])
{
    for (int i = 1; i < o->nnodes; i++)
        nodes[i].fd = -1;
    int lfd = listen_on(o, err);
    if (lfd < 0)
        return -1;
    double deadline = now_s() + o->timeout_s;
    int joined = 1, rc = 0;
    while (joined < o->nnodes) {
        struct pollfd p = { lfd, POLLIN, 0 };
        int r = poll(&p, 1, left_ms(deadline));
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0) {
            char missing[256] = "";
            size_t n = 0;
            for (int i = 1; i < o->nnodes && n < sizeof missing - 16; i++)
                if (nodes[i].fd < 0)
                    n += (size_t)snprintf(missing + n, sizeof missing - n, "%s%d",
                                          n ? ", " : "", i);
            say(err, "only %d of %d nodes joined %s:%s within %g s (missing node ranks: %s)",
                joined, o->nnodes, o->master_addr, o->master_port, o->timeout_s, missing);
            rc = -1;
            break;
        }
        int fd = r > 0 ? accept4(lfd, NULL, NULL, SOCK_CLOEXEC) : -1;
        if (fd < 0)
            continue;
        int h = take_hello(o, fd, nodes, deadline, err);
        if (h < 0) {
            close(fd);
            rc = -1;
            break;
        }
        if (h > 0)
            close(fd);
        else
            joined++;
    }
    close(lfd);
    if (rc) {
        tell_all(nodes, o->nnodes, "error\t%s\n", err);
        close_all(nodes, o->nnodes);
        return -1;
    }
    tell_all(nodes, o->nnodes, "ok\n%s", "");
    return 0;
}

static int exit_code(int status)
{
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int sr_master_supervise(const sr_join_opts *o, sr_node *nodes, int pid)
{
    int n = o->nnodes, code = -1;
    struct pollfd *p = calloc((size_t)n, sizeof *p);
    while (code < 0) {
        int status;
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) {
            code = exit_code(status);
            break;
        }
        int k = 0;
        for (int i = 1; p && i < n; i++)
            p[k++] = (struct pollfd){ nodes[i].fd, POLLIN, 0 };
        /* A joined node sends nothing more: readable means it went away. */
        if (poll(p, (nfds_t)k, 200) > 0) {
            for (int i = 0; i < k; i++)
                if (p[i].revents) {
                    fprintf(stderr, "shardrun: node %d (%s) went away: stopping the job\n",
                            i + 1, nodes[i + 1].host);
                    kill(pid, SIGTERM);
                    waitpid(pid, &status, 0);
                    code = 1;
                    break;
                }
        }
    }
    free(p);
    char c[16];
    snprintf(c, sizeof c, "%d", code);
    tell_all(nodes, n, "exit\t%s\n", c);
    close_all(nodes, n);
    return code;
}

/* Connects to node 0 by deadline, retrying while it is not listening yet. */
static int connect_master(const sr_join_opts *o, double deadline)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
    int r = getaddrinfo(o->master_addr, o->master_port, &hints, &ai);
    if (r) {
        fprintf(stderr, "shardrun: node %d: --master-addr %s --master-port %s: %s\n",
                o->node_rank, o->master_addr, o->master_port, gai_strerror(r));
        return -1;
    }
    int e = 0;
    for (;;) {
        for (struct addrinfo *a = ai; a; a = a->ai_next) {
            int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                            a->ai_protocol);
            if (fd < 0)
                continue;
            r = connect(fd, a->ai_addr, a->ai_addrlen);
            if (r && errno == EINPROGRESS) {
                struct pollfd p = { fd, POLLOUT, 0 };
                socklen_t sl = sizeof e;
                if (poll(&p, 1, left_ms(deadline)) == 1 &&
                    getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &sl) == 0)
                    r = e ? -1 : 0;
                else
                    e = ETIMEDOUT;
            } else if (r) {
                e = errno;
            }
            if (r == 0 && fcntl(fd, F_SETFL, 0) == 0) {
                freeaddrinfo(ai);
                return fd;
            }
            close(fd);
        }
        if (left_ms(deadline) == 0)
            break;
        usleep(left_ms(deadline) < 250 ? (useconds_t)left_ms(deadline) * 1000 : 250000);
    }
    freeaddrinfo(ai);
    fprintf(stderr, "shardrun: node %d: cannot reach the master at %s:%s within %g s "
            "(--join-timeout): %s\n", o->node_rank, o->master_addr, o->master_port,
            o->timeout_s, strerror(e ? e : ETIMEDOUT));
    return -1;
}

int sr_node_join(const sr_join_opts *o, const sr_node *me)
{
    double deadline = now_s() + o->timeout_s;
    int fd = connect_master(o, deadline);
    if (fd < 0)
        return 2;
    char line[LINE_MAX_], *f[3];
    send_line(fd, JOIN_MAGIC "\t%d\t%d\t%d\t%d\t%s\t%s\n", JOIN_VERSION, o->nnodes,
              o->node_rank, o->nproc, me->host, me->socket);
    /* Until every node is here, the join timeout holds; then the job runs unbounded. */
    int len = read_line(fd, line, sizeof line, deadline);
    int nf = len > 0 ? fields(line, f, 3) : 0;
    if (nf == 1 && strcmp(f[0], "ok") == 0) {
        fprintf(stderr, "shardrun: node %d (%s) joined; the job runs from node 0\n",
                o->node_rank, me->host);
        len = read_line(fd, line, sizeof line, now_s() + 1e12);
        nf = len > 0 ? fields(line, f, 3) : 0;
    }
    close(fd);
    if (nf == 2 && strcmp(f[0], "exit") == 0)
        return atoi(f[1]);
    if (nf == 2 && strcmp(f[0], "error") == 0) {
        fprintf(stderr, "shardrun: node %d: node 0 refused the job: %s\n", o->node_rank, f[1]);
        return 2;
    }
    if (len < 0 && left_ms(deadline) == 0)
        fprintf(stderr, "shardrun: node %d: the other nodes did not all join within %g s "
                "(--join-timeout)\n", o->node_rank, o->timeout_s);
    else
        fprintf(stderr, "shardrun: node %d: the master at %s:%s went away\n", o->node_rank,
                o->master_addr, o->master_port);
    return len < 0 && left_ms(deadline) == 0 ? 2 : 1;
}
