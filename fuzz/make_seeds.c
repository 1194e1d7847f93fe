/* make_seeds.c - writes the seed corpora of fuzz/corpus/ from real records and real
 * messages (fuzz/make-seeds runs it on a checkpoint that ckpt-synth wrote):
 *   manifest/, catalog/  the records of ROOT/NAME/manifest.mdb and ROOT/catalog.mdb
 *   daemon_msg/          what a real ck_client sends: its HELLO and BEGIN are recorded
 *                        on a socket (a save of placed tensors, and one with a box
 *                        list), then STAGED, COMMIT and STATUS as it frames them
 *   boxes/               box lists in fuzz_boxes.c's encoding: the old overlap check's
 *                        worst cases (a staircase, full-width rows, nested boxes) and
 *                        8-D slabs with one missing
 *   client_reply/        a daemon's replies to a save, framed by ckptd's kd_reply.c
 *   peer_msg/            the peer protocol's payloads as kd_peer_wire.c encodes them,
 *                        and copy files, each behind fuzz_peer_msg.c's selector byte
 *   restore_msg/         RESOLVE, FETCH and TIERS and their replies, and DRAIN_OK,
 *                        behind fuzz_restore_msg.c's selector byte; daemon_msg/restore,
 *                        the three requests framed as a client sends them, and
 *                        daemon_msg/drain, a DRAIN
 *   parsers/             the command-line examples of README.md
 * Usage: make_seeds OUTDIR ROOT NAME
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "async/proto.h"
#include "ck/ckpt.h"
#include "ck/client.h"
#include "format/manifest.h"
#include "fz_mdb.h"
#include "kd.h"
#include "format/layout.h"

/* The job of the saves here (ck/client.h): one, fixed, so that the seeds do not change
 * from one run to the next. */
static const ck_job_id job = { .bytes = "fixed-job-id-01" };

static const char *outdir;

static FILE *seed(const char *target, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", outdir, target);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", outdir, target, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    return f;
}

static void put(const char *target, const char *name, const void *p, size_t n)
{
    FILE *f = seed(target, name);
    fwrite(p, 1, n, f);
    fclose(f);
}

/* A message as the sender frames it, appended to out. */
static void frame(ck__wbuf *out, ck__wbuf *w)
{
    ck__proto_end(w);
    ck__put_bytes(out, w->p, w->len);
    ck__wbuf_free(w);
}

typedef struct rec {
    int fd;
    ck__wbuf got;
} rec;

/* Plays ckptd just enough for a real client to send HELLO and BEGIN: HELLO_OK, then an
 * ERROR for the save, so that the client gives up. */
static void *recorder(void *p)
{
    rec *r = p;
    int fd = accept4(r->fd, NULL, NULL, SOCK_CLOEXEC);
    for (int msgs = 0; fd >= 0 && msgs < 2; msgs++) {
        uint8_t hdr[CK_PROTO_HDR];
        uint16_t type;
        uint32_t len;
        ck_err err = { 0 };
        if (recv(fd, hdr, sizeof hdr, MSG_WAITALL) != sizeof hdr ||
            ck__proto_header(hdr, &type, &len, &err) < 0)
            break;
        uint8_t *body = malloc(len ? len : 1);
        if (!body || recv(fd, body, len, MSG_WAITALL) != (ssize_t)len)
            exit(1);
        ck__put_bytes(&r->got, hdr, sizeof hdr);
        ck__put_bytes(&r->got, body, len);
        free(body);
        ck__wbuf w = { 0 };
        if (type == CK_MSG_HELLO) {
            ck__proto_start(&w, CK_MSG_HELLO_OK);
            ck__put_str(&w, "/data/ckpt");
            ck__put_u64(&w, 1 << 30);
        } else {
            ck__proto_start(&w, CK_MSG_ERROR);
            ck__put_str(&w, "step-00000100");
            ck__put_u32(&w, (uint32_t)-EIO);
            ck__put_str(&w, "recorded");
        }
        ck__proto_end(&w);
        if (send(fd, w.p, w.len, MSG_NOSIGNAL) != (ssize_t)w.len)
            exit(1);
        ck__wbuf_free(&w);
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

/* The HELLO and BEGIN of rank 1 of a 2x2 save of a small model, as a real client
 * sends them; with boxes, its embedding is a list of 4 boxes instead (one per rank). */
static void record_client(ck__wbuf *got, bool boxes)
{
    char sock[108];
    snprintf(sock, sizeof sock, "%s/seeds.sock", fz_scratch());
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    snprintf(a.sun_path, sizeof a.sun_path, "%s", sock);
    rec r = { .fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0) };
    if (r.fd < 0 || bind(r.fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(r.fd, 1) < 0) {
        perror(sock);
        exit(1);
    }
    pthread_t th;
    pthread_create(&th, NULL, recorder, &r);
    ck_client_opts o = { .socket = sock };
    ck_client *cl;
    ck_client_save *sv;
    ck_err err = { 0 };
    ck_mesh mesh;
    ck_placement rs[2], rr[2];
    ck_mesh_parse("2x2", "replicate,shard", &mesh, &err);
    ck_placements_parse("R,S(0)", 2, 2, rs, &err);
    ck_placements_parse("R,R", 2, 2, rr, &err);
    static float wte[64 * 16], ln[16];
    const uint64_t s_wte[2] = { 64, 16 }, s_ln[1] = { 16 };
    const ck_box quarters[4] = { { 2, { 0, 0 }, { 32, 8 } }, { 2, { 0, 8 }, { 32, 8 } },
                                 { 2, { 32, 0 }, { 32, 8 } }, { 2, { 32, 8 }, { 32, 8 } } };
    const uint64_t writers[4] = { 0, 1, 2, 3 };
    ck_decl *d = NULL;
    if (ck_client_open(&cl, NULL, &o, &err) < 0 || ck_decl_new(&d, &mesh, &err) < 0 ||
        (boxes ? ck_decl_tensor_boxes(d, "wte", CK_F32, 2, s_wte, 4, quarters, writers, &err)
               : ck_decl_tensor(d, "wte", CK_F32, 2, s_wte, rs, &err)) < 0 ||
        ck_decl_tensor(d, "ln_f.weight", CK_BF16, 1, s_ln, rr, &err) < 0 ||
        ck_client_begin(cl, &sv, "step-00000100", 100, d, 1, &job, &err) < 0 ||
        (boxes ? ck_client_box(sv, "wte", 1, wte, &err) : ck_client_shard(sv, "wte", wte, &err))
            < 0 ||
        ck_client_shard(sv, "ln_f.weight", ln, &err) < 0 ||
        ck_client_blob(sv, "trainer.json", "{\"step\":100}", 12, &err) < 0) {
        fprintf(stderr, "make_seeds: %s\n", ck_err_msg(&err));
        exit(1);
    }
    ck_decl_free(d);
    ck_client_submit(sv, &(ck_submit){ .mode = CK_SUBMIT_COPY }, &err);  /* BEGIN; refused */
    ck_client_save_free(sv);
    ck_client_close(cl);
    pthread_join(th, NULL);
    close(r.fd);
    unlink(sock);
    *got = r.got;
}

/* ckptd's own reply senders (kd_reply.c) write into a socket pair; this reads what
 * they framed. */
typedef struct replies {
    kd_server s;
    kd_client c;
    int peer;
} replies;

static void replies_open(replies *r)
{
    int sv[2];
    memset(r, 0, sizeof *r);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 ||
        !(r->s.log = fopen("/dev/null", "w"))) {
        perror("make_seeds: socketpair");
        exit(1);
    }
    r->c.fd = sv[0];
    r->peer = sv[1];
}

/* Moves what ckptd sent so far to out. */
static void replies_take(replies *r, ck__wbuf *out)
{
    uint8_t buf[65536];
    ssize_t n = recv(r->peer, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0)
        ck__put_bytes(out, buf, (size_t)n);
}

static void replies_close(replies *r)
{
    close(r->c.fd);
    close(r->peer);
    fclose(r->s.log);
}

static void named(replies *r, ck__wbuf *out, uint16_t type, const char *name,
                  const uint64_t *a, const uint64_t *b)
{
    kd_send_named(&r->s, &r->c, type, name, a, b);
    replies_take(r, out);
}

static void error_reply(replies *r, ck__wbuf *out, const char *name, int code, const char *msg)
{
    kd_send_error(&r->s, &r->c, name, code, msg);
    replies_take(r, out);
}

static void daemon_seeds(void)
{
    ck__wbuf hello_begin = { 0 }, m = { 0 }, all = { 0 };
    record_client(&hello_begin, true);
    put("daemon_msg", "hello-begin-boxes", hello_begin.p, hello_begin.len);
    ck__wbuf_free(&hello_begin);
    record_client(&hello_begin, false);
    put("daemon_msg", "hello-begin", hello_begin.p, hello_begin.len);
    /* STAGED, COMMIT and STATUS as the client frames them (client_connected.c) */
    const char *name = "step-00000100";
    ck__wbuf w = { 0 };
    ck__proto_start(&w, CK_MSG_STAGED);
    ck__put_str(&w, name);
    ck__put_u64(&w, 1);
    frame(&m, &w);
    ck__proto_start(&w, CK_MSG_COMMIT);
    ck__put_str(&w, name);
    frame(&m, &w);
    ck__proto_start(&w, CK_MSG_STATUS);
    frame(&m, &w);
    put("daemon_msg", "staged-commit-status", m.p, m.len);
    ck__put_bytes(&all, hello_begin.p, hello_begin.len);
    ck__put_bytes(&all, m.p, m.len);
    put("daemon_msg", "session", all.p, all.len);
    ck__wbuf_free(&hello_begin);
    ck__wbuf_free(&m);
    ck__wbuf_free(&all);
}

static void client_seeds(void)
{
    replies r;
    replies_open(&r);
    ck__wbuf ok = { 0 }, w = { 0 };
    ck__proto_start(&w, CK_MSG_HELLO_OK);
    ck__put_str(&w, "/data/ckpt");
    ck__put_u64(&w, 1 << 30);
    frame(&ok, &w);
    /* the fuzz target's save: checkpoint fz, rank 0, one 16-byte tensor in a page */
    ck__wbuf run = { 0 };
    ck__put_bytes(&run, ok.p, ok.len);
    uint64_t rank = 0, image = 4096;
    named(&r, &run, CK_MSG_ADMIT, "fz", &rank, &image);
    named(&r, &run, CK_MSG_DURABLE, "fz", &rank, NULL);
    kd_send_committed(&r.s, &r.c, "fz", CK_LEVEL_LOCAL, "not replicated: engine n1: peer "
                      "10.0.0.2:7471 (ckptd n1): silent for 30 s");
    replies_take(&r, &run);
    put("client_reply", "committed", run.p, run.len);
    ck__wbuf fail = { 0 };
    ck__put_bytes(&fail, ok.p, ok.len);
    named(&r, &fail, CK_MSG_ADMIT, "fz", &rank, &image);
    error_reply(&r, &fail, "fz", -ENOSPC, "rank-00000.dat: write: No space left on device");
    put("client_reply", "failed", fail.p, fail.len);
    ck__wbuf refused = { 0 };
    error_reply(&r, &refused, "", -EXDEV, "this ckptd serves root /a, not /b");
    put("client_reply", "refused", refused.p, refused.len);
    ck__proto_status s = { .staging_limit = 1 << 30, .staging_used = 4096, .clients = 2, .n = 1 };
    ck__proto_ckpt c = { .world = 4, .joined = 2, .staged = 1, .durable = 1,
                        .bytes_staged = 4096, .bytes_written = 4096, .bytes_per_s = 1 << 20,
                        .clients = 2, .commit_requested = 0, .state = 1 };
    snprintf(c.name, sizeof c.name, "step-00000100");
    s.ckpts = &c;
    ck__wbuf status = { 0 };
    ck__proto_start(&w, CK_MSG_STATUS_OK);
    ck__proto_put_status(&w, &s);
    frame(&status, &w);
    put("client_reply", "status", status.p, status.len);
    ck__wbuf_free(&ok);
    ck__wbuf_free(&run);
    ck__wbuf_free(&fail);
    ck__wbuf_free(&refused);
    ck__wbuf_free(&status);
    replies_close(&r);
}

static void mdb_seed(const char *target, const char *path, const char *const *dbs, int n)
{
    FILE *f = seed(target, "real");
    if (fz_mdb_dump(path, dbs, n, f) < 0) {
        fprintf(stderr, "make_seeds: cannot dump %s\n", path);
        exit(1);
    }
    fclose(f);
}

static void parser_seeds(void)
{
    /* selector byte (fuzz_parsers.c): 0 mesh, 1 mesh;names, 2 placements, 3 size,
     * 4 dtype; for placements, (b / 5) % 4 + 1 mesh dims and (b / 20) % 10 - 1
     * tensor dims */
    static const struct { const char *name; uint8_t sel; const char *s; } ex[] = {
        { "mesh", 0, "2x4" }, { "mesh-1d", 0, "16" },
        { "mesh-names", 1, "2x2;replicate,shard" },
        { "placements", 2 + 5 * 1 + 20 * 3, "R,S(0)" },      /* 2 mesh dims, 2 tensor dims */
        { "placements-s1", 2 + 20 * 3, "S(1)" },
        { "size", 3, "4GiB" }, { "size-gb", 3, "5GB" }, { "size-plain", 3, "65536" },
        { "dtype", 4, "bf16" }, { "dtype-st", 4, "BF16" },
    };
    for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++) {
        FILE *f = seed("parsers", ex[i].name);
        fputc(ex[i].sel, f);
        fputs(ex[i].s, f);
        fclose(f);
    }
}

/* fuzz_boxes.c's encoding: ndim, the shape, n, then per template and dim (a, b, c, e):
 * offset a + b j, length c + e j in round j. */
static void boxes_seeds(void)
{
    static const struct { const char *name; size_t len; uint8_t bytes[83]; } ex[] = {
        /* 2 x 200 rows of a 200 x 201 tensor: row j cut after column j */
        { "staircase", 39, { 2, 200, 0, 201, 0, 144, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1,
                             0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 201, 0, 0, 0 } },
        /* the same in 32767 rows: the old sweep compared each left box with those below */
        { "staircase-32k", 39, { 2, 255, 127, 0, 128, 254, 255, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0,
                                 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 128, 0, 0 } },
        /* full-height columns of a 4 x 255 tensor, and between them full-width rows */
        { "columns-rows", 39, { 2, 4, 0, 255, 0, 254, 1, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 1, 0, 1, 0,
                                0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 255, 0, 0, 0 } },
        /* box j is [j, 255 - j) along both dims: inside box j - 1 */
        { "nested", 23, { 2, 255, 0, 255, 0, 100, 0, 0, 0, 1, 0, 255, 0, 254, 0, 0, 0, 1, 0, 255, 0,
                          254, 0 } },
        /* 8 dims, full along 7, slab j of 201 along the last, 200 of them */
        { "slabs-8d", 83, { 8, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 201, 0, 200, 0, 0, 0, 0, 0,
                            2, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
                            2, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
                            2, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0 } },
    };
    for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++)
        put("boxes", ex[i].name, ex[i].bytes, ex[i].len);
}

/* A payload behind its target's selector byte. */
static void selected(const char *target, const char *name, uint8_t sel, const ck__wbuf *w)
{
    ck__wbuf out = { 0 };
    ck__put_u8(&out, sel);
    ck__put_bytes(&out, w->p, w->len);
    put(target, name, out.p, out.len);
    ck__wbuf_free(&out);
}

static void peer_seeds(void)
{
    ck__wbuf w = { 0 };
    ck_file files[2] = { { .name = "rank-00000.dat", .size = 4 << 20 },
                         { .name = "rank-00002.dat", .size = 2 << 20 } };
    kd_preq q = { .name = "step-100", .source = "nodeA", .manifest_size = 32768, .n = 2,
                  .files = files };
    kd_phello h = { .id = "nodeA", .instance = 42, .nonce = { 1, 2, 3 }, .proof = { 9, 8, 7 } };
    kd_pw_hello(&w, &h, false);
    selected("peer_msg", "hello", 0, &w);
    w.len = 0;
    kd_pw_hello(&w, &h, true);
    selected("peer_msg", "hello_ok", 7, &w);
    w.len = 0;
    kd_pw_auth(&w, h.proof);
    selected("peer_msg", "auth", 8, &w);
    w.len = 0;
    kd_pw_stream(&w, &q);
    selected("peer_msg", "put", 1, &w);
    w.len = 0;
    kd_preq ask = { .name = "step-100", .time_ns = 1700000000000000000ull, .n = 1,
                    .files = &files[1], .window = KD_PEER_WINDOW_MIN };
    kd_pw_ask(&w, &ask);
    selected("peer_msg", "get", 2, &w);
    w.len = 0;
    ask = (kd_preq){ .name = "step-100", .source = "nodeB", .all = true,
                     .window = KD_PEER_WINDOW_MAX };
    kd_pw_ask(&w, &ask);
    selected("peer_msg", "get_all", 2, &w);
    w.len = 0;
    ask = (kd_preq){ .name = "step-100", .time_ns = 1700000000000000000ull, .n = 2,
                     .files = files, .token = "0123456789ab", .manifest_sha256 = { 7, 7 } };
    kd_pw_part(&w, &ask);
    selected("peer_msg", "part", 9, &w);
    w.len = 0;
    kd_pw_window(&w, KD_PEER_WINDOW_MIN);
    selected("peer_msg", "put_ready", 14, &w);
    w.len = 0;
    kd_pw_error(&w, "step-100", -EBADMSG, "copy of step-100: data file rank-00002.dat, block "
                "1: its SHA-256 is not the manifest's");
    selected("peer_msg", "error", 3, &w);
    w.len = 0;
    kd_pw_name(&w, "step-100");
    selected("peer_msg", "committed", 4, &w);
    w.len = 0;
    char held[2][CK_FILE_NAME_MAX] = { "rank-00000.dat", "rank-00002.dat" };
    kd_peer_copy v[2] = {
        { .name = "step-100", .step = 100, .time_ns = 1700000000000000000ull, .source = "nodeA",
          .kind = KD_COPY_OWN, .n_files = 4, .n_held = 2, .held = held },
        { .name = "step-90", .step = 90, .time_ns = 1699999999000000000ull, .source = "nodeB",
          .kind = KD_COPY_REPLICA, .complete = true, .n_files = 4, .n_held = 4 },
    };
    kd_pw_inventory(&w, v, 2);
    selected("peer_msg", "inventory", 5, &w);
    ck__wbuf_free(&w);
    static const char copy[] = "libshard copy 1\nsource nodeA\nfiles 2\nrank-00000.dat\n"
                               "rank-00002.dat\n";
    static const char empty[] = "libshard copy 1\nsource nodeA\nfiles 0\n";
    ck__wbuf c = { 0 };
    ck__put_bytes(&c, copy, sizeof copy - 1);
    selected("peer_msg", "copy", 6, &c);
    c.len = 0;
    ck__put_bytes(&c, empty, sizeof empty - 1);
    selected("peer_msg", "copy_empty", 6, &c);
    ck__wbuf_free(&c);
}

static void restore_seeds(void)
{
    char files[2][CK_FILE_NAME_MAX] = { "rank-00002.dat", "rank-00003.dat" };
    static const struct { const char *seed; uint16_t type; uint8_t sel; ck__restore_req q; }
    reqs[] = {
        { "resolve", CK_MSG_RESOLVE, 0, { .name = "step-12" } },
        { "resolve_newest", CK_MSG_RESOLVE, 0, { .name = "step-", .newest = true } },
        { "fetch", CK_MSG_FETCH, 1, { .name = "step-12", .n = 2 } },
        { "fetch_manifest", CK_MSG_FETCH, 1, { .name = "step-12" } },
        { "tiers", CK_MSG_TIERS, 2, { .name = "" } },
    };
    ck__wbuf w = { 0 }, framed = { 0 };
    for (size_t i = 0; i < sizeof reqs / sizeof *reqs; i++) {
        ck__restore_req q = reqs[i].q;
        if (q.n)
            q.files = files;
        w.len = 0;
        ck__proto_put_restore(&w, reqs[i].type, &q);
        selected("restore_msg", reqs[i].seed, reqs[i].sel, &w);
        ck__wbuf f = { 0 };
        ck__proto_start(&f, reqs[i].type);
        ck__proto_put_restore(&f, reqs[i].type, &q);
        frame(&framed, &f);
    }
    put("daemon_msg", "restore", framed.p, framed.len);
    ck__restore_pick k = { .name = "step-8", .step = 8, .time_ns = 1700000000000000000ull,
                           .why = "step-12 (step 12): rank-00002.dat, rank-00003.dat have no "
                                  "live copy; unreachable: ckptd n2 (...); restoring step-8 "
                                  "(step 8) from the durable tier" };
    w.len = 0;
    ck__proto_put_pick(&w, &k);
    selected("restore_msg", "resolve_ok", 3, &w);
    char dirs[2][PATH_MAX] = { "/local/.fetched/2/step-12", "/durable/step-12" };
    ck__restore_dirs d = { .name = "step-12", .n = 2, .dirs = dirs };
    w.len = 0;
    ck__proto_put_dirs(&w, &d);
    selected("restore_msg", "fetch_ok", 4, &w);
    char held[1][CK_FILE_NAME_MAX] = { "rank-00002.dat" };
    kd_tpeer peers[2] = { { .id = "n1", .addr = "127.0.0.1:7471" },
                          { .id = "n3", .addr = "127.0.0.1:7472", .r = -ECONNREFUSED,
                            .why = "the connection failed" } };
    kd_tcopy copies[2] = {
        { .where = KD_AT_PEER, .holder = "n1", .c = { .name = "step-12", .step = 12,
          .time_ns = 1700000000000000000ull, .source = "n2", .kind = KD_COPY_REPLICA,
          .n_files = 4, .n_held = 1, .held = held } },
        { .where = KD_AT_DURABLE, .c = { .name = "step-8", .step = 8,
          .time_ns = 1600000000000000000ull, .complete = true } },
    };
    kd_tview t = { .v = copies, .n = 2, .peers = peers, .npeers = 2 };
    w.len = 0;
    kd_pw_tiers(&w, &t);
    selected("restore_msg", "tiers_ok", 5, &w);
    kd_drain_row rows[2] = {
        { .name = "step-12", .step = 12, .state = KD_DRAIN_RUNNING, .done = 1 << 20,
          .total = 12 << 20 },
        { .name = "step-8", .step = 8, .state = KD_DRAIN_FAILED,
          .why = "checkpoint step-8: rank-00002.dat: no copy could be had" },
    };
    w.len = 0;
    kd_pw_drains(&w, &(kd_drain_rows){ .rows = rows, .n = 2, .every = 4, .rate = 1 << 28 });
    selected("restore_msg", "drain_ok", 6, &w);
    /* DRAIN, as ckptctl drain sends it: to the daemon's decoder. */
    ck__wbuf f = { 0 };
    framed.len = 0;
    ck__proto_start(&f, CK_MSG_DRAIN);
    ck__put_str(&f, "step-12");
    ck__put_u8(&f, 1);
    frame(&framed, &f);
    put("daemon_msg", "drain", framed.p, framed.len);
    ck__wbuf_free(&w);
    ck__wbuf_free(&framed);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: make_seeds OUTDIR ROOT NAME\n");
        return 2;
    }
    outdir = argv[1];
    char path[4096];
    static const char *const mdbs[] = { CK_DB_META, CK_DB_TENSORS, CK_DB_SHARDS,
                                        CK_DB_FILES, CK_DB_HASHES, CK_DB_BLOBS };
    static const char *const cdbs[] = { "checkpoints" };
    snprintf(path, sizeof path, "%s/%s/%s", argv[2], argv[3], CK_MANIFEST);
    mdb_seed("manifest", path, mdbs, 6);
    snprintf(path, sizeof path, "%s/%s", argv[2], CK_CATALOG);
    mdb_seed("catalog", path, cdbs, 1);
    daemon_seeds();
    client_seeds();
    parser_seeds();
    boxes_seeds();
    peer_seeds();
    restore_seeds();
    return 0;
}
