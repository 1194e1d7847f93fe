/* kc_testlib.h - the client API tests (ck/client.h): the same save run embedded and
 * connected to a real ckptd, and a digest of what was committed so that a test can
 * assert that both modes gave the same checkpoint. Header-only, as kd_testlib.h. */
#ifndef KC_TESTLIB_H
#define KC_TESTLIB_H

#include <pthread.h>
#include <sys/mman.h>

#include "ck/client.h"
#include "ck/layout.h"
#include "ck/load.h"
#include "kd_testlib.h"
#include "kd_wire.h"

#define KC_MAX_WORLD 8
#define KC_MAX_T 8
#define KC_SEED 7

/* The one job of the tests' saves (ck/client.h): the same in every rank and process of
 * a test, as a job's id is; the tests of two jobs make theirs with ck_job_id_new. */
static const ck_job_id kc_job = { .bytes = "kc-tests-one-jb" };

typedef struct kc_env {
    bool connected;
    char root[PATH_MAX];
    kd_proc d;
    uint64_t world;
    ck_client *cl[KC_MAX_WORLD];
} kc_env;

/* The watchdog: a hang is a failure with a message, not a meson timeout, and the
 * daemon this test started does not outlive it. */
static pid_t kc_daemon_pid;

static inline void kc_watchdog_fire(int sig)
{
    (void)sig;
    static const char msg[] = "watchdog: the test hung (a client call never returned)\n";
    if (write(2, msg, sizeof msg - 1) < 0)
        _exit(1);
    if (kc_daemon_pid > 0)
        kill(kc_daemon_pid, SIGKILL);
    _exit(1);
}

static inline void kc_watchdog(unsigned secs)
{
    signal(SIGALRM, kc_watchdog_fire);
    alarm(secs);
}

/* Runs a test's scenario embedded, then against ckptd, under the watchdog; the two
 * modes must give the same digest (of what they committed or loaded) and, with
 * nonzero set, a digest other than 0. Prints "ok: " ok on success. */
static inline int kc_both_modes(uint64_t (*run)(bool connected), bool nonzero, const char *ok)
{
    kc_watchdog(100);
    uint64_t embedded = run(false);
    uint64_t connected = run(true);
    CHECK(embedded == connected && (!nonzero || embedded),
          "the two modes disagree (digest %016llx embedded, %016llx connected)",
          (unsigned long long)embedded, (unsigned long long)connected);
    if (tl_failures)
        return 1;
    printf("ok: %s\n", ok);
    return 0;
}

static inline const char *kc_mode(const kc_env *e)
{
    return e->connected ? "connected" : "embedded";
}

/* A fresh root and one client per rank. Connected: a ckptd on the root (with extra
 * arguments), each rank its own connection. Embedded: rank 0's client runs the
 * engine (on engine, NULL: the default), the other ranks share it (opts.peer). */
static inline void kc_open(kc_env *e, bool connected, const char *tag, uint64_t world,
                           const char *const *extra, ck_engine *engine)
{
    memset(e, 0, sizeof *e);
    e->connected = connected;
    e->world = world;
    REQUIRE(world <= KC_MAX_WORLD, "world %llu", (unsigned long long)world);
    tl_tmpdir(e->root, sizeof e->root, tag);
    if (connected) {
        kd_start(&e->d, e->root, extra);
        kc_daemon_pid = e->d.pid;
    }
    for (uint64_t r = 0; r < world; r++) {
        ck_client_opts o = { .writers = 2, .hash_threads = 2 };
        if (connected)
            o.socket = e->d.sock;
        else if (r)
            o.peer = e->cl[0];
        else
            o.embedded = true, o.engine = engine;
        ck_err err = { 0 };
        REQUIRE(ck_client_open(&e->cl[r], connected ? NULL : e->root, &o, &err) == 0,
                "%s: rank %llu: ck_client_open: %s", kc_mode(e), (unsigned long long)r,
                ck_err_msg(&err));
        REQUIRE(ck_client_connected(e->cl[r]) == connected, "%s: rank %llu: wrong mode",
                kc_mode(e), (unsigned long long)r);
    }
}

/* Closes the clients (peers before the engine's owner); connected: SIGTERM, and ckptd
 * must exit 0. */
static inline void kc_close(kc_env *e)
{
    for (uint64_t r = e->world; r-- > 0;)
        ck_client_close(e->cl[r]);
    memset(e->cl, 0, sizeof e->cl);
    if (e->connected && e->d.pid > 0) {
        CHECK(kd_term(&e->d, 30) == 0, "connected: ckptd did not exit 0 on SIGTERM (see %s)",
              e->d.log);
        kc_daemon_pid = 0;
    }
}

/* Removes the root (and the log) unless something failed: then they are evidence. */
static inline void kc_remove(kc_env *e)
{
    if (tl_failures)
        return;
    tl_rmtree(e->root);
    if (e->connected)
        unlink(e->d.log);
}

/* A tensor of the tests: named "t<i>", holding formula tensor i (tl_box_bytes). */
typedef struct kc_tensor {
    ck_dtype dtype;
    int ndim;
    uint64_t shape[CK_MAX_NDIM];
    const char *pl;            /* placements over the save's mesh */
} kc_tensor;

/* One rank's shards: either formula fills or buffers in memory that it owns. */
typedef struct kc_part {
    ck_synth_src src[KC_MAX_T];
    uint8_t *buf[KC_MAX_T];
    uint64_t bytes[KC_MAX_T];
} kc_part;

/* The submits of the tests: the copy, the lazy and the synchronous one. */
static const ck_submit kc_copy = { .mode = CK_SUBMIT_COPY };
static const ck_submit kc_lazy = { .mode = CK_SUBMIT_LAZY };
static const ck_submit kc_sync = { .mode = CK_SUBMIT_SYNC };

/* The declaration of ts[0..n), named "t<i>", on mesh (not sealed: the begin seals it). */
static inline ck_decl *kc_decl(const ck_mesh *mesh, const kc_tensor *ts, uint32_t n)
{
    ck_err err = { 0 };
    ck_decl *d;
    REQUIRE(ck_decl_new(&d, mesh, &err) == 0, "%s", ck_err_msg(&err));
    for (uint32_t t = 0; t < n; t++) {
        char tn[16];
        snprintf(tn, sizeof tn, "t%u", t);
        ck_placement pl[CK_MAX_MESH_DIMS];
        REQUIRE(ck_placements_parse(ts[t].pl, mesh->ndim, ts[t].ndim, pl, &err) == 0, "%s: %s",
                ts[t].pl, ck_err_msg(&err));
        REQUIRE(ck_decl_tensor(d, tn, ts[t].dtype, ts[t].ndim, ts[t].shape, pl, &err) == 0,
                "tensor %s: %s", tn, ck_err_msg(&err));
    }
    return d;
}

/* Begins rank's part of name, declaring ts[0..n) on mesh (ck_client_begin's result). */
static inline int kc_begin(ck_client *cl, ck_client_save **sv, const char *name, uint64_t step,
                           const ck_mesh *mesh, uint64_t rank, const kc_tensor *ts, uint32_t n,
                           const ck_job_id *job, ck_err *err)
{
    ck_decl *d = kc_decl(mesh, ts, n);
    int r = ck_client_begin(cl, sv, name, step, d, rank, job, err);
    ck_decl_free(d);
    return r;
}

/* Begins rank's part of name, declaring one tensor (ck_client_begin's result). */
static inline int kc_begin1(ck_client *cl, ck_client_save **sv, const char *name, uint64_t step,
                            const ck_mesh *mesh, uint64_t rank, const char *tensor,
                            ck_dtype dtype, int ndim, const uint64_t *shape,
                            const ck_placement *pl, const ck_job_id *job, ck_err *err)
{
    ck_decl *d;
    int r = ck_decl_new(&d, mesh, err);
    if (r == 0 && (r = ck_decl_tensor(d, tensor, dtype, ndim, shape, pl, err)) == 0)
        r = ck_client_begin(cl, sv, name, step, d, rank, job, err);
    ck_decl_free(d);
    return r;
}

/* Gives rank's shards of ts[0..n) (declared by kc_begin): from memory (p->buf, the
 * formula's bytes, which the caller may overwrite later) or as formula fills. */
static inline void kc_declare(ck_client_save *sv, const ck_mesh *mesh, uint64_t rank,
                              const kc_tensor *ts, uint32_t n, kc_part *p, bool memory)
{
    ck_err err = { 0 };
    uint32_t coord[CK_MAX_MESH_DIMS];
    ck_mesh_coord(mesh, rank, coord);
    REQUIRE(n <= KC_MAX_T, "too many tensors");
    for (uint32_t t = 0; t < n; t++) {
        char tn[16];
        snprintf(tn, sizeof tn, "t%u", t);
        ck_placement pl[CK_MAX_MESH_DIMS];
        REQUIRE(ck_placements_parse(ts[t].pl, mesh->ndim, ts[t].ndim, pl, &err) == 0, "%s: %s",
                ts[t].pl, ck_err_msg(&err));
        size_t is = ck_dtype_size(ts[t].dtype);
        p->src[t] = (ck_synth_src){ .seed = KC_SEED, .tensor = t, .itemsize = is,
                                    .ndim = ts[t].ndim };
        memcpy(p->src[t].shape, ts[t].shape, (size_t)ts[t].ndim * sizeof *ts[t].shape);
        ck_shard_box(ts[t].ndim, ts[t].shape, mesh, pl, coord, &p->src[t].box);
        p->bytes[t] = ck_box_numel(&p->src[t].box) * is;
        int r;
        if (memory) {
            p->buf[t] = tl_box_bytes(KC_SEED, t, is, ts[t].ndim, ts[t].shape, &p->src[t].box);
            r = ck_client_shard(sv, tn, p->buf[t], &err);
        } else {
            r = ck_client_shard_fill(sv, tn, ck_synth_fill, &p->src[t], &err);
        }
        REQUIRE(r == 0, "rank %llu: shard %s: %s", (unsigned long long)rank, tn, ck_err_msg(&err));
    }
}

static inline void kc_part_free(kc_part *p)
{
    for (int t = 0; t < KC_MAX_T; t++)
        free(p->buf[t]);
    memset(p, 0, sizeof *p);
}

/* ---- a digest of a committed checkpoint, to compare the two modes ---- */

static inline void kc_fnv(uint64_t *h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        *h = (*h ^ b[i]) * 0x100000001b3ull;
}

static inline void kc_fnv_u64(uint64_t *h, uint64_t v)
{
    kc_fnv(h, &v, sizeof v);
}

typedef struct kc_walk {
    ck_ckpt *ck;
    uint64_t h;
    int bad;
} kc_walk;

static inline int kc_digest_tensor(const ck_tensor *t, void *arg)
{
    kc_walk *w = arg;
    ck_err err = { 0 };
    kc_fnv(&w->h, t->name, strlen(t->name) + 1);
    kc_fnv_u64(&w->h, (uint64_t)t->dtype);
    kc_fnv_u64(&w->h, (uint64_t)t->ndim);
    for (int d = 0; d < t->ndim; d++)
        kc_fnv_u64(&w->h, t->shape[d]);
    kc_fnv_u64(&w->h, t->n_shards);
    ck_box full;
    ck_box_full(t->ndim, t->shape, &full);
    uint64_t bytes = ck_box_numel(&full) * ck_dtype_size(t->dtype);
    uint8_t *buf = malloc(bytes + 1);
    ck_reader *rd;
    if (!buf || ck_reader_open(w->ck, t->name, CK_AS_SAVED, &rd, &err) < 0) {
        fprintf(stderr, "digest: tensor %s: %s\n", t->name, ck_err_msg(&err));
        w->bad++;
        free(buf);
        return 0;
    }
    if (ck_reader_read(rd, &full, 0, bytes, buf, &err) < 0) {
        fprintf(stderr, "digest: reading tensor %s: %s\n", t->name, ck_err_msg(&err));
        w->bad++;
    }
    kc_fnv(&w->h, buf, bytes);
    ck_reader_close(rd);
    free(buf);
    return 0;
}

static inline int kc_digest_blob(const char *name, const void *data, size_t len, void *arg)
{
    kc_walk *w = arg;
    kc_fnv(&w->h, name, strlen(name) + 1);
    kc_fnv_u64(&w->h, len);
    kc_fnv(&w->h, data, len);
    return 0;
}

/* Hashes what ROOT/NAME holds: its description, every tensor's full contents, every
 * blob, and the raw bytes of every data file. 0 when it cannot be read. */
static inline uint64_t kc_digest(const char *root, const char *name)
{
    ck_ckpt *ck;
    ck_err err = { 0 };
    if (ck_open(root, name, &ck, &err) < 0) {
        fprintf(stderr, "digest: open %s/%s: %s\n", root, name, ck_err_msg(&err));
        return 0;
    }
    const ck_info *in = ck_get_info(ck);
    kc_walk w = { .ck = ck, .h = 0xcbf29ce484222325ull };
    kc_fnv(&w.h, in->name, strlen(in->name) + 1);
    kc_fnv_u64(&w.h, in->step);
    kc_fnv_u64(&w.h, ck_mesh_world(&in->mesh));
    kc_fnv_u64(&w.h, in->hashed);
    kc_fnv_u64(&w.h, in->n_tensors);
    kc_fnv_u64(&w.h, in->n_shards);
    kc_fnv_u64(&w.h, in->n_files);
    kc_fnv_u64(&w.h, in->n_blobs);
    kc_fnv_u64(&w.h, in->data_bytes);
    kc_fnv_u64(&w.h, in->tensor_bytes);
    if (ck_tensors_each(ck, kc_digest_tensor, &w, &err) < 0 ||
        ck_blobs_each(ck, kc_digest_blob, &w, &err) < 0) {
        fprintf(stderr, "digest: %s: %s\n", name, ck_err_msg(&err));
        w.bad++;
    }
    for (uint32_t f = 0; f < in->n_files; f++) {
        char path[PATH_MAX];
        const ck_file *cf = ck_file_get(ck, f);
        if (!cf || snprintf(path, sizeof path, "%s/%s", ck_dir(ck), cf->name) >=
                       (int)sizeof path) {
            w.bad++;
            continue;
        }
        kc_fnv(&w.h, cf->name, strlen(cf->name) + 1);
        FILE *fp = fopen(path, "rb");
        if (!fp) {
            fprintf(stderr, "digest: %s: %s\n", path, strerror(errno));
            w.bad++;
            continue;
        }
        static uint8_t chunk[1 << 16];
        size_t n;
        while ((n = fread(chunk, 1, sizeof chunk, fp)) > 0)
            kc_fnv(&w.h, chunk, n);
        fclose(fp);
    }
    ck_close(ck);
    return w.bad ? 0 : (w.h ? w.h : 1);
}

/* ckptd's STATUS through a connection of its own. */
static inline ck__proto_status kc_status(const char *sock)
{
    ck_err err = { 0 };
    int fd;
    REQUIRE(ck__conn_connect(sock, &fd, &err) == 0, "status: %s", ck_err_msg(&err));
    ck__wbuf w = { 0 };
    ck__proto_start(&w, CK_MSG_STATUS);
    ck__proto_end(&w);
    REQUIRE(ck__conn_send(fd, &w, -1, &err) == 0, "status: %s", ck_err_msg(&err));
    ck__wbuf_free(&w);
    ck__msg m;
    REQUIRE(ck__conn_recv(fd, true, &m, &err) > 0 && m.type == CK_MSG_STATUS_OK,
            "status: no STATUS_OK: %s", ck_err_msg(&err));
    ck__proto_status st;
    REQUIRE(ck__proto_get_status(m.payload, m.len, &st, &err) == 0, "status: %s",
            ck_err_msg(&err));
    free(m.payload);
    free(st.ckpts);
    close(fd);
    return st;
}

/* Whether state is one a save can be in once its submit returned 0. */
static inline bool kc_state_in_flight_or_done(ck_client_state st)
{
    return st == CK_CLIENT_STAGED || st == CK_CLIENT_DURABLE || st == CK_CLIENT_COMMITTED;
}

static inline const char *kc_state_name(ck_client_state st)
{
    static const char *names[] = { "BUILDING", "STAGED", "DURABLE", "COMMITTED", "FAILED" };
    return (unsigned)st < 5 ? names[st] : "(not a state)";
}

/* The next message on fd, as a raw client reads it: its type (0 once the connection
 * closed, or past the socket's SO_RCVTIMEO), and an ERROR's message into msg. */
static inline uint16_t kc_reply(int fd, char *msg, size_t len)
{
    ck__msg m = { 0 };
    if (ck__conn_recv(fd, true, &m, NULL) <= 0)
        return 0;
    if (m.type == CK_MSG_ERROR && msg) {
        ck__rbuf r = ck__rbuf_make(m.payload, m.len);
        char name[CK_NAME_MAX];
        ck__get_str(&r, name, sizeof name);
        ck__get_u32(&r);
        ck__get_str(&r, msg, len);
    }
    free(m.payload);
    return m.type;
}

/* A rank as ckptd sees it, without the client library: connects to sock and sends a
 * raw BEGIN of d (of the tests' job kc_job where d names none) with a sealed staging
 * memfd of d->staging_size bytes; with status, a STATUS right behind it, in the same
 * write (the daemon reads both before it answers either). Returns the connection, for
 * the test to read the replies. */
static inline int kc_raw_begin_then(const char *sock, const kc_wire *decl, bool status)
{
    kc_wire copy = *decl, *d = &copy;
    if (!ck__job_set(&d->job))
        d->job = kc_job;
    ck_err err = { 0 };
    int fd, mfd = memfd_create("raw-begin", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    REQUIRE(mfd >= 0 && ftruncate(mfd, (off_t)d->staging_size) == 0 &&
            fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK) == 0, "memfd");
    REQUIRE(ck__conn_connect(sock, &fd, &err) == 0, "%s", ck_err_msg(&err));
    ck__wbuf w = { 0 }, st = { 0 };
    ck__proto_start(&w, CK_MSG_BEGIN);
    kc_put_wire(&w, d);
    ck__proto_end(&w);
    ck__proto_start(&st, CK_MSG_STATUS);
    ck__proto_end(&st);
    if (status)
        ck__put_bytes(&w, st.p, st.len);
    REQUIRE(ck__conn_send(fd, &w, mfd, &err) == 0, "BEGIN %s: %s", d->name,
            ck_err_msg(&err));
    ck__wbuf_free(&w);
    ck__wbuf_free(&st);
    close(mfd);
    return fd;
}

static inline int kc_raw_begin(const char *sock, const kc_wire *d)
{
    return kc_raw_begin_then(sock, d, false);
}

/* The end of a test of two daemons A and B: both must exit 0 on SIGTERM (under ASan,
 * LeakSanitizer's verdict); the root and the logs stay behind when anything failed. */
static inline int kc_end_two(kd_proc *a, kd_proc *b, const char *root)
{
    CHECK(kd_term(a, 30) == 0, "A did not exit 0 on SIGTERM (see %s)", a->log);
    CHECK(kd_term(b, 30) == 0, "B did not exit 0 on SIGTERM (see %s)", b->log);
    kc_daemon_pid = 0;
    if (tl_failures)
        return 1;
    tl_rmtree(root);
    unlink(a->log);
    unlink(b->log);
    return 0;
}

#endif
