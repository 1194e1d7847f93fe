/* conn.c - the client's end of the ckptd socket: connect, send, receive.
 *
 * Every wait here may have a deadline (CLOCK_MONOTONIC seconds), so that a daemon
 * that stops answering (SIGSTOP, a hung machine) costs its caller a bounded time: each
 * call is non-blocking and each wait a poll up to the deadline. Without one
 * (INFINITY) the calls block, and a socket's own SO_RCVTIMEO applies.
 */
#include "async/proto.h"

#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

double ck__conn_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Waits until sock is ready for events or the deadline: 1 ready, 0 the deadline came,
 * or -errno. */
static int wait_ready(int sock, short events, double deadline)
{
    for (;;) {
        int ms = -1;
        if (!isinf(deadline)) {
            double left = deadline - ck__conn_now();
            if (left <= 0)
                ms = 0;
            else
                ms = left > 86400.0 ? 86400000 : (int)(left * 1e3) + 1;
        }
        struct pollfd p = { .fd = sock, .events = events };
        int n = poll(&p, 1, ms);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n > 0)
            return 1;
        if (ms == 0 || ck__conn_now() >= deadline)
            return 0;
    }
}

int ck__conn_connect_by(const char *path, double deadline, int *fd, ck_err *err)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof a.sun_path)
        return ck_err_set(err, -ENAMETOOLONG, "ckptd socket %s: path too long", path);
    memcpy(a.sun_path, path, strlen(path));
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0)
        return ck_err_set(err, -errno, "socket: %s", strerror(errno));
    /* A Unix socket's connect fails with EAGAIN (there is no EINPROGRESS) while the
     * daemon's backlog is full: a daemon that stopped accepting. Tried again until the
     * deadline. */
    int e;
    while ((e = connect(s, (struct sockaddr *)&a, sizeof a) < 0 ? errno : 0) == EAGAIN ||
           e == EINTR) {
        if (ck__conn_now() >= deadline) {
            close(s);
            return ck_err_set(err, -ETIMEDOUT, "connecting to ckptd at %s: its backlog stayed "
                              "full (it accepts no connection)", path);
        }
        nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
    }
    if (e || fcntl(s, F_SETFL, fcntl(s, F_GETFL) & ~O_NONBLOCK) < 0) {
        e = e ? e : errno;
        close(s);
        return ck_err_set(err, -e, "connecting to ckptd at %s: %s", path, strerror(e));
    }
    *fd = s;
    return 0;
}

int ck__conn_connect(const char *path, int *fd, ck_err *err)
{
    return ck__conn_connect_by(path, INFINITY, fd, err);
}

int ck__conn_send_by(int sock, const ck__wbuf *w, int fd, double deadline, ck_err *err)
{
    size_t off = 0;
    while (off < w->len) {
        struct iovec iov = { .iov_base = w->p + off, .iov_len = w->len - off };
        union {
            struct cmsghdr h;
            char buf[CMSG_SPACE(sizeof(int))];
        } ctl;
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        if (fd >= 0 && off == 0) {
            memset(&ctl, 0, sizeof ctl);
            mh.msg_control = ctl.buf;
            mh.msg_controllen = sizeof ctl.buf;
            struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(c), &fd, sizeof fd);
        }
        ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL | (isinf(deadline) ? 0 : MSG_DONTWAIT));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !isinf(deadline)) {
            int r = wait_ready(sock, POLLOUT, deadline);
            if (r < 0)
                return ck_err_set(err, r, "poll: %s", strerror(-r));
            if (r == 0)
                return ck_err_set(err, -ETIMEDOUT, "ckptd took %zu of a %zu-byte message, "
                                  "then nothing more", off, w->len);
            continue;
        }
        if (n < 0)
            return ck_err_set(err, -errno, "sending to ckptd: %s", strerror(errno));
        off += (size_t)n;
    }
    return 0;
}

int ck__conn_send(int sock, const ck__wbuf *w, int fd, ck_err *err)
{
    return ck__conn_send_by(sock, w, fd, INFINITY, err);
}

static int read_full(int sock, void *buf, size_t len, double deadline, ck_err *err)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = recv(sock, (uint8_t *)buf + off, len - off,
                         isinf(deadline) ? 0 : MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !isinf(deadline)) {
            int r = wait_ready(sock, POLLIN, deadline);
            if (r < 0)
                return ck_err_set(err, r, "poll: %s", strerror(-r));
            if (r == 0)
                return ck_err_set(err, -ETIMEDOUT, "ckptd sent %zu bytes of a %zu-byte part "
                                  "of a reply, then nothing more", off, len);
            continue;
        }
        if (n < 0)
            return ck_err_set(err, -errno, "reading from ckptd: %s", strerror(errno));
        if (n == 0)
            return ck_err_set(err, -ECONNRESET, "ckptd closed the connection (did it die?)");
        off += (size_t)n;
    }
    return 0;
}

int ck__conn_recv_by(int sock, double start_by, double finish_by, ck__msg *m, ck_err *err)
{
    int r = isinf(start_by) ? 1 : wait_ready(sock, POLLIN, start_by);
    if (r < 0)
        return ck_err_set(err, r, "poll: %s", strerror(-r));
    if (r == 0)
        return 0;
    uint8_t hdr[CK_PROTO_HDR];
    if ((r = read_full(sock, hdr, sizeof hdr, finish_by, err)) < 0)
        return r;
    if ((r = ck__proto_header(hdr, &m->type, &m->len, err)) < 0)
        return ck_err_set(err, r, "reply from ckptd");
    m->payload = malloc(m->len ? m->len : 1);
    if (!m->payload)
        return ck_err_set(err, -ENOMEM, "out of memory for a %u-byte reply", m->len);
    if ((r = read_full(sock, m->payload, m->len, finish_by, err)) < 0) {
        free(m->payload);
        m->payload = NULL;
        return r;
    }
    return 1;
}

int ck__conn_recv(int sock, bool block, ck__msg *m, ck_err *err)
{
    return ck__conn_recv_by(sock, block ? INFINITY : ck__conn_now(), INFINITY, m, err);
}
