/* kd_server.c - the Unix socket, who may connect, and the event loop.
 *
 * ckptd never listens on a network port. Its socket is created mode 0600 (under a
 * umask, so there is no window where it is wider), and every peer's uid is checked
 * with SO_PEERCRED: a process of another user is refused and logged even if the
 * mode was loosened. Signals arrive through a signalfd and the save engine's events
 * through an eventfd, so the one loop thread owns all state and no handler runs
 * asynchronously.
 *
 * Out of descriptors (EMFILE, ENFILE), accept cannot take a connection off the
 * listening socket, which then stays readable: a level-triggered loop would spin on
 * it at 100% of a core. A reserve descriptor is given up to accept that connection,
 * tell it why (ERROR) and close it; where even that fails, the socket is not listened
 * to for a second. Either is logged once, until a client is taken again.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "kd.h"

#include "io/rootfs.h"
#include "io/writer.h"

enum { TAG_LISTEN = 1, TAG_SIGNAL, TAG_EVENT, TAG_CLIENT0 = 16 };

static int ep_add(kd_server *s, int fd, uint64_t tag)
{
    struct epoll_event ev = { .events = EPOLLIN, .data.u64 = tag };
    return epoll_ctl(s->ep_fd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

static int listen_on(kd_server *s, ck_err *err)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    if (strlen(s->o.socket) >= sizeof a.sun_path)
        return ck_err_set(err, -ENAMETOOLONG, "socket path %s is too long", s->o.socket);
    memcpy(a.sun_path, s->o.socket, strlen(s->o.socket));
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return ck_err_set(err, -errno, "socket: %s", strerror(errno));
    /* A socket file left by a daemon that was killed is stale; a live one answers. */
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        close(fd);
        return ck_err_set(err, -EADDRINUSE, "%s: another ckptd is serving it", s->o.socket);
    }
    unlink(s->o.socket);
    mode_t old = umask(0177);
    int r = bind(fd, (struct sockaddr *)&a, sizeof a);
    umask(old);
    /* The umask made it 0600 already; the chmod only says so, and never follows a link
     * planted in its place meanwhile. */
    if (r < 0 || fchmodat(AT_FDCWD, s->o.socket, 0600, AT_SYMLINK_NOFOLLOW) < 0 ||
        listen(fd, 128) < 0) {
        int e = errno;
        close(fd);
        return ck_err_set(err, -e, "listening on %s: %s", s->o.socket, strerror(e));
    }
    s->listen_fd = fd;
    return 0;
}

int kd_server_start(kd_server *s, ck_err *err)
{
    s->listen_fd = s->ep_fd = s->sig_fd = s->ev_fd = s->lock_fd = -1;
    s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    pthread_mutex_init(&s->ev_mu, NULL);
    pthread_rwlock_init(&s->fetching, NULL);
    /* A file, a FIFO or a link to nothing is refused as not a directory, naming it. */
    int r = ck__root_open(s->o.root, err);
    if (r < 0)
        return r;
    close(r);
    if (!realpath(s->o.root, s->root))
        return ck_err_set(err, -errno, "root %s: %s", s->o.root, strerror(errno));
    r = kd_recover(s, err);
    if (r < 0)
        return r;
    /* Blocked before any thread starts, so that every thread inherits the mask and the
     * signalfd is the only receiver: a SIGTERM never kills a writer mid-save. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    s->ev_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    s->ep_fd = epoll_create1(EPOLL_CLOEXEC);
    if (s->ev_fd < 0 || s->ep_fd < 0)
        return ck_err_set(err, -errno, "eventfd/epoll: %s", strerror(errno));
    if ((r = listen_on(s, err)) < 0)
        return r;
    if ((r = ep_add(s, s->listen_fd, TAG_LISTEN)) < 0 || (r = ep_add(s, s->ev_fd, TAG_EVENT)) < 0)
        return ck_err_set(err, r, "epoll: %s", strerror(-r));
    return 0;
}

int kd_server_signals(kd_server *s, ck_err *err)
{
    /* Made after detach's fork: a signalfd made by the parent still reads the child's
     * signals, but never wakes the child's epoll (its readiness is tied to the process
     * that made it), so a detached daemon slept through SIGTERM. Signals that came
     * meanwhile are pending, blocked since the start: it reads them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGPIPE);
    s->sig_fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (s->sig_fd < 0)
        return ck_err_set(err, -errno, "signalfd: %s", strerror(errno));
    int r = ep_add(s, s->sig_fd, TAG_SIGNAL);
    return r < 0 ? ck_err_set(err, r, "epoll: %s", strerror(-r)) : 0;
}

int kd_server_engine(kd_server *s, ck_err *err)
{
    int r;
    ck__saver_opts so = { .root = s->root, .engine = s->o.engine, .writers = s->o.writers,
                         .hash_threads = s->o.hash_threads, .io_size = CK_IO_SIZE_DEFAULT,
                         .mem_limit = (uint64_t)(s->o.io_depth < 8 ? 8 : s->o.io_depth) * CK_IO_SIZE_DEFAULT,
                         .log = kd_log_cb,
                         .event = kd_saver_event, .arg = s,
                         .node_id = s->o.id[0] ? s->o.id : NULL, .instance = s->instance,
                         .part_timeout = s->o.part_timeout, .dead_after = s->o.dead_after,
                         .local_root = s->local_root[0] ? s->local_root : NULL,
                         .replicas = s->o.replicas, .jump = s->o.jump,
                         .replicate = kd_tiersave_replicate };
    /* With peers to send to, a node's part goes out as it is written (decision 0204). */
    pthread_mutex_init(&s->early_mu, NULL);
    if (s->local_root[0] && s->o.replicas > 1) {
        so.replicate_begin = kd_early_begin;
        so.landed = kd_early_landed;
    }
    if ((r = ck__saver_new(&so, &s->saver, err)) < 0 || (r = kd_plan_start(s, err)) < 0)
        return r;
    kd_log(s, "daemon %s serving %s on %s (staging %llu bytes, plan memory %llu bytes, %u "
           "writers)", s->o.id, s->root, s->o.socket, (unsigned long long)s->o.staging,
           (unsigned long long)s->o.plan_memory, s->o.writers);
    return 0;
}

#define KD_LISTEN_PAUSE 1.0    /* s without listening when not even the reserve helps */

/* accept failed for want of descriptors: takes the connection off the queue through
 * the reserve descriptor and refuses it, or stops listening for a while. */
static void out_of_fds(kd_server *s, int e)
{
    if (!s->fds_short) {
        struct rlimit rl = { 0 };
        getrlimit(RLIMIT_NOFILE, &rl);
        kd_log(s, "out of file descriptors (%s; RLIMIT_NOFILE %llu, %u clients): refusing "
               "new clients until some leave", strerror(e), (unsigned long long)rl.rlim_cur,
               s->nclients);
        s->fds_short = true;
    }
    if (s->reserve_fd >= 0)
        close(s->reserve_fd);
    int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
        kd_client refused = { .fd = fd };
        kd_send_error(s, &refused, "", -EMFILE, "ckptd is out of file descriptors; retry "
                      "once other clients have left");
        close(fd);
    }
    s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || s->reserve_fd < 0) {
        epoll_ctl(s->ep_fd, EPOLL_CTL_DEL, s->listen_fd, NULL);
        s->listen_resume = kd_now() + KD_LISTEN_PAUSE;
    }
}

static void accept_one(kd_server *s)
{
    int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE))
        out_of_fds(s, errno);
    if (fd < 0)
        return;
    if (s->fds_short) {
        kd_log(s, "taking new clients again (%u connected)", s->nclients);
        s->fds_short = false;
    }
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 || cr.uid != getuid()) {
        kd_log(s, "refused a client of uid %d (pid %d): ckptd serves uid %d only",
               (int)cr.uid, (int)cr.pid, (int)getuid());
        close(fd);
        return;
    }
    kd_client *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return;
    }
    c->fd = fd;
    c->pid = cr.pid;
    c->id = TAG_CLIENT0 + s->next_id++;
    if (ep_add(s, fd, c->id) < 0) {
        close(fd);
        free(c);
        return;
    }
    c->next = s->clients;
    s->clients = c;
    s->nclients++;
}

static void drop(kd_server *s, kd_client *c)
{
    for (kd_client **pp = &s->clients; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    s->nclients--;
    kd_ckpt_client_gone(s, c);
    /* A loader's restore requests come on connections of their own: what they pinned
     * is its process's until its last connection goes. */
    bool last = true;
    for (kd_client *o = s->clients; o && last; o = o->next)
        last = o->pid != c->pid;
    if (last)
        kd_retain_unpin(s, (uint64_t)c->pid);
    epoll_ctl(s->ep_fd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    for (unsigned i = 0; i < c->nfds; i++)
        close(c->fds[i]);
    free(c->in);
    free(c);
}

/* Reads what the client sent, keeping descriptors passed along. */
static void read_client(kd_server *s, kd_client *c)
{
    for (;;) {
        if (c->in_cap - c->in_len < 65536) {
            size_t cap = c->in_cap ? c->in_cap * 2 : 131072;
            /* A message is refused at its header when too long, so the buffer never
             * needs more than one whole message and a read's worth. */
            if (cap > CK_PROTO_MAX_MSG + CK_PROTO_HDR + 131072)
                cap = CK_PROTO_MAX_MSG + CK_PROTO_HDR + 131072;
            uint8_t *p = cap > c->in_cap ? realloc(c->in, cap) : NULL;
            if (!p) {
                c->drop = true;
                return;
            }
            c->in = p;
            c->in_cap = cap;
        }
        union {
            struct cmsghdr h;
            char buf[CMSG_SPACE(KD_MAX_FDS * sizeof(int))];
        } ctl;
        struct iovec iov = { .iov_base = c->in + c->in_len, .iov_len = c->in_cap - c->in_len };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                             .msg_controllen = sizeof ctl.buf };
        ssize_t n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        for (struct cmsghdr *h = CMSG_FIRSTHDR(&mh); n >= 0 && h; h = CMSG_NXTHDR(&mh, h)) {
            if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
                continue;
            size_t k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k; i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof fd);
                if (c->nfds < KD_MAX_FDS)
                    c->fds[c->nfds++] = fd;
                else
                    close(fd), c->drop = true;
            }
        }
        if (n <= 0) {
            if (n == 0)
                kd_proto_truncated(s, c);
            c->drop = true;
            return;
        }
        c->in_len += (size_t)n;
        kd_proto_input(s, c);
        if (c->drop)
            return;
    }
}

/* The first SIGTERM: no new clients or saves; the saves in flight get until the drain
 * deadline to become complete. The second: exit now. What that leaves under .pending
 * has no live owner, so the next start removes it. */
static void on_stop_signal(kd_server *s, int signo)
{
    if (s->stopping) {
        kd_log(s, "second %s: exiting now; %u save(s) in flight left as debris for the next "
               "start to remove", signo == SIGINT ? "SIGINT" : "SIGTERM",
               ck__saver_active(s->saver));
        if (s->log)
            fflush(s->log);
        _exit(1);
    }
    kd_log(s, "stopping: no new clients; finishing %u save(s) in flight, waiting up to %u s "
           "for ranks still staging (a second SIGTERM exits at once)",
           ck__saver_active(s->saver), s->o.drain_timeout);
    epoll_ctl(s->ep_fd, EPOLL_CTL_DEL, s->listen_fd, NULL);
    close(s->listen_fd);
    s->listen_fd = -1;
    unlink(s->o.socket);
    s->stopping = true;
    s->drain_deadline = kd_now() + s->o.drain_timeout;
}

int kd_server_run(kd_server *s)
{
    struct epoll_event evs[64];
    while (!s->stopping || s->ckpts || s->plan_queued || ck__saver_active(s->saver)) {
        if (s->listen_resume && kd_now() >= s->listen_resume) {
            s->listen_resume = 0;
            if (s->listen_fd >= 0)
                ep_add(s, s->listen_fd, TAG_LISTEN);
        }
        /* Wakes to look at the rank timeouts while saves are in flight, and to listen
         * again after a pause. */
        int ms = s->stopping ? 100 : s->ckpts && s->o.rank_timeout ? 1000 : -1;
        if (s->listen_resume && (ms < 0 || ms > (int)(KD_LISTEN_PAUSE * 1000)))
            ms = (int)(KD_LISTEN_PAUSE * 1000);
        int n = epoll_wait(s->ep_fd, evs, 64, ms);
        if (n < 0 && errno != EINTR)
            return -errno;
        for (int i = 0; i < n; i++) {
            uint64_t tag = evs[i].data.u64;
            if (tag == TAG_LISTEN) {
                accept_one(s);
            } else if (tag == TAG_SIGNAL) {
                struct signalfd_siginfo si;
                while (read(s->sig_fd, &si, sizeof si) == sizeof si)
                    if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT)
                        on_stop_signal(s, (int)si.ssi_signo);
            } else if (tag == TAG_EVENT) {
                uint64_t v;
                if (read(s->ev_fd, &v, sizeof v) < 0 && errno != EAGAIN)
                    kd_log(s, "eventfd: %s", strerror(errno));
            } else {
                kd_client *c = kd_client_find(s, tag);
                if (c)
                    read_client(s, c);
            }
        }
        kd_ckpt_events(s);
        kd_restore_replies(s);
        for (kd_client *c = s->clients, *next; c; c = next) {
            next = c->next;
            if (c->drop)
                drop(s, c);
        }
        /* Past the deadline, again on every round: a plan that was still being
         * computed at the deadline becomes a save that waits, and must go too. */
        if (s->stopping && kd_now() >= s->drain_deadline) {
            s->drained = true;
            kd_ckpt_drain_expired(s);
        }
        kd_ckpt_rank_timeouts(s);
        /* Dropping clients and the drain abandon saves; their FAILED events are queued
         * now. */
        kd_ckpt_events(s);
    }
    kd_log(s, "every save in flight finished; exiting");
    /* Clients may still be connected (a drain ends with the saves, not the clients). */
    while (s->clients)
        drop(s, s->clients);
    kd_ckpt_events(s);
    return 0;
}
