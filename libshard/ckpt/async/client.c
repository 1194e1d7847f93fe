/* client.c - async saves and loads from training ranks (see ck/client.h).
 *
 * A save's part goes through the same three steps in both modes: join (declare, get
 * admitted: the daemon may hold this back while its staging memory is full), copy
 * into the staging memfd laid out as the rank's data file (the only stall), stage
 * (hand it over). Connected, steps are messages on the socket and the results come
 * back as messages; embedded, they are calls into the saver and the results come back
 * through its event callback. Either way the saves' states move forward only.
 */
#include "ck/client.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ck/load.h"
#include "model/plan.h"
#include "save/image.h"
#include "async/saver.h"
#include "async/proto.h"

#define NSLOTS 2

/* The embedded engine, shared by the clients of the ranks of one process. */
typedef struct hub {
    ck_saver *sv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned refs;
    ck_client_save *saves;      /* every save in flight of every client, for events */
} hub;

typedef struct slot {
    int fd;
    uint8_t *map;
    uint64_t size;
    ck_client_save *user;       /* the save whose part it holds, until durable */
} slot;

struct ck_client {
    char root[PATH_MAX];
    char sock_path[108];
    int sock;                   /* -1: embedded */
    bool dead;                  /* connected, and the connection broke */
    hub *hub;
    slot slots[NSLOTS];
    unsigned next_slot;
    ck_client_save *saves;      /* connected: this client's saves, for replies */
};

typedef ck_shard_src csrc;

struct ck_client_save {
    ck_client *cl;
    ck_decl d;
    uint32_t cap_t, cap_b;
    csrc *src;                  /* per tensor */
    uint8_t **blob_data;        /* per blob, copies */
    ck_client_state state;
    bool admitted;
    uint64_t image_bytes;       /* from the engine, checked against our plan */
    int code;
    char msg[CK_ERR_MSG_MAX];
    int slot;                   /* -1: none */
    bool listed;
    ck_client_save *next;
};

/* ---- states ---- */

static void set_state(ck_client_save *sv, ck_client_state st, int code, const char *msg)
{
    if (sv->state == CK_CLIENT_COMMITTED || sv->state == CK_CLIENT_FAILED)
        return;
    if (st == CK_CLIENT_FAILED) {
        sv->code = code;
        snprintf(sv->msg, sizeof sv->msg, "%s", msg);
    } else if (st <= sv->state) {
        return;
    }
    sv->state = st;
}

static ck_client_save **list_of(ck_client *cl)
{
    return cl->hub ? &cl->hub->saves : &cl->saves;
}

static void hub_event(void *arg, const ck_saver_event *ev)
{
    hub *h = arg;
    pthread_mutex_lock(&h->mu);
    for (ck_client_save *sv = h->saves; sv; sv = sv->next) {
        if (strcmp(sv->d.name, ev->name) != 0)
            continue;
        if (ev->kind == CK_SAVER_DURABLE && sv->d.rank == ev->rank)
            set_state(sv, CK_CLIENT_DURABLE, 0, NULL);
        else if (ev->kind == CK_SAVER_COMMITTED)
            set_state(sv, CK_CLIENT_COMMITTED, 0, NULL);
        else if (ev->kind == CK_SAVER_FAILED)
            set_state(sv, CK_CLIENT_FAILED, ev->code, ev->msg);
    }
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

static void lock(ck_client *cl)
{
    if (cl->hub)
        pthread_mutex_lock(&cl->hub->mu);
}

static void unlock(ck_client *cl)
{
    if (cl->hub)
        pthread_mutex_unlock(&cl->hub->mu);
}

/* ---- the connection ---- */

static void conn_broken(ck_client *cl, int code, const char *msg)
{
    cl->dead = true;
    for (ck_client_save *sv = cl->saves; sv; sv = sv->next)
        set_state(sv, CK_CLIENT_FAILED, code, msg);
}

/* Applies one reply of the daemon to the saves it names. */
static void dispatch(ck_client *cl, const ck_msg *m)
{
    ck_rbuf r = ck_rbuf_make(m->payload, m->len);
    char name[CK_NAME_MAX] = "";
    if (m->type != CK_MSG_HELLO_OK && m->type != CK_MSG_STATUS_OK)
        ck_get_str(&r, name, sizeof name);
    uint64_t rank = 0, bytes = 0;
    int32_t code = 0;
    char msg[CK_ERR_MSG_MAX] = "";
    switch (m->type) {
    case CK_MSG_ADMIT:
        rank = ck_get_u64(&r);
        bytes = ck_get_u64(&r);
        break;
    case CK_MSG_DURABLE:
        rank = ck_get_u64(&r);
        break;
    case CK_MSG_ERROR:
        code = (int32_t)ck_get_u32(&r);
        ck_get_str(&r, msg, sizeof msg);
        break;
    case CK_MSG_COMMITTED:
        break;
    default:
        r.bad = true;
    }
    if (!ck_rbuf_done(&r) || (m->type == CK_MSG_ERROR && code >= 0)) {
        conn_broken(cl, -EPROTO, "ckptd sent a malformed reply");
        return;
    }
    if (m->type == CK_MSG_ERROR && !name[0]) {
        char full[CK_ERR_MSG_MAX + 32];
        snprintf(full, sizeof full, "ckptd: %s", msg);
        conn_broken(cl, code, full);
        return;
    }
    for (ck_client_save *sv = cl->saves; sv; sv = sv->next) {
        if (strcmp(sv->d.name, name) != 0)
            continue;
        if (m->type == CK_MSG_ADMIT && sv->d.rank == rank && !sv->admitted) {
            sv->admitted = true;
            sv->image_bytes = bytes;
        } else if (m->type == CK_MSG_DURABLE && sv->d.rank == rank) {
            set_state(sv, CK_CLIENT_DURABLE, 0, NULL);
        } else if (m->type == CK_MSG_COMMITTED) {
            set_state(sv, CK_CLIENT_COMMITTED, 0, NULL);
        } else if (m->type == CK_MSG_ERROR) {
            set_state(sv, CK_CLIENT_FAILED, code, msg);
        }
    }
}

/* Reads replies (blocking when block) and applies them. */
static int pump(ck_client *cl, bool block)
{
    if (cl->dead)
        return -ECONNRESET;
    ck_msg m;
    ck_err err = { 0 };
    int r;
    while ((r = ck_conn_recv(cl->sock, block, &m, &err)) > 0) {
        dispatch(cl, &m);
        free(m.payload);
        if (block || cl->dead)
            break;
    }
    if (r < 0)
        conn_broken(cl, r, ck_err_msg(&err));
    return r < 0 ? r : 0;
}

/* Waits until done(sv) holds. Embedded, under the hub's lock. */
static void wait_for(ck_client *cl, bool (*done)(ck_client *, const void *), const void *arg)
{
    lock(cl);
    while (!done(cl, arg)) {
        if (cl->hub)
            pthread_cond_wait(&cl->hub->cv, &cl->hub->mu);
        else if (pump(cl, true) < 0)
            break;      /* every save is FAILED now: done() holds for what we wait on */
    }
    unlock(cl);
}

static int send_msg(ck_client *cl, ck_wbuf *w, int fd, ck_err *err)
{
    int r = ck_proto_end(w);
    if (r < 0)
        return ck_err_set(err, r, "out of memory building a message");
    if (cl->dead)
        return ck_err_set(err, -ECONNRESET, "the connection to ckptd at %s is broken",
                          cl->sock_path);
    return ck_conn_send(cl->sock, w, fd, err);
}

/* ---- open / close ---- */

static int hello(ck_client *cl, const char *root, ck_err *err)
{
    ck_wbuf w = { 0 };
    ck_proto_start(&w, CK_MSG_HELLO);
    ck_put_str(&w, root ? root : "");
    int r = send_msg(cl, &w, -1, err);
    ck_wbuf_free(&w);
    ck_msg m;
    if (r == 0 && (r = ck_conn_recv(cl->sock, true, &m, err)) > 0) {
        ck_rbuf rb = ck_rbuf_make(m.payload, m.len);
        char msg[CK_ERR_MSG_MAX] = "";
        if (m.type == CK_MSG_HELLO_OK) {
            ck_get_str(&rb, cl->root, sizeof cl->root);
            ck_get_u64(&rb);
            r = ck_rbuf_done(&rb) ? 0 : ck_err_set(err, -EPROTO, "malformed HELLO reply");
        } else if (m.type == CK_MSG_ERROR) {
            ck_get_str(&rb, msg, sizeof msg);
            int32_t code = (int32_t)ck_get_u32(&rb);
            ck_get_str(&rb, msg, sizeof msg);
            r = ck_err_set(err, code < 0 ? code : -EPROTO, "ckptd refused: %s", msg);
        } else {
            r = ck_err_set(err, -EPROTO, "unexpected reply %u to HELLO", m.type);
        }
        free(m.payload);
    }
    return r < 0 ? ck_err_set(err, r, "ckptd at %s", cl->sock_path) : 0;
}

int ck_client_open(ck_client **out, const char *root, const ck_client_opts *opts,
                   ck_err *err)
{
    ck_client_opts o = opts ? *opts : (ck_client_opts){ 0 };
    const char *env = getenv("CKPTD_SOCKET");
    const char *sock = o.socket ? o.socket : (!o.embedded && env && *env) ? env : NULL;
    if (o.peer || o.embedded)
        sock = NULL;
    if (!sock && !root && !o.peer)
        return ck_err_set(err, -EINVAL, "embedded checkpoint client: no root given");
    ck_client *cl = calloc(1, sizeof *cl);
    if (!cl)
        return ck_err_set(err, -ENOMEM, "out of memory");
    cl->sock = -1;
    for (int i = 0; i < NSLOTS; i++)
        cl->slots[i].fd = -1;
    int r = 0;
    if (sock) {
        snprintf(cl->sock_path, sizeof cl->sock_path, "%s", sock);
        if ((r = ck_conn_connect(sock, &cl->sock, err)) == 0)
            r = hello(cl, root, err);
    } else if (o.peer) {
        if (!o.peer->hub) {
            r = ck_err_set(err, -EINVAL, "the peer client is not embedded");
        } else {
            cl->hub = o.peer->hub;
            snprintf(cl->root, sizeof cl->root, "%s", o.peer->root);
            pthread_mutex_lock(&cl->hub->mu);
            cl->hub->refs++;
            pthread_mutex_unlock(&cl->hub->mu);
        }
    } else {
        snprintf(cl->root, sizeof cl->root, "%s", root);
        hub *h = calloc(1, sizeof *h);
        if (!h) {
            r = ck_err_set(err, -ENOMEM, "out of memory");
        } else {
            pthread_mutex_init(&h->mu, NULL);
            pthread_cond_init(&h->cv, NULL);
            h->refs = 1;
            cl->hub = h;
            ck_saver_opts so = { .root = root, .engine = o.engine, .writers = o.writers,
                                 .hash_threads = o.hash_threads, .log = o.log,
                                 .event = hub_event, .arg = h };
            r = ck_saver_new(&so, &h->sv, err);
        }
    }
    if (r < 0) {
        ck_client_close(cl);
        return r;
    }
    *out = cl;
    return 0;
}

bool ck_client_connected(const ck_client *cl)
{
    return cl->sock >= 0;
}

const char *ck_client_root(const ck_client *cl)
{
    return cl->root;
}

static void slot_release(slot *s)
{
    if (s->map)
        munmap(s->map, s->size);
    if (s->fd >= 0)
        close(s->fd);
    *s = (slot){ .fd = -1 };
}

static bool all_slots_free(ck_client *cl, const void *arg);

void ck_client_close(ck_client *cl)
{
    if (!cl)
        return;
    /* The engine writes from the staging areas in place: unmap them only once every
     * part this client staged is durable (or failed). */
    wait_for(cl, all_slots_free, NULL);
    for (int i = 0; i < NSLOTS; i++)
        slot_release(&cl->slots[i]);
    if (cl->sock >= 0)
        close(cl->sock);
    hub *h = cl->hub;
    if (h) {
        pthread_mutex_lock(&h->mu);
        bool last = --h->refs == 0;
        pthread_mutex_unlock(&h->mu);
        if (last) {
            /* The saver's last events take the hub's lock: free it first. */
            ck_saver_free(h->sv);
            pthread_cond_destroy(&h->cv);
            pthread_mutex_destroy(&h->mu);
            free(h);
        }
    }
    free(cl);
}

/* ---- building a save ---- */

int ck_client_begin(ck_client *cl, ck_client_save **out, const char *name, uint64_t step,
                    const ck_mesh *mesh, uint64_t rank, uint64_t world, ck_err *err)
{
    int r = ck_name_check("checkpoint", name, err);
    if (r < 0)
        return r;
    if (world != ck_mesh_world(mesh) || rank >= world)
        return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu of world %llu, but the mesh "
                          "has %llu ranks", name, (unsigned long long)rank,
                          (unsigned long long)world, (unsigned long long)ck_mesh_world(mesh));
    ck_client_save *sv = calloc(1, sizeof *sv);
    if (!sv)
        return ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory", name);
    sv->cl = cl;
    sv->slot = -1;
    snprintf(sv->d.name, sizeof sv->d.name, "%s", name);
    sv->d.step = step;
    sv->d.mesh = *mesh;
    sv->d.rank = rank;
    sv->d.world = world;
    *out = sv;
    return 0;
}

void ck_client_no_hash(ck_client_save *sv)
{
    sv->d.no_hash = true;
}

static int building(const ck_client_save *sv, ck_err *err)
{
    if (sv->state != CK_CLIENT_BUILDING)
        return ck_err_set(err, -EINVAL, "checkpoint %s, rank %llu: save_async was called "
                          "already", sv->d.name, (unsigned long long)sv->d.rank);
    return 0;
}

int ck_client_tensor(ck_client_save *sv, const char *name, ck_dtype dtype, int ndim,
                     const uint64_t *shape, const ck_placement *pl, ck_err *err)
{
    int r = building(sv, err);
    if (r == 0)
        r = ck_name_check("tensor", name, err);
    if (r < 0)
        return r;
    if (ndim < 0 || ndim > CK_MAX_NDIM || !ck_dtype_size(dtype))
        return ck_err_set(err, -EINVAL, "tensor %s: bad dtype %d or %d dims", name, (int)dtype,
                          ndim);
    if (sv->d.ntensors == sv->cap_t) {
        uint32_t cap = sv->cap_t ? sv->cap_t * 2 : 64;
        ck_decl_tensor *t = realloc(sv->d.tensors, cap * sizeof *t);
        if (t)
            sv->d.tensors = t;
        csrc *s = t ? realloc(sv->src, cap * sizeof *s) : NULL;
        if (!s)
            return ck_err_set(err, -ENOMEM, "tensor %s: out of memory", name);
        sv->src = s;
        sv->cap_t = cap;
    }
    ck_decl_tensor *t = &sv->d.tensors[sv->d.ntensors];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = (uint8_t)dtype;
    t->ndim = (uint8_t)ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    memcpy(t->pl, pl, (size_t)sv->d.mesh.ndim * sizeof *pl);
    sv->src[sv->d.ntensors++] = (csrc){ 0 };
    return 0;
}

static int set_src(ck_client_save *sv, const char *tensor, csrc src, ck_err *err)
{
    int r = building(sv, err);
    if (r < 0)
        return r;
    for (uint32_t i = 0; i < sv->d.ntensors; i++)
        if (!strcmp(sv->d.tensors[i].name, tensor)) {
            sv->src[i] = src;
            return 0;
        }
    return ck_err_set(err, -ENOENT, "checkpoint %s: no tensor %s was declared", sv->d.name,
                      tensor);
}

int ck_client_shard(ck_client_save *sv, const char *tensor, const void *data, ck_err *err)
{
    return set_src(sv, tensor, (csrc){ .mem = data }, err);
}

int ck_client_shard_fill(ck_client_save *sv, const char *tensor, ck_fill_fn fill, void *arg,
                         ck_err *err)
{
    return set_src(sv, tensor, (csrc){ .fill = fill, .arg = arg }, err);
}

int ck_client_blob(ck_client_save *sv, const char *name, const void *data, size_t len,
                   ck_err *err)
{
    int r = building(sv, err);
    if (r == 0)
        r = ck_name_check("blob", name, err);
    if (r < 0)
        return r;
    if (len > CK_BLOB_MAX)
        return ck_err_set(err, -EFBIG, "blob %s: %zu bytes (at most %u)", name, len, CK_BLOB_MAX);
    if (sv->d.nblobs >= CK_PROTO_MAX_BLOBS)
        return ck_err_set(err, -E2BIG, "blob %s: more than %u blobs", name, CK_PROTO_MAX_BLOBS);
    if (sv->d.nblobs == sv->cap_b) {
        uint32_t cap = sv->cap_b ? sv->cap_b * 2 : 8;
        ck_decl_blob *b = realloc(sv->d.blobs, cap * sizeof *b);
        if (b)
            sv->d.blobs = b;
        uint8_t **p = b ? realloc(sv->blob_data, cap * sizeof *p) : NULL;
        if (!p)
            return ck_err_set(err, -ENOMEM, "blob %s: out of memory", name);
        sv->blob_data = p;
        sv->cap_b = cap;
    }
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        return ck_err_set(err, -ENOMEM, "blob %s: out of memory", name);
    memcpy(copy, data, len);
    ck_decl_blob *b = &sv->d.blobs[sv->d.nblobs];
    memset(b, 0, sizeof *b);
    snprintf(b->name, sizeof b->name, "%s", name);
    b->len = len;
    sv->blob_data[sv->d.nblobs++] = copy;
    return 0;
}

/* ---- save_async ---- */

static bool slot_free(const slot *s)
{
    return !s->user || s->user->state >= CK_CLIENT_DURABLE;
}

static bool any_slot_free(ck_client *cl, const void *arg)
{
    (void)arg;
    for (int i = 0; i < NSLOTS; i++)
        if (slot_free(&cl->slots[i]))
            return true;
    return false;
}

static bool all_slots_free(ck_client *cl, const void *arg)
{
    (void)arg;
    for (int i = 0; i < NSLOTS; i++)
        if (!slot_free(&cl->slots[i]))
            return false;
    return true;
}

static bool admitted(ck_client *cl, const void *arg)
{
    const ck_client_save *sv = arg;
    return sv->admitted || sv->state == CK_CLIENT_FAILED;
}

static bool part_done(ck_client *cl, const void *arg)
{
    const ck_client_save *sv = arg;
    return sv->state >= CK_CLIENT_DURABLE || sv->state == CK_CLIENT_BUILDING;
}

static bool save_done(ck_client *cl, const void *arg)
{
    const ck_client_save *sv = arg;
    return sv->state == CK_CLIENT_COMMITTED || sv->state == CK_CLIENT_FAILED;
}

/* A sealed memfd of at least need bytes: the daemon maps it, and the seals promise it
 * that the pages cannot be truncated away under its writes. */
static int slot_fit(ck_client_save *sv, slot *s, uint64_t need, ck_err *err)
{
    if (s->map && s->size >= need)
        return 0;
    slot_release(s);
    uint64_t size = (need + (2u << 20) - 1) & ~(uint64_t)((2u << 20) - 1);
    if (!size)
        size = CK_ALIGN;
    s->fd = memfd_create("ckpt-staging", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    int r = s->fd < 0 ? -errno : 0;
    if (r == 0 && ftruncate(s->fd, (off_t)size) < 0)
        r = -errno;
    if (r == 0 && fcntl(s->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
        r = -errno;
    if (r == 0) {
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, s->fd, 0);
        if (p == MAP_FAILED)
            r = -errno;
        else
            s->map = p, s->size = size;
    }
    if (r < 0) {
        slot_release(s);
        return ck_err_set(err, r, "checkpoint %s, rank %llu: staging memfd of %llu bytes: %s",
                          sv->d.name, (unsigned long long)sv->d.rank, (unsigned long long)size,
                          strerror(-r));
    }
    return 0;
}

/* This rank's file image from the shared plan (save/image.h), then the blobs. */
static int copy_in(ck_client_save *sv, const ck_plan *p, uint8_t *dst, uint64_t image,
                   ck_err *err)
{
    uint32_t t;
    int r = ck__rank_image(p, sv->d.rank, sv->src, dst, &t);
    if (r < 0)
        return ck_err_set(err, r, "checkpoint %s, rank %llu: filling tensor %s: %s",
                          sv->d.name, (unsigned long long)sv->d.rank, sv->d.tensors[t].name,
                          strerror(-r));
    for (uint32_t b = 0; b < sv->d.nblobs; b++) {
        memcpy(dst + image, sv->blob_data[b], sv->d.blobs[b].len);
        image += sv->d.blobs[b].len;
    }
    return 0;
}

static int make_plan(ck_client_save *sv, ck_plan **out, ck_err *err)
{
    int r = ck_plan_new(&sv->d.mesh, out);
    if (r < 0)
        return ck_err_set(err, r, "checkpoint %s: out of memory", sv->d.name);
    for (uint32_t t = 0; t < sv->d.ntensors && r == 0; t++) {
        const ck_decl_tensor *d = &sv->d.tensors[t];
        uint32_t first, count;
        r = ck_plan_add(*out, d->name, d->ndim, d->shape, ck_dtype_size(d->dtype), d->pl,
                        &first, &count, err);
        const ck_plan_shard *ps = r == 0 ? ck_plan_shard_at(*out, ck_plan_shard_of(*out, t,
                                                            sv->d.rank)) : NULL;
        if (ps && ps->writer == sv->d.rank && ps->bytes && !sv->src[t].mem && !sv->src[t].fill)
            r = ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu writes tensor %s but gave "
                           "no shard for it", sv->d.name, (unsigned long long)sv->d.rank, d->name);
    }
    if (r < 0) {
        ck_plan_free(*out);
        *out = NULL;
    }
    return r;
}

static void list_add(ck_client_save *sv)
{
    ck_client *cl = sv->cl;
    lock(cl);
    ck_client_save **l = list_of(cl);
    sv->next = *l;
    *l = sv;
    sv->listed = true;
    unlock(cl);
}

/* Joins the save: embedded, a call; connected, BEGIN with the memfd, then ADMIT. */
static int join(ck_client_save *sv, const slot *s, ck_err *err)
{
    ck_client *cl = sv->cl;
    if (cl->hub) {
        int r = ck_saver_join(cl->hub->sv, &sv->d, &sv->image_bytes, err);
        sv->admitted = r == 0;
        return r;
    }
    ck_wbuf w = { 0 };
    ck_proto_start(&w, CK_MSG_BEGIN);
    ck_proto_put_decl(&w, &sv->d);
    int r = send_msg(cl, &w, s->fd, err);
    ck_wbuf_free(&w);
    if (r < 0)
        return r;
    wait_for(cl, admitted, sv);
    if (sv->state == CK_CLIENT_FAILED)
        return ck_err_set(err, sv->code, "%s", sv->msg);
    return 0;
}

static int stage(ck_client_save *sv, const slot *s, ck_err *err)
{
    ck_client *cl = sv->cl;
    lock(cl);
    set_state(sv, CK_CLIENT_STAGED, 0, NULL);
    unlock(cl);
    if (cl->hub)
        return ck_saver_stage(cl->hub->sv, sv->d.name, sv->d.rank, s->map, err);
    ck_wbuf w = { 0 };
    ck_proto_start(&w, CK_MSG_STAGED);
    ck_put_str(&w, sv->d.name);
    ck_put_u64(&w, sv->d.rank);
    int r = send_msg(cl, &w, -1, err);
    ck_wbuf_free(&w);
    return r;
}

int ck_client_save_async(ck_client_save *sv, ck_err *err)
{
    ck_client *cl = sv->cl;
    int r = building(sv, err);
    ck_plan *p = NULL;
    uint64_t blob_bytes = 0;
    if (r == 0 && !ck_decl_blob_bytes(&sv->d, &blob_bytes))
        r = ck_err_set(err, -EINVAL, "checkpoint %s: blob sizes overflow", sv->d.name);
    if (r == 0)
        r = make_plan(sv, &p, err);
    if (r < 0)
        return r;
    uint64_t image = ck_plan_file_size(p, sv->d.rank);
    /* Double buffering: wait only while both areas still drain. */
    wait_for(cl, any_slot_free, NULL);
    lock(cl);
    int k = -1;
    for (int i = 0; i < NSLOTS && k < 0; i++) {
        int j = (int)((cl->next_slot + (unsigned)i) % NSLOTS);
        if (slot_free(&cl->slots[j]))
            k = j;
    }
    if (k >= 0) {
        cl->slots[k].user = NULL;
        cl->next_slot = (unsigned)k + 1;
    }
    unlock(cl);
    if (k < 0) {
        ck_plan_free(p);
        return ck_err_set(err, -ECONNRESET, "checkpoint %s: %s", sv->d.name,
                          cl->dead ? "the connection to ckptd is broken" : "no staging area");
    }
    slot *s = &cl->slots[k];
    r = slot_fit(sv, s, image + blob_bytes, err);
    if (r == 0) {
        sv->d.staging_size = s->size;
        list_add(sv);
        r = join(sv, s, err);
    }
    if (r == 0 && sv->image_bytes != image)
        r = ck_err_set(err, -EPROTO, "checkpoint %s, rank %llu: the engine lays out %llu "
                       "bytes, this client %llu", sv->d.name, (unsigned long long)sv->d.rank,
                       (unsigned long long)sv->image_bytes, (unsigned long long)image);
    if (r == 0)
        r = copy_in(sv, p, s->map, image, err);
    ck_plan_free(p);
    if (r == 0) {
        lock(cl);
        s->user = sv;
        sv->slot = k;
        unlock(cl);
        r = stage(sv, s, err);
    }
    if (r < 0) {
        lock(cl);
        set_state(sv, CK_CLIENT_FAILED, r, ck_err_msg(err));
        unlock(cl);
    }
    return r;
}

int ck_client_commit(ck_client_save *sv, ck_err *err)
{
    if (sv->d.rank != 0)
        return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu asked for the commit; only "
                          "rank 0 does", sv->d.name, (unsigned long long)sv->d.rank);
    if (sv->state == CK_CLIENT_BUILDING)
        return ck_err_set(err, -EINVAL, "checkpoint %s: commit before save_async", sv->d.name);
    if (sv->state == CK_CLIENT_FAILED)     /* as the embedded engine answers */
        return ck_err_set(err, sv->code, "%s", sv->msg);
    ck_client *cl = sv->cl;
    if (cl->hub)
        return ck_saver_commit(cl->hub->sv, sv->d.name, err);
    ck_wbuf w = { 0 };
    ck_proto_start(&w, CK_MSG_COMMIT);
    ck_put_str(&w, sv->d.name);
    int r = send_msg(cl, &w, -1, err);
    ck_wbuf_free(&w);
    return r;
}

int ck_client_poll(ck_client_save *sv, ck_client_state *state, ck_err *err)
{
    ck_client *cl = sv->cl;
    if (!cl->hub)
        pump(cl, false);
    lock(cl);
    *state = sv->state;
    int r = sv->state == CK_CLIENT_FAILED ? ck_err_set(err, sv->code, "%s", sv->msg) : 0;
    unlock(cl);
    return r;
}

int ck_client_wait(ck_client_save *sv, ck_err *err)
{
    if (sv->state == CK_CLIENT_BUILDING)
        return ck_err_set(err, -EINVAL, "checkpoint %s: wait before save_async", sv->d.name);
    wait_for(sv->cl, save_done, sv);
    ck_client_state st;
    return ck_client_poll(sv, &st, err);
}

void ck_client_save_free(ck_client_save *sv)
{
    if (!sv)
        return;
    ck_client *cl = sv->cl;
    wait_for(cl, part_done, sv);
    lock(cl);
    if (sv->slot >= 0 && cl->slots[sv->slot].user == sv)
        cl->slots[sv->slot].user = NULL;
    if (sv->listed)
        for (ck_client_save **pp = list_of(cl); *pp; pp = &(*pp)->next)
            if (*pp == sv) {
                *pp = sv->next;
                break;
            }
    unlock(cl);
    for (uint32_t b = 0; b < sv->d.nblobs; b++)
        free(sv->blob_data[b]);
    free(sv->blob_data);
    free(sv->src);
    ck_decl_free(&sv->d);
    free(sv);
}

int ck_client_load(ck_client *cl, const char *name, const char *tensor, const ck_mesh *mesh,
                   const ck_placement *pl, uint64_t rank, void *dst, size_t dst_len,
                   ck_err *err)
{
    ck_ckpt *ck;
    int r = ck_open(cl->root, name, &ck, err);
    if (r < 0)
        return r;
    ck_reader *rd;
    r = ck_reader_open(ck, tensor, &rd, err);
    if (r == 0) {
        const ck_tensor *t = ck_reader_tensor(rd);
        r = ck_layout_check(t->name, t->ndim, t->shape, ck_dtype_size(t->dtype), mesh, pl, err);
        if (r == 0 && rank >= ck_mesh_world(mesh))
            r = ck_err_set(err, -EINVAL, "tensor %s: rank %llu is outside the target mesh",
                           t->name, (unsigned long long)rank);
        if (r == 0) {
            uint32_t coord[CK_MAX_MESH_DIMS];
            ck_box box;
            ck_mesh_coord(mesh, rank, coord);
            ck_shard_box(t->ndim, t->shape, mesh, pl, coord, &box);
            uint64_t need = ck_box_numel(&box) * ck_dtype_size(t->dtype);
            if (need != dst_len)
                r = ck_err_set(err, -EINVAL, "checkpoint %s, tensor %s: rank %llu's part on "
                               "the target mesh is %llu bytes, the buffer %zu", name, t->name,
                               (unsigned long long)rank, (unsigned long long)need, dst_len);
        }
        if (r == 0)
            r = ck_reader_read_shard(rd, mesh, pl, rank, dst, err);
        ck_reader_close(rd);
    }
    ck_close(ck);
    return r;
}
