/* This build's protocol against a peer of the protocol before it (the last ckptd that
 * matched a save's ranks by name alone, not by job): a stand-in for that old ckptd
 * accepts the connection, reads the client's HELLO and answers ERROR in its own
 * version's header, as every old daemon answers a version it does not speak. ck_client_open fails at once
 * with -EPROTONOSUPPORT and a message that names both versions and the socket; it
 * neither hangs nor crashes. (The other direction, an old client against this ckptd,
 * is test_hostile's "version 1" header.) */
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "kc_testlib.h"

static void old_daemon(int lsock)
{
    int c = accept(lsock, NULL, NULL);
    uint8_t hdr[CK_PROTO_HDR];
    if (c < 0 || recv(c, hdr, sizeof hdr, MSG_WAITALL) != (ssize_t)sizeof hdr)
        _exit(1);
    ck__wbuf w = { 0 };
    ck__proto_start(&w, CK_MSG_ERROR);
    ck__put_str(&w, "");
    ck__put_u32(&w, (uint32_t)-EPROTONOSUPPORT);
    ck__put_str(&w, "the peer speaks another protocol version");
    ck__proto_end(&w);
    w.p[4] = CK_PROTO_VERSION - 1, w.p[5] = 0;  /* the old daemon's header version */
    if (send(c, w.p, w.len, MSG_NOSIGNAL) != (ssize_t)w.len)
        _exit(1);
    shutdown(c, SHUT_WR);
    char drain[64];
    while (recv(c, drain, sizeof drain, 0) > 0)
        ;
    _exit(0);
}

int main(void)
{
    kc_watchdog(30);
    char dir[PATH_MAX], path[PATH_MAX + 16];
    tl_tmpdir(dir, sizeof dir, "olddaemon");
    snprintf(path, sizeof path, "%s/old.sock", dir);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(l >= 0 && bind(l, (struct sockaddr *)&a, sizeof a) == 0 && listen(l, 4) == 0,
            "listening on %s", path);
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0)
        old_daemon(l);
    ck_client *cl = NULL;
    ck_client_opts o = { .socket = path };
    ck_err err = { 0 };
    int rc = ck_client_open(&cl, NULL, &o, &err);
    const char *msg = ck_err_msg(&err);
    CHECK(rc == -EPROTONOSUPPORT, "ck_client_open against protocol %d gave %d: %s",
          CK_PROTO_VERSION - 1, rc, msg);
    char mine[32], theirs[32];
    snprintf(mine, sizeof mine, "this build %d", CK_PROTO_VERSION);
    snprintf(theirs, sizeof theirs, "version %d", CK_PROTO_VERSION - 1);
    CHECK(strstr(msg, theirs) && strstr(msg, mine) && strstr(msg, path),
          "the message does not name both versions and the socket: '%s'", msg);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "the stand-in daemon failed");
    close(l);
    if (!tl_failures) {
        tl_rmtree(dir);
        printf("ok: a protocol-%d daemon is refused at HELLO: %s\n", CK_PROTO_VERSION - 1, msg);
    }
    return tl_failures ? 1 : 0;
}
