/* ckptctl - asks a running ckptd what it is doing. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "async/proto.h"

static void usage(FILE *f)
{
    fprintf(f,
"usage: ckptctl status (--socket PATH | --root DIR)\n"
"\n"
"Lists the saves in flight in a running ckptd: ranks joined, staged and durable,\n"
"bytes staged and written, write MB/s, connected clients. The socket defaults to\n"
"$CKPTD_SOCKET, else DIR/.ckptd.sock.\n"
"Exit status: 0 ok, 2 usage error or no daemon.\n");
}

static const char *state_name(const ck__proto_ckpt *c)
{
    return c->state == 1 ? "committing" : c->state == 3 ? "planning" : c->commit_requested ? "collecting, commit asked"
                                                               : "collecting";
}

int main(int argc, char **argv)
{
    const char *sock = getenv("CKPTD_SOCKET");
    char buf[PATH_MAX];
    if (argc < 2 || strcmp(argv[1], "status") != 0) {
        usage(argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) ? stdout : stderr);
        return argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) ? 0 : 2;
    }
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--socket") && i + 1 < argc) {
            sock = argv[++i];
        } else if (!strcmp(argv[i], "--root") && i + 1 < argc) {
            snprintf(buf, sizeof buf, "%s/.ckptd.sock", argv[++i]);
            sock = buf;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (!sock || !*sock) {
        fprintf(stderr, "ckptctl: no socket: give --socket or --root, or set CKPTD_SOCKET\n");
        return 2;
    }
    ck_err err = { 0 };
    int fd;
    ck__wbuf w = { 0 };
    ck__msg m = { 0 };
    ck__proto_status st;
    int r = ck__conn_connect(sock, &fd, &err);
    if (r == 0) {
        ck__proto_start(&w, CK_MSG_STATUS);
        r = ck__proto_end(&w);
        if (r == 0)
            r = ck__conn_send(fd, &w, -1, &err);
        ck__wbuf_free(&w);
        if (r == 0)
            r = ck__conn_recv(fd, true, &m, &err);
        close(fd);
    }
    if (r > 0 && m.type != CK_MSG_STATUS_OK)
        r = ck_err_set(&err, -EPROTO, "ckptd answered with message type %u", m.type);
    if (r > 0)
        r = ck__proto_get_status(m.payload, m.len, &st, &err);
    free(m.payload);
    if (r < 0) {
        fprintf(stderr, "ckptctl: %s\n", ck_err_msg(&err));
        return 2;
    }
    printf("ckptd at %s: %u client(s), staging %.1f of %.1f MiB in use, %u part(s) waiting "
           "for room\n", sock, st.clients, st.staging_used / 1048576.0,
           st.staging_limit / 1048576.0, st.waiting);
    if (!st.n)
        printf("no saves in flight\n");
    for (uint32_t i = 0; i < st.n; i++) {
        const ck__proto_ckpt *c = &st.ckpts[i];
        printf("%s: %s; ranks %llu joined, %llu staged, %llu durable of %llu; staged %.1f MiB, "
               "written %.1f MiB, %.1f MB/s; %u client(s)\n", c->name, state_name(c),
               (unsigned long long)c->joined, (unsigned long long)c->staged,
               (unsigned long long)c->durable, (unsigned long long)c->world,
               c->bytes_staged / 1048576.0, c->bytes_written / 1048576.0, c->bytes_per_s / 1e6,
               c->clients);
    }
    free(st.ckpts);
    return 0;
}
