/* fuzz_client_reply.c - the client's reply decoder (async/client_connected.c, conn.c)
 * and the STATUS reply decoder (ckptctl's) on any byte stream from "ckptd".
 *
 * A thread plays the daemon on a Unix socket: it reads the client's HELLO, sends the
 * input as its replies, and closes its side. The client opens, declares a one-rank
 * save of one small tensor and waits for it, so that every reply (HELLO_OK, ADMIT,
 * DURABLE, COMMITTED, ERROR) reaches the code that applies it. Whatever the bytes,
 * the client must fail cleanly: no crash, no leak, and no hang (the daemon closing
 * ends every wait).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "async/proto.h"
#include "ck/client.h"
#include "fz_mdb.h"

/* The job of the saves here (ck/client.h): one, fixed. */
static const ck_job_id job = { .bytes = "fixed-job-id-01" };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct daemon_arg {
    int listen_fd;
    const uint8_t *data;
    size_t size;
} daemon_arg;

static int listener(char *path, size_t len)
{
    static int fd = -1;
    static char sock[108];
    if (fd < 0) {
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        snprintf(sock, sizeof sock, "%s/d.sock", fz_scratch());
        snprintf(a.sun_path, sizeof a.sun_path, "%s", sock);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 4) < 0) {
            perror("fuzz_client_reply: listen");
            abort();
        }
    }
    snprintf(path, len, "%s", sock);
    return fd;
}

static bool read_n(int fd, void *buf, size_t n)
{
    for (size_t off = 0; off < n;) {
        ssize_t k = read(fd, (uint8_t *)buf + off, n - off);
        if (k <= 0)
            return false;
        off += (size_t)k;
    }
    return true;
}

static void *daemon_main(void *p)
{
    daemon_arg *a = p;
    int fd = accept4(a->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return NULL;
    uint8_t hdr[CK_PROTO_HDR], junk[4096];
    if (read_n(fd, hdr, sizeof hdr)) {
        uint32_t len = hdr[8] | hdr[9] << 8 | (uint32_t)hdr[10] << 16 | (uint32_t)hdr[11] << 24;
        while (len) {
            size_t n = len < sizeof junk ? len : sizeof junk;
            if (!read_n(fd, junk, n))
                break;
            len -= (uint32_t)n;
        }
        for (size_t off = 0; off < a->size;) {
            ssize_t k = send(fd, a->data + off, a->size - off, MSG_NOSIGNAL);
            if (k <= 0)
                break;
            off += (size_t)k;
        }
    }
    shutdown(fd, SHUT_WR);
    while (read(fd, junk, sizeof junk) > 0)
        ;
    close(fd);
    return NULL;
}

/* The same bytes as ckptctl reads them: framed STATUS replies. */
static void status_replies(const uint8_t *data, size_t size)
{
    while (size >= CK_PROTO_HDR) {
        uint16_t type;
        uint32_t len;
        ck_err err = { 0 };
        if (ck__proto_header(data, &type, &len, &err) < 0 || size - CK_PROTO_HDR < len)
            return;
        ck__proto_status st;
        if (ck__proto_get_status(data + CK_PROTO_HDR, len, &st, &err) == 0)
            free(st.ckpts);
        data += CK_PROTO_HDR + len;
        size -= CK_PROTO_HDR + len;
    }
}

static void client(const char *sock)
{
    ck_client_opts o = { .socket = sock };
    ck_client *cl;
    ck_client_save *sv;
    ck_err err = { 0 };
    if (ck_client_open(&cl, NULL, &o, &err) < 0)
        return;
    ck_mesh mesh;
    ck_mesh_parse("1", NULL, &mesh, &err);
    const uint64_t shape[1] = { 4 };
    const float t[4] = { 1, 2, 3, 4 };
    ck_placement pl[1];
    ck_placements_default(1, pl);
    ck_decl *d = NULL;
    if (ck_decl_new(&d, &mesh, &err) == 0 && ck_decl_tensor(d, "t", CK_F32, 1, shape, pl, &err) == 0 &&
        ck_client_begin(cl, &sv, "fz", 1, d, 0, &job, &err) == 0) {
        if (ck_client_shard(sv, "t", t, &err) == 0 &&
            ck_client_submit(sv, &(ck_submit){ .mode = CK_SUBMIT_COPY }, &err) == 0 &&
            ck_client_commit(sv, &err) == 0)
            ck_client_wait(sv, CK_CLIENT_COMMITTED, &err);
        ck_client_save_free(sv);
    }
    ck_decl_free(d);
    ck_client_close(cl);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char sock[108];
    daemon_arg a = { .listen_fd = listener(sock, sizeof sock), .data = data, .size = size };
    pthread_t th;
    if (pthread_create(&th, NULL, daemon_main, &a) != 0)
        abort();
    client(sock);
    pthread_join(th, NULL);
    status_replies(data, size);
    return 0;
}
