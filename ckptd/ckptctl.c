/* ckptctl - asks a running ckptd what it is doing, waiting for its answer no longer
 * than --daemon-timeout (a stopped daemon must not hang the operator's shell). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "async/proto.h"

static void usage(FILE *f)
{
    fprintf(f,
"usage: ckptctl status (--socket PATH | --root DIR) [--daemon-timeout SECS]\n"
"\n"
"Lists the saves in flight in a running ckptd: ranks joined, staged and durable,\n"
"bytes staged and written, write MB/s, connected clients. The socket defaults to\n"
"$CKPTD_SOCKET, else DIR/.ckptd.sock. A daemon that does not answer within\n"
"--daemon-timeout seconds (default $CKPTD_TIMEOUT, else 10) is an error naming it.\n"
"Exit status: 0 ok, 2 usage error, no daemon, or no answer in time.\n");
}

static const char *state_name(const ck__proto_ckpt *c)
{
    return c->state == 1 ? "committing" : c->state == 3 ? "planning" : c->commit_requested ? "collecting, commit asked"
                                                               : "collecting";
}

/* Seconds in (0, 86400]; false for anything else. */
static bool seconds(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = s && *s ? strtod(s, &end) : 0;
    if (!s || !*s || errno || *end || !(v > 0) || v > 86400)
        return false;
    *out = v;
    return true;
}

int main(int argc, char **argv)
{
    const char *sock = getenv("CKPTD_SOCKET"), *env = getenv("CKPTD_TIMEOUT");
    char buf[PATH_MAX];
    double limit = 10;
    if (env && *env && !seconds(env, &limit)) {
        fprintf(stderr, "ckptctl: CKPTD_TIMEOUT=%s: not a number of seconds in (0, 86400]\n",
                env);
        return 2;
    }
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
        } else if (!strcmp(argv[i], "--daemon-timeout") && i + 1 < argc) {
            if (!seconds(argv[++i], &limit)) {
                fprintf(stderr, "ckptctl: --daemon-timeout %s: not a number of seconds in "
                        "(0, 86400]\n", argv[i]);
                return 2;
            }
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
    double deadline = ck__conn_now() + limit;
    int r = ck__conn_connect_by(sock, deadline, &fd, &err);
    if (r == 0) {
        struct ucred cr = { 0 };
        socklen_t len = sizeof cr;
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len);
        ck__proto_start(&w, CK_MSG_STATUS);
        r = ck__proto_end(&w);
        if (r == 0)
            r = ck__conn_send_by(fd, &w, -1, deadline, &err);
        ck__wbuf_free(&w);
        if (r == 0 && (r = ck__conn_recv_by(fd, deadline, deadline, &m, &err)) == 0)
            r = ck_err_set(&err, -ETIMEDOUT, "no answer to STATUS");
        if (r == -ETIMEDOUT)
            ck_err_set(&err, r, "ckptd at %s (pid %d) did not answer within %.1f s "
                       "(--daemon-timeout)", sock, (int)cr.pid, limit);
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
