/* conn.c - the client's end of the ckptd socket: connect, send, receive. */
#include "async/proto.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int ck__conn_connect(const char *path, int *fd, ck_err *err)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof a.sun_path)
        return ck_err_set(err, -ENAMETOOLONG, "ckptd socket %s: path too long", path);
    memcpy(a.sun_path, path, strlen(path));
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return ck_err_set(err, -errno, "socket: %s", strerror(errno));
    if (connect(s, (struct sockaddr *)&a, sizeof a) < 0) {
        int e = errno;
        close(s);
        return ck_err_set(err, -e, "connecting to ckptd at %s: %s", path, strerror(e));
    }
    *fd = s;
    return 0;
}

int ck__conn_send(int sock, const ck__wbuf *w, int fd, ck_err *err)
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
        ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return ck_err_set(err, -errno, "sending to ckptd: %s", strerror(errno));
        off += (size_t)n;
    }
    return 0;
}

static int read_full(int sock, void *buf, size_t len, ck_err *err)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = recv(sock, (uint8_t *)buf + off, len - off, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return ck_err_set(err, -errno, "reading from ckptd: %s", strerror(errno));
        if (n == 0)
            return ck_err_set(err, -ECONNRESET, "ckptd closed the connection (did it die?)");
        off += (size_t)n;
    }
    return 0;
}

int ck__conn_recv(int sock, bool block, ck__msg *m, ck_err *err)
{
    if (!block) {
        struct pollfd p = { .fd = sock, .events = POLLIN };
        int n = poll(&p, 1, 0);
        if (n < 0)
            return ck_err_set(err, -errno, "poll: %s", strerror(errno));
        if (n == 0)
            return 0;
    }
    uint8_t hdr[CK_PROTO_HDR];
    int r = read_full(sock, hdr, sizeof hdr, err);
    if (r < 0)
        return r;
    if ((r = ck__proto_header(hdr, &m->type, &m->len, err)) < 0)
        return ck_err_set(err, r, "reply from ckptd");
    m->payload = malloc(m->len ? m->len : 1);
    if (!m->payload)
        return ck_err_set(err, -ENOMEM, "out of memory for a %u-byte reply", m->len);
    if ((r = read_full(sock, m->payload, m->len, err)) < 0) {
        free(m->payload);
        m->payload = NULL;
        return r;
    }
    return 1;
}
