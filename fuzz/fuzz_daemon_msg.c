/* fuzz_daemon_msg.c - ckptd's message decoder (ckptd/kd_proto.c) on any byte stream.
 *
 * The input is what one client sent: it goes through kd_proto_input exactly as the
 * event loop hands it over, on a server whose save engine runs, with two staging
 * memfds attached. They are not sealed, so every BEGIN that decodes and passes the
 * field checks is refused at the staging check: the target covers framing, decoding
 * and validation of every message type, not the saves themselves (the ckptd tests do).
 * Replies go to a socket pair and are discarded.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fz_mdb.h"
#include "kd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static kd_server *server(void)
{
    static kd_server s;
    if (s.saver)
        return &s;
    s.o.root = fz_scratch();
    snprintf(s.root, sizeof s.root, "%s", fz_scratch());
    snprintf(s.o.socket, sizeof s.o.socket, "(none)");
    s.o.staging = 1 << 20;
    s.o.io_depth = 8;
    s.o.writers = 1;
    s.o.hash_threads = 1;
    s.log = fopen("/dev/null", "w");
    s.listen_fd = s.ep_fd = s.sig_fd = -1;
    s.ev_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_mutex_init(&s.ev_mu, NULL);
    ck_err err = { 0 };
    if (!s.log || s.ev_fd < 0 || kd_server_engine(&s, &err) < 0) {
        fprintf(stderr, "fuzz_daemon_msg: cannot start the engine: %s\n", ck_err_msg(&err));
        abort();
    }
    return &s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kd_server *s = server();
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    static uint64_t id;
    kd_client c = { .id = ++id, .fd = sv[0], .pid = getpid() };
    c.in = malloc(size ? size : 1);
    if (!c.in)
        abort();
    memcpy(c.in, data, size);
    c.in_len = c.in_cap = size;
    for (; c.nfds < 2; c.nfds++)
        c.fds[c.nfds] = memfd_create("fuzz-staging", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    kd_proto_input(s, &c);
    if (!c.drop)
        kd_proto_truncated(s, &c);
    for (unsigned i = 0; i < c.nfds; i++)
        close(c.fds[i]);
    free(c.in);
    close(sv[0]);
    close(sv[1]);
    return 0;
}
