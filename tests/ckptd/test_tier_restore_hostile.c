/* Hostile RESOLVE, FETCH, TIERS and DRAIN (issue 31): names that are paths, prefixes that
 * cannot begin a name, a flag that is neither 0 nor 1, a file count its bytes cannot
 * hold, data file names that are paths or hold a NUL, fields cut short or followed by
 * more bytes: each gets an ERROR and its connection is closed. Requests well formed
 * but naming what is nowhere (a checkpoint, a data file) get an ERROR naming it on a
 * connection that goes on. The daemon serves on (STATUS, then a RESOLVE and a FETCH
 * that work), and nothing new appears in its local tier or beside its roots. */
#include "kd_testlib.h"
#include "async/proto.h"

static int conn(const char *sock)
{
    int fd;
    ck_err err = { 0 };
    REQUIRE(ck__conn_connect(sock, &fd, &err) == 0, "%s", ck_err_msg(&err));
    struct timeval tv = { .tv_sec = 30 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static void send_msg(int fd, ck__wbuf *w)
{
    ck__proto_end(w);
    ck__conn_send(fd, w, -1, NULL);
    ck__wbuf_free(w);
}

/* Replies until EOF: whether an ERROR came, then the close. */
static bool refused(const char *sock, ck__wbuf *w)
{
    int fd = conn(sock);
    send_msg(fd, w);
    bool error = false;
    ck__msg m;
    int r;
    while ((r = ck__conn_recv(fd, true, &m, NULL)) > 0) {
        error |= m.type == CK_MSG_ERROR;
        free(m.payload);
    }
    close(fd);
    return error && r == -ECONNRESET;
}

/* The reply to w on fd: its type, and an ERROR's code and message. */
static uint16_t answer(int fd, ck__wbuf *w, int *code, char *msg, size_t len)
{
    send_msg(fd, w);
    ck__msg m;
    if (ck__conn_recv(fd, true, &m, NULL) <= 0)
        return 0;
    ck__rbuf rb = ck__rbuf_make(m.payload, m.len);
    char name[CK_NAME_MAX];
    if (m.type == CK_MSG_ERROR) {
        ck__get_str(&rb, name, sizeof name);
        *code = (int)ck__get_u32(&rb);
        ck__get_str(&rb, msg, len);
    }
    free(m.payload);
    return m.type;
}

static void restore_msg(ck__wbuf *w, uint16_t type, const char *name, int newest)
{
    ck__proto_start(w, type);
    ck__put_str(w, name);
    if (newest >= 0)
        ck__put_u8(w, (uint8_t)newest);
}

static void fetch_msg(ck__wbuf *w, const char *name, const char *file)
{
    ck__proto_start(w, CK_MSG_FETCH);
    ck__put_str(w, name);
    ck__put_u32(w, 1);
    ck__put_str(w, file);
}

/* The names in dir, one string. */
static void listing(const char *dir, char *out, size_t len)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    size_t at = 0;
    out[0] = '\0';
    while (d && (de = readdir(d)) && at < len)
        at += (size_t)snprintf(out + at, len - at, "%s/", de->d_name);
    if (d)
        closedir(d);
}

int main(void)
{
    char top[PATH_MAX], root[PATH_MAX + 8], local[PATH_MAX + 8], before[4096], after[4096];
    char lbefore[4096], lafter[4096], msg[CK_ERR_MSG_MAX];
    tl_tmpdir(top, sizeof top, "tierhostile");
    snprintf(root, sizeof root, "%s/root", top);
    snprintf(local, sizeof local, "%s/local", top);
    REQUIRE(mkdir(root, 0755) == 0 && mkdir(local, 0755) == 0, "mkdir");
    const char *synth[] = { CKPT_SYNTH_PATH, root, "--name", "c1", "--mesh", "2",
                            "--tensors", "2", "--bytes", "64KiB", NULL };
    REQUIRE(kd_run(synth, "/dev/null", 60) == 0, "ckpt-synth");
    kd_proc d;
    kd_start(&d, root, (const char *const[]){ "--local-root", local, NULL });
    ck__wbuf w = { 0 };
    int fd = conn(d.sock), code = 0;
    /* An answer: the daemon runs its loop, its start (the local tier's recovery) done. */
    ck__proto_start(&w, CK_MSG_STATUS);
    REQUIRE(answer(fd, &w, &code, msg, sizeof msg) == CK_MSG_STATUS_OK, "STATUS");
    close(fd);
    listing(top, before, sizeof before);
    listing(local, lbefore, sizeof lbefore);

    static const struct { uint16_t type; const char *name; int newest; const char *what; }
    bad[] = {
        { CK_MSG_RESOLVE, "../x", 0, "a RESOLVE of a path" },
        { CK_MSG_RESOLVE, "a/b", 1, "a RESOLVE of a prefix that is a path" },
        { CK_MSG_RESOLVE, ".pending", 0, "a RESOLVE of .pending" },
        { CK_MSG_RESOLVE, "c1", 2, "a RESOLVE whose newest flag is 2" },
        { CK_MSG_RESOLVE, "c1", -1, "a RESOLVE cut short" },
        { CK_MSG_TIERS, "..", -1, "a TIERS of .." },
        { CK_MSG_FETCH, "c1", -1, "a FETCH cut short" },
        { CK_MSG_DRAIN, "../x", 0, "a DRAIN of a path" },
        { CK_MSG_DRAIN, ".pending", 1, "a DRAIN of .pending" },
        { CK_MSG_DRAIN, "c1", 2, "a DRAIN whose offer flag is 2" },
        { CK_MSG_DRAIN, "c1", -1, "a DRAIN cut short" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        restore_msg(&w, bad[i].type, bad[i].name, bad[i].newest);
        CHECK(refused(d.sock, &w), "%s: no ERROR and close", bad[i].what);
    }
    restore_msg(&w, CK_MSG_RESOLVE, "c1", 0);
    ck__put_u8(&w, 0);
    CHECK(refused(d.sock, &w), "a RESOLVE with a byte left over: no ERROR and close");
    restore_msg(&w, CK_MSG_TIERS, "", -1);
    ck__put_u32(&w, 7);
    CHECK(refused(d.sock, &w), "a TIERS with bytes left over: no ERROR and close");
    restore_msg(&w, CK_MSG_DRAIN, "", 0);
    ck__put_u8(&w, 0);
    CHECK(refused(d.sock, &w), "a DRAIN with a byte left over: no ERROR and close");
    static const char *const files[] = { "../manifest.mdb", "a/b.dat", ".hidden", "" };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        fetch_msg(&w, "c1", files[i]);
        CHECK(refused(d.sock, &w), "a FETCH of data file '%s': no ERROR and close", files[i]);
    }
    fetch_msg(&w, ".pending", "rank-00000.dat");
    CHECK(refused(d.sock, &w), "a FETCH of .pending: no ERROR and close");
    ck__proto_start(&w, CK_MSG_FETCH);
    ck__put_str(&w, "c1");
    ck__put_u32(&w, 0x7fffffff);
    ck__put_str(&w, "rank-00000.dat");
    CHECK(refused(d.sock, &w), "a FETCH of 2^31 files in a short message: no ERROR and close");
    ck__proto_start(&w, CK_MSG_FETCH);
    ck__put_str(&w, "c1");
    ck__put_u32(&w, 1);
    ck__put_u16(&w, 5);
    ck__put_bytes(&w, "ra\0nk", 5);
    CHECK(refused(d.sock, &w), "a FETCH of a name holding a NUL: no ERROR and close");

    /* Well formed, naming what is nowhere: an ERROR naming it, and the link goes on. */
    fd = conn(d.sock);
    restore_msg(&w, CK_MSG_RESOLVE, "nope", 0);
    CHECK(answer(fd, &w, &code, msg, sizeof msg) == CK_MSG_ERROR && code == -ENOENT &&
          strstr(msg, "no copy of nope"), "a RESOLVE of nothing: %d %s", code, msg);
    fetch_msg(&w, "nope", "rank-00000.dat");
    CHECK(answer(fd, &w, &code, msg, sizeof msg) == CK_MSG_ERROR && code == -ENOENT &&
          strstr(msg, "nope"), "a FETCH of nothing: %d %s", code, msg);
    fetch_msg(&w, "c1", "rank-00099.dat");
    CHECK(answer(fd, &w, &code, msg, sizeof msg) == CK_MSG_ERROR && code == -ENOENT &&
          strstr(msg, "rank-00099.dat"), "a FETCH of a file c1 lacks: %d %s", code, msg);
    restore_msg(&w, CK_MSG_RESOLVE, "c", 1);
    CHECK(answer(fd, &w, &code, msg, sizeof msg) == CK_MSG_RESOLVE_OK,
          "the daemon no longer resolves on the same link");
    fetch_msg(&w, "c1", "rank-00001.dat");
    CHECK(answer(fd, &w, &code, msg, sizeof msg) == CK_MSG_FETCH_OK,
          "the daemon no longer fetches: %s", msg);
    close(fd);

    listing(top, after, sizeof after);
    listing(local, lafter, sizeof lafter);
    CHECK(!strcmp(before, after), "something appeared beside the roots: %s, was %s", after,
          before);
    CHECK(!strcmp(lbefore, lafter), "something appeared in the local tier: %s, was %s", lafter,
          lbefore);
    CHECK(kd_term(&d, 30) == 0, "ckptd did not exit cleanly");
    CHECK(!kd_log_has(d.log, "Sanitizer"), "a sanitizer report in the log");
    tl_rmtree(top);
    return tl_failures ? 1 : 0;
}
