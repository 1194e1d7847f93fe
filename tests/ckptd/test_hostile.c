/* Hostile messages: truncated, oversized, wrong version, bad magic, unknown type, names
 * that are paths, dims and dtypes out of range, a staging memfd smaller than declared
 * (extents outside the staging area) or unsealed. Each gets an ERROR reply and its
 * connection closed; the daemon keeps serving (STATUS, then a real save). A box list
 * that does not tile is a declaration the planner's seal refuses: an ERROR naming the
 * save and the boxes, beside the loop. */
#include <sys/mman.h>

#include "kd_testlib.h"
#include "kd_wire.h"

static int conn(const char *sock)
{
    int fd;
    ck_err err = { 0 };
    REQUIRE(ck__conn_connect(sock, &fd, &err) == 0, "%s", ck_err_msg(&err));
    return fd;
}

/* Reads replies until EOF: whether an ERROR came, then the close. */
static bool got_error_then_close(int fd)
{
    struct timeval tv = { .tv_sec = 10 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    bool error = false;
    ck__msg m;
    ck_err err = { 0 };
    int r;
    while ((r = ck__conn_recv(fd, true, &m, &err)) > 0) {
        error |= m.type == CK_MSG_ERROR;
        free(m.payload);
    }
    close(fd);
    return error && r == -ECONNRESET;
}

static void send_raw(int fd, const void *p, size_t n, int passfd)
{
    ck__wbuf w = { .p = (uint8_t *)p, .len = n };
    ck__conn_send(fd, &w, passfd, NULL);
}

static int memfd(uint64_t size, bool seal)
{
    int fd = memfd_create("hostile", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    REQUIRE(fd >= 0 && ftruncate(fd, (off_t)size) == 0, "memfd");
    if (seal)
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
    return fd;
}

static kc_wire_tensor tensor = { .name = "w", .dtype = CK_F32, .ndim = 1, .shape = { 4096 } };

static kc_wire good_decl(void)
{
    kc_wire d = { .name = "h", .step = 1, .rank = 0, .ntensors = 1,
                  .tensors = &tensor, .staging_size = 16384,
                  .job = { .bytes = "hostile-test-01" } };
    ck_mesh_parse("1", NULL, &d.mesh, NULL);
    return d;
}

/* Sends BEGIN for d with a memfd of size fd_size (sealed or not). */
static bool begin_refused(const char *sock, const kc_wire *d, uint64_t fd_size, bool seal)
{
    int fd = conn(sock), mfd = memfd(fd_size, seal);
    ck__wbuf w = { 0 };
    ck__proto_start(&w, CK_MSG_BEGIN);
    kc_put_wire(&w, d);
    ck__proto_end(&w);
    send_raw(fd, w.p, w.len, mfd);
    ck__wbuf_free(&w);
    close(mfd);
    return got_error_then_close(fd);
}

/* Sends BEGIN for d: an ERROR naming the save comes back, saying what. */
static bool begin_failed(const char *sock, const kc_wire *d, const char *what)
{
    int fd = conn(sock), mfd = memfd(d->staging_size, true);
    ck__wbuf w = { 0 };
    ck__proto_start(&w, CK_MSG_BEGIN);
    kc_put_wire(&w, d);
    ck__proto_end(&w);
    send_raw(fd, w.p, w.len, mfd);
    ck__wbuf_free(&w);
    close(mfd);
    struct timeval tv = { .tv_sec = 10 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ck__msg m;
    bool ok = ck__conn_recv(fd, true, &m, NULL) > 0 && m.type == CK_MSG_ERROR;
    if (ok) {
        ck__rbuf r = ck__rbuf_make(m.payload, m.len);
        char name[CK_NAME_MAX], msg[CK_ERR_MSG_MAX];
        ck__get_str(&r, name, sizeof name);
        ck__get_u32(&r);
        ck__get_str(&r, msg, sizeof msg);
        ok = !strcmp(name, d->name) && strstr(msg, what);
        free(m.payload);
    }
    close(fd);
    return ok;
}

static bool status_ok(const char *sock)
{
    int fd = conn(sock);
    ck__wbuf w = { 0 };
    ck__proto_start(&w, CK_MSG_STATUS);
    ck__proto_end(&w);
    send_raw(fd, w.p, w.len, -1);
    ck__wbuf_free(&w);
    ck__msg m;
    bool ok = ck__conn_recv(fd, true, &m, NULL) > 0 && m.type == CK_MSG_STATUS_OK;
    if (ok)
        free(m.payload);
    close(fd);
    return ok;
}

int main(void)
{
    char root[PATH_MAX];
    tl_tmpdir(root, sizeof root, "kdhostile");
    kd_proc d;
    kd_start(&d, root, NULL);
    uint8_t hdr[CK_PROTO_HDR];
    ck__wbuf w = { 0 };

    /* Header faults: oversized, wrong version, bad magic, unknown type. */
    struct { const char *what; uint32_t magic; uint16_t ver, type; uint32_t len; } hf[] = {
        { "oversized", CK_PROTO_MAGIC, CK_PROTO_VERSION, CK_MSG_BEGIN, CK_PROTO_MAX_MSG + 1 },
        { "wrong version", CK_PROTO_MAGIC, CK_PROTO_VERSION + 1, CK_MSG_STATUS, 0 },
        { "version 1 (a client of before box lists)", CK_PROTO_MAGIC, 1, CK_MSG_STATUS, 0 },
        { "bad magic", 0x12345678, CK_PROTO_VERSION, CK_MSG_STATUS, 0 },
        { "unknown type", CK_PROTO_MAGIC, CK_PROTO_VERSION, 999, 0 },
    };
    for (size_t i = 0; i < sizeof hf / sizeof *hf; i++) {
        w.len = 0;
        ck__put_u32(&w, hf[i].magic);
        ck__put_u16(&w, hf[i].ver);
        ck__put_u16(&w, hf[i].type);
        ck__put_u32(&w, hf[i].len);
        ck__put_u32(&w, 0);
        int fd = conn(d.sock);
        send_raw(fd, w.p, w.len, -1);
        CHECK(got_error_then_close(fd), "%s: no ERROR reply before the close", hf[i].what);
    }
    ck__wbuf_free(&w);

    /* Truncated: the header promises 100 bytes, 10 come, then the writer closes. */
    ck__proto_start(&w, CK_MSG_HELLO);
    memcpy(hdr, w.p, sizeof hdr);
    hdr[8] = 100;
    int fd = conn(d.sock);
    send_raw(fd, hdr, sizeof hdr, -1);
    send_raw(fd, "0123456789", 10, -1);
    shutdown(fd, SHUT_WR);
    CHECK(got_error_then_close(fd), "truncated: no ERROR reply");
    ck__wbuf_free(&w);

    /* A BEGIN whose payload stops short of its fields. */
    kc_wire g = good_decl();
    ck__proto_start(&w, CK_MSG_BEGIN);
    kc_put_wire(&w, &g);
    w.len -= 5;
    ck__proto_end(&w);
    fd = conn(d.sock);
    int mfd = memfd(16384, true);
    send_raw(fd, w.p, w.len, mfd);
    close(mfd);
    CHECK(got_error_then_close(fd), "short BEGIN: no ERROR reply");
    ck__wbuf_free(&w);

    /* Field checks. */
    static const char *bad_names[] = { "../x", "a/b", ".hidden", "" };
    for (size_t i = 0; i < sizeof bad_names / sizeof *bad_names; i++) {
        kc_wire b = good_decl();
        snprintf(b.name, sizeof b.name, "%s", bad_names[i]);
        CHECK(begin_refused(d.sock, &b, 16384, true), "checkpoint name '%s' accepted",
              bad_names[i]);
    }
    kc_wire_tensor bt = tensor;
    snprintf(bt.name, sizeof bt.name, "../etc");
    kc_wire b = good_decl();
    b.tensors = &bt;
    CHECK(begin_refused(d.sock, &b, 16384, true), "tensor name ../etc accepted");
    bt = tensor;
    bt.dtype = 77;
    CHECK(begin_refused(d.sock, &b, 16384, true), "dtype 77 accepted");
    bt = tensor;
    bt.ndim = 1;
    bt.pl[0] = (ck_placement){ .kind = CK_SHARD, .dim = 5 };
    CHECK(begin_refused(d.sock, &b, 16384, true), "S(5) of a 1-D tensor accepted");
    /* Box lists: overlapping, a writer outside the world, an absurd count. */
    ck_box two[2] = { { 1, { 0 }, { 3000 } }, { 1, { 2000 }, { 2096 } } };
    uint64_t wr[2] = { 0, 0 };
    bt = tensor;
    bt.pl[0] = (ck_placement){ .kind = CK_BOXES };
    bt.nboxes = 2, bt.boxes = two, bt.writers = wr;
    CHECK(begin_failed(d.sock, &b, "overlap"), "overlapping boxes accepted, or not named");
    two[0].len[0] = 2000;
    wr[1] = 1;
    CHECK(begin_refused(d.sock, &b, 16384, true), "a box of rank 1 in a world of 1 accepted");
    wr[1] = 0;
    two[1].off[0] = 0x0102030405060708ull;      /* a mark to find the count by */
    ck__proto_start(&w, CK_MSG_BEGIN);
    kc_put_wire(&w, &b);
    ck__proto_end(&w);
    for (size_t at = 4; at + 8 <= w.len; at++)
        if (w.p[at] == 0x08 && w.p[at + 7] == 0x01 && w.p[at + 1] == 0x07) {
            size_t count = at - 4 - 3 * 8;       /* box 0 (off, len, writer) before it */
            w.p[count] = 0xff, w.p[count + 1] = 0xff, w.p[count + 2] = 0xff, w.p[count + 3] = 0x7f;
            break;
        }
    fd = conn(d.sock);
    mfd = memfd(16384, true);
    send_raw(fd, w.p, w.len, mfd);
    close(mfd);
    CHECK(got_error_then_close(fd), "a box count of 2^31 in a short message: no ERROR");
    ck__wbuf_free(&w);
    b = good_decl();
    b.rank = 3;
    CHECK(begin_refused(d.sock, &b, 16384, true), "rank 3 of world 1 accepted");
    b = good_decl();
    b.job = (ck_job_id){ 0 };
    CHECK(begin_refused(d.sock, &b, 16384, true), "a BEGIN without a job id accepted");
    b = good_decl();
    b.level = 9;
    CHECK(begin_refused(d.sock, &b, 16384, true), "a BEGIN asking commit level 9 accepted");
    b = good_decl();
    CHECK(begin_refused(d.sock, &b, 4096, true), "staging smaller than declared accepted");
    CHECK(begin_refused(d.sock, &b, 16384, false), "unsealed staging accepted");

    CHECK(status_ok(d.sock), "the daemon stopped answering STATUS");
    CHECK(kd_wait_pid(kd_synth(root, d.sock, "fine", "2", "2", "1MiB", NULL), 30) == 0,
          "a good save failed after the hostile ones");
    CHECK(tl_verify_deep(root, "fine", 7) == 0, "the good save is bad");
    CHECK(kd_log_has(d.log, "bad message"), "refusals were not logged");
    CHECK(kd_term(&d, 10) == 0, "ckptd did not exit 0");
    if (tl_failures)
        return 1;
    tl_rmtree(root);
    unlink(d.log);
    printf("ok: every hostile message got an ERROR and a close; the daemon kept serving\n");
    return 0;
}
