/* client.c - async saves from training ranks (see ck/client.h).
 *
 * What every transport shares (async/client_int.h): building a save, the staging
 * slots and the copy into them, the order of the steps, and the states, which only
 * move forward. The transport (cl->t) carries each step to the engine and brings its
 * news back.
 */
#include "ck/client.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "async/client_int.h"
#include "model/plan.h"

static void lock(ck_client *cl)
{
    cl->t->lock(cl);
}

static void unlock(ck_client *cl)
{
    cl->t->unlock(cl);
}

/* ---- open / close ---- */

/* The daemons of a connected job: opts, else $CKPTD_NODES, else one. */
static int nodes_of(const ck_client_opts *o, uint32_t *out, ck_err *err)
{
    const char *env = getenv("CKPTD_NODES");
    unsigned long v = o->nodes ? o->nodes : 1;
    if (!o->nodes && env && *env) {
        char *end;
        errno = 0;
        v = strtoul(env, &end, 10);
        if (errno || *end || env[0] == '-' || v < 1 || v > CK_PROTO_MAX_NODES)
            return ck_err_set(err, -EINVAL, "CKPTD_NODES=%s: not a daemon count in 1..%u", env,
                              CK_PROTO_MAX_NODES);
    }
    if (v > CK_PROTO_MAX_NODES)
        return ck_err_set(err, -EINVAL, "%lu daemons: at most %u", v, CK_PROTO_MAX_NODES);
    *out = (uint32_t)v;
    return 0;
}

/* A time limit: opts' if set, else the environment's, else the default. */
static int limit_of(double opt, const char *env_name, double dflt, double *out, ck_err *err)
{
    const char *env = getenv(env_name);
    *out = opt > 0 ? opt : dflt;
    if (opt < 0 || opt > CK_CLIENT_MAX_WAIT)
        return ck_err_set(err, -EINVAL, "a time limit of %g s for ckptd (at most %d s)", opt,
                          CK_CLIENT_MAX_WAIT);
    if (opt > 0 || !env || !*env)
        return 0;
    char *end;
    errno = 0;
    double v = strtod(env, &end);
    if (errno || *end || !(v > 0) || v > CK_CLIENT_MAX_WAIT)
        return ck_err_set(err, -EINVAL, "%s=%s: not a number of seconds in (0, %d]", env_name,
                          env, CK_CLIENT_MAX_WAIT);
    *out = v;
    return 0;
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
    for (int i = 0; i < CK_CLIENT_SLOTS; i++)
        cl->slots[i].fd = -1;
    cl->small_pages = o.small_pages;
    cl->log = o.log;
    cl->log_arg = o.log_arg;
    cl->staging_mapped = o.staging_mapped;
    cl->staging_unmapping = o.staging_unmapping;
    cl->staging_arg = o.staging_arg;
    int r = 0;
    if (sock && ((r = nodes_of(&o, &cl->nodes, err)) < 0 ||
                 (r = limit_of(o.timeout_s, "CKPTD_TIMEOUT", 10, &cl->timeout, err)) < 0 ||
                 (r = limit_of(o.commit_timeout_s, "CKPTD_COMMIT_TIMEOUT", 600,
                               &cl->commit_timeout, err)) < 0)) {
        free(cl);
        return r;
    }
    if (!sock) {
        /* Embedded: the processes whose engines share the job's saves; no environment
         * variable, since $CKPTD_NODES counts daemons. */
        cl->nodes = o.peer ? o.peer->nodes : o.nodes ? o.nodes : 1;
        if (cl->nodes > CK_PROTO_MAX_NODES) {
            free(cl);
            return ck_err_set(err, -EINVAL, "%u engines: at most %u", o.nodes,
                              CK_PROTO_MAX_NODES);
        }
    }
    r = sock ? ck__client_open_connected(cl, sock, root, err)
             : ck__client_open_embedded(cl, root, &o, err);
    if (r < 0) {
        ck_client_close(cl);
        return r;
    }
    *out = cl;
    return 0;
}

bool ck_client_connected(const ck_client *cl)
{
    return cl->t->connected;
}

const char *ck_client_root(const ck_client *cl)
{
    return cl->root;
}

/* ---- staging slots, made ahead ---- */

static void say(ck_client *cl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void say(ck_client *cl, const char *fmt, ...)
{
    if (!cl->log)
        return;
    char msg[CK_ERR_MSG_MAX + 128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cl->log(cl->log_arg, msg);
}

/* Gives s a staging memfd of at least need bytes, every page faulted in; the first
 * one made says once which pages it got. */
static int slot_map(ck_client *cl, ck__client_slot *s, uint64_t need, ck_err *err)
{
    if (s->map && s->size >= need)
        return 0;
    ck__client_slot_release(cl, s);
    ck__staging m = CK_STAGING_NONE;
    int r = ck__staging_map(&m, need, CK_STAGING_MEMFD |
                            (cl->small_pages ? CK_STAGING_SMALL_PAGES : 0u), err);
    if (r < 0)
        return r;
    s->fd = m.fd;
    s->map = m.map;
    s->size = m.size;
    s->pages = m.pages;
    s->hooked = cl->staging_mapped && cl->staging_unmapping &&
                cl->staging_mapped(cl->staging_arg, s->map, s->size) == 0;
    if (!cl->pages_logged) {
        cl->pages_logged = true;
        say(cl, "checkpoint staging on %s%s", ck__staging_pages_name(m.pages),
            m.pages != CK_PAGES_SMALL ? "" : cl->small_pages ? " (as asked)"
            : " (no hugetlb pool, and transparent huge pages are off for shared memory)");
    }
    return 0;
}

static void *reserve_main(void *arg)
{
    ck_client *cl = arg;
    for (int i = 0; i < CK_CLIENT_SLOTS; i++) {
        ck_err err = { 0 };
        if ((cl->reserve_mask & (1u << i)) &&
            slot_map(cl, &cl->slots[i], cl->reserve_bytes, &err) < 0) {
            say(cl, "checkpoint staging made ahead: %s (the next save makes it itself)",
                ck_err_msg(&err));
            break;
        }
    }
    return NULL;
}

static void reserve_join(ck_client *cl)
{
    if (cl->reserving)
        pthread_join(cl->reserver, NULL);
    cl->reserving = false;
}

static bool slot_free(const ck__client_slot *s);

/* Maps, on the reserver thread, every slot that no save holds and that is smaller
 * than bytes. Nothing else touches those slots until reserve_join: a save joins it
 * before it picks a slot. */
static void reserve_start(ck_client *cl, uint64_t bytes)
{
    reserve_join(cl);
    unsigned mask = 0;
    lock(cl);
    for (int i = 0; i < CK_CLIENT_SLOTS; i++)
        if (slot_free(&cl->slots[i]) && (!cl->slots[i].map || cl->slots[i].size < bytes))
            mask |= 1u << i;
    unlock(cl);
    if (!mask)
        return;
    cl->reserve_mask = mask;
    cl->reserve_bytes = bytes;
    cl->reserving = pthread_create(&cl->reserver, NULL, reserve_main, cl) == 0;
    if (!cl->reserving)
        say(cl, "checkpoint staging made ahead: no thread (the next save makes it itself)");
}

/* Makes the client its caller's alone again: the lazy save's copy (fenced), the
 * reserver (joined). */
static void settle(ck_client *cl)
{
    ck_client_save *sv = cl->lazy;
    if (sv) {
        pthread_join(sv->copier, NULL);
        sv->copying = false;
        cl->lazy = NULL;
    }
    reserve_join(cl);
}

void ck_client_reserve(ck_client *cl, uint64_t bytes, bool wait)
{
    settle(cl);
    reserve_start(cl, bytes);
    if (wait)
        reserve_join(cl);
}

static bool all_slots_free(ck_client *cl, const void *arg);

void ck_client_close(ck_client *cl)
{
    if (!cl)
        return;
    settle(cl);
    /* The engine writes from the staging areas in place: unmap them only once every
     * part this client staged is durable (or failed). A client whose transport never
     * opened staged nothing. */
    if (cl->t)
        ck__client_wait_for(cl, all_slots_free, NULL, cl->commit_timeout,
                            "every part it staged to be durable");
    for (int i = 0; i < CK_CLIENT_SLOTS; i++)
        ck__client_slot_release(cl, &cl->slots[i]);
    if (cl->t)
        cl->t->close(cl);
    free(cl);
}

/* ---- building a save ---- */

int ck_job_id_new(ck_job_id *out, ck_err *err)
{
    /* From the kernel's pool: two jobs that start at once on one host (the race this
     * id is for) must not draw the same id, which a clock and a pid could give. */
    for (;;) {
        ssize_t n = getrandom(out->bytes, sizeof out->bytes, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n != (ssize_t)sizeof out->bytes)
            return ck_err_set(err, n < 0 ? -errno : -EIO, "making a job id: getrandom: %s",
                              n < 0 ? strerror(errno) : "short read");
        if (ck__job_set(out))       /* all zero is no id: draw again */
            return 0;
    }
}

int ck_client_begin(ck_client *cl, ck_client_save **out, const char *name, uint64_t step,
                    const ck_mesh *mesh, uint64_t rank, uint64_t world, const ck_job_id *job,
                    ck_err *err)
{
    int r = ck_name_check("checkpoint", name, err);
    if (r < 0)
        return r;
    if (!job || !ck__job_set(job))
        return ck_err_set(err, -EINVAL, "checkpoint %s, rank %llu: no job id (make one with "
                          "ck_job_id_new on one rank and give it to every rank of the job)",
                          name, (unsigned long long)rank);
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
    sv->d.nodes = cl->nodes;
    sv->d.job = *job;
    *out = sv;
    return 0;
}

void ck_client_no_hash(ck_client_save *sv)
{
    sv->d.no_hash = true;
}

static int building(const ck_client_save *sv, ck_err *err)
{
    if (sv->state == CK_CLIENT_FAILED)
        return ck_err_set(err, sv->code, "%s", sv->msg);
    if (sv->state != CK_CLIENT_BUILDING)
        return ck_err_set(err, -EINVAL, "checkpoint %s, rank %llu: save_async was called "
                          "already", sv->d.name, (unsigned long long)sv->d.rank);
    return 0;
}

/* Declarations change the layout: none once the part is placed. */
static int declaring(const ck_client_save *sv, ck_err *err)
{
    int r = building(sv, err);
    if (r == 0 && sv->plan)
        r = ck_err_set(err, -EINVAL, "checkpoint %s, rank %llu: declared after "
                       "ck_client_save_place", sv->d.name, (unsigned long long)sv->d.rank);
    return r;
}

/* Room for one more tensor; the new declaration, zeroed, in *out. */
static int add_tensor(ck_client_save *sv, const char *name, ck_dtype dtype, int ndim,
                      const uint64_t *shape, ck__decl_tensor **out, ck_err *err)
{
    int r = declaring(sv, err);
    if (r == 0)
        r = ck_key_check("tensor", name, err);
    if (r < 0)
        return r;
    if (ndim < 0 || ndim > CK_MAX_NDIM || !ck_dtype_size(dtype))
        return ck_err_set(err, -EINVAL, "tensor %s: bad dtype %d or %d dims", name, (int)dtype,
                          ndim);
    if (sv->d.ntensors >= CK_PROTO_MAX_TENSORS)
        return ck_err_set(err, -E2BIG, "tensor %s: more than %u tensors", name,
                          CK_PROTO_MAX_TENSORS);
    if (sv->d.ntensors == sv->cap_t) {
        uint32_t cap = sv->cap_t ? sv->cap_t * 2 : 64;
        ck__decl_tensor *t = realloc(sv->d.tensors, cap * sizeof *t);
        if (t)
            sv->d.tensors = t;
        ck__shard_src *s = t ? realloc(sv->src, cap * sizeof *s) : NULL;
        if (s)
            sv->src = s;
        ck__shard_src **b = s ? realloc(sv->box_src, cap * sizeof *b) : NULL;
        if (!b)
            return ck_err_set(err, -ENOMEM, "tensor %s: out of memory", name);
        sv->box_src = b;
        sv->cap_t = cap;
    }
    ck__decl_tensor *t = &sv->d.tensors[sv->d.ntensors];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = (uint8_t)dtype;
    t->ndim = (uint8_t)ndim;
    if (ndim)           /* a 0-D tensor's shape may be NULL */
        memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    sv->src[sv->d.ntensors] = (ck__shard_src){ 0 };
    sv->box_src[sv->d.ntensors] = NULL;
    *out = t;
    return 0;
}

int ck_client_tensor(ck_client_save *sv, const char *name, ck_dtype dtype, int ndim,
                     const uint64_t *shape, const ck_placement *pl, ck_err *err)
{
    ck__decl_tensor *t;
    int r = add_tensor(sv, name, dtype, ndim, shape, &t, err);
    if (r < 0)
        return r;
    memcpy(t->pl, pl, (size_t)sv->d.mesh.ndim * sizeof *pl);
    sv->d.ntensors++;
    return 0;
}

int ck_client_tensor_boxes(ck_client_save *sv, const char *name, ck_dtype dtype, int ndim,
                           const uint64_t *shape, uint32_t nboxes, const ck_box *boxes,
                           const uint64_t *writers, ck_err *err)
{
    ck__decl_tensor *t;
    int r = add_tensor(sv, name, dtype, ndim, shape, &t, err);
    if (r < 0)
        return r;
    /* The engine checks the tiling again; checking here names the caller's mistake in
     * the caller's process, before anything is sent. */
    if ((r = ck_boxes_check(name, ndim, shape, nboxes, boxes, err)) < 0)
        return r;
    uint64_t total = nboxes;
    for (uint32_t k = 0; k < sv->d.ntensors; k++)
        total += sv->d.tensors[k].nboxes;
    if (total > CK_PROTO_MAX_BOXES)
        return ck_err_set(err, -E2BIG, "tensor %s: more than %u boxes in one save", name,
                          CK_PROTO_MAX_BOXES);
    for (uint32_t i = 0; i < nboxes; i++)
        if (writers[i] >= sv->d.world)
            return ck_err_set(err, -EINVAL, "tensor %s: box %u is written by rank %llu, outside "
                              "the world of %llu", name, i, (unsigned long long)writers[i],
                              (unsigned long long)sv->d.world);
    for (int d = 0; d < CK_MAX_MESH_DIMS; d++)
        t->pl[d] = (ck_placement){ .kind = CK_BOXES };
    ck__decl_tensor src = *t;
    src.nboxes = nboxes;
    src.boxes = (ck_box *)boxes;
    src.writers = (uint64_t *)writers;
    ck__shard_src *bs = calloc(nboxes ? nboxes : 1, sizeof *bs);
    if (!bs || ck__decl_tensor_copy(t, &src) < 0) {
        free(bs);
        return ck_err_set(err, -ENOMEM, "tensor %s: out of memory for %u boxes", name, nboxes);
    }
    sv->box_src[sv->d.ntensors++] = bs;
    return 0;
}

static int find(ck_client_save *sv, const char *tensor, uint32_t *idx, ck_err *err)
{
    int r = building(sv, err);
    if (r < 0)
        return r;
    for (uint32_t i = 0; i < sv->d.ntensors; i++)
        if (!strcmp(sv->d.tensors[i].name, tensor)) {
            *idx = i;
            return 0;
        }
    return ck_err_set(err, -ENOENT, "checkpoint %s: no tensor %s was declared", sv->d.name,
                      tensor);
}

static int set_src(ck_client_save *sv, const char *tensor, ck__shard_src src, ck_err *err)
{
    uint32_t i = 0;
    int r = find(sv, tensor, &i, err);
    if (r == 0 && sv->box_src[i])
        r = ck_err_set(err, -EINVAL, "tensor %s is a box list: give its boxes "
                       "(ck_client_box)", tensor);
    if (r == 0)
        sv->src[i] = src;
    return r;
}

static int set_box(ck_client_save *sv, const char *tensor, uint32_t box, ck__shard_src src,
                   ck_err *err)
{
    uint32_t i = 0;
    int r = find(sv, tensor, &i, err);
    if (r < 0)
        return r;
    const ck__decl_tensor *t = &sv->d.tensors[i];
    if (!sv->box_src[i])
        return ck_err_set(err, -EINVAL, "tensor %s has placements, not a box list: give its "
                          "shard (ck_client_shard)", tensor);
    if (box >= t->nboxes)
        return ck_err_set(err, -EINVAL, "tensor %s: box %u does not exist (it has %u)", tensor,
                          box, t->nboxes);
    if (t->writers[box] != sv->d.rank)
        return ck_err_set(err, -EINVAL, "tensor %s: box %u is rank %llu's to write, not rank "
                          "%llu's", tensor, box, (unsigned long long)t->writers[box],
                          (unsigned long long)sv->d.rank);
    sv->box_src[i][box] = src;
    return 0;
}

int ck_client_box(ck_client_save *sv, const char *tensor, uint32_t box, const void *data,
                  ck_err *err)
{
    return set_box(sv, tensor, box, (ck__shard_src){ .mem = data }, err);
}

int ck_client_box_fill(ck_client_save *sv, const char *tensor, uint32_t box, ck_fill_fn fill,
                       void *arg, ck_err *err)
{
    return set_box(sv, tensor, box, (ck__shard_src){ .fill = fill, .arg = arg }, err);
}

int ck_client_shard(ck_client_save *sv, const char *tensor, const void *data, ck_err *err)
{
    return set_src(sv, tensor, (ck__shard_src){ .mem = data }, err);
}

int ck_client_shard_fill(ck_client_save *sv, const char *tensor, ck_fill_fn fill, void *arg,
                         ck_err *err)
{
    return set_src(sv, tensor, (ck__shard_src){ .fill = fill, .arg = arg }, err);
}

int ck_client_blob(ck_client_save *sv, const char *name, const void *data, size_t len,
                   ck_err *err)
{
    int r = declaring(sv, err);
    if (r == 0)
        r = ck_key_check("blob", name, err);
    if (r < 0)
        return r;
    if (len > CK_BLOB_MAX)
        return ck_err_set(err, -EFBIG, "blob %s: %zu bytes (at most %u)", name, len, CK_BLOB_MAX);
    if (sv->d.nblobs >= CK_PROTO_MAX_BLOBS)
        return ck_err_set(err, -E2BIG, "blob %s: more than %u blobs", name, CK_PROTO_MAX_BLOBS);
    if (sv->d.nblobs == sv->cap_b) {
        uint32_t cap = sv->cap_b ? sv->cap_b * 2 : 8;
        ck__decl_blob *b = realloc(sv->d.blobs, cap * sizeof *b);
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
    ck__decl_blob *b = &sv->d.blobs[sv->d.nblobs];
    memset(b, 0, sizeof *b);
    snprintf(b->name, sizeof b->name, "%s", name);
    b->len = len;
    sv->blob_data[sv->d.nblobs++] = copy;
    return 0;
}

/* ---- save_async ---- */

static bool slot_free(const ck__client_slot *s)
{
    return !s->lost && (!s->user || s->user->state >= CK_CLIENT_DURABLE);
}

static bool any_slot_free(ck_client *cl, const void *arg)
{
    (void)arg;
    for (int i = 0; i < CK_CLIENT_SLOTS; i++)
        if (slot_free(&cl->slots[i]))
            return true;
    return false;
}

/* A lost slot is never free, and never waited for either. */
static bool all_slots_free(ck_client *cl, const void *arg)
{
    (void)arg;
    for (int i = 0; i < CK_CLIENT_SLOTS; i++)
        if (!cl->slots[i].lost && !slot_free(&cl->slots[i]))
            return false;
    return true;
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

/* This rank's file image from the shared plan (save/image.h), then the blobs. */
static int copy_in(ck_client_save *sv, const ck__plan *p, const ck__shard_src *src,
                   uint8_t *dst, uint64_t image, ck_err *err)
{
    uint32_t i;
    int r = ck__rank_image(p, sv->d.rank, src, dst, &i);
    if (r < 0)
        return ck_err_set(err, r, "checkpoint %s, rank %llu: filling tensor %s: %s",
                          sv->d.name, (unsigned long long)sv->d.rank,
                          sv->d.tensors[ck__plan_shard_at(p, i)->tensor].name, strerror(-r));
    for (uint32_t b = 0; b < sv->d.nblobs; b++) {
        memcpy(dst + image, sv->blob_data[b], sv->d.blobs[b].len);
        image += sv->d.blobs[b].len;
    }
    return 0;
}

/* Tensor t's sources in the plan's order, into src (one per plan shard); an error
 * names a shard or box this rank writes but was not given. */
static int plan_sources(ck_client_save *sv, const ck__plan *p, uint32_t t, ck__shard_src *src,
                        ck_err *err)
{
    const ck__decl_tensor *d = &sv->d.tensors[t];
    uint32_t first, count;
    if (!sv->box_src[t]) {
        uint32_t i = ck__plan_shard_of(p, t, sv->d.rank);
        const ck__plan_shard *ps = ck__plan_shard_at(p, i);
        src[i] = sv->src[t];
        if (ps->writer == sv->d.rank && ps->bytes && !src[i].mem && !src[i].fill &&
            !src[i].placed)
            return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu writes tensor %s but "
                              "gave no shard for it", sv->d.name, (unsigned long long)sv->d.rank,
                              d->name);
        return 0;
    }
    ck__plan_range(p, t, &first, &count);
    for (uint32_t b = 0; b < count; b++) {
        const ck__plan_shard *ps = ck__plan_shard_at(p, first + b);
        src[first + b] = sv->box_src[t][b];
        if (ps->writer == sv->d.rank && ps->bytes && !src[first + b].mem &&
            !src[first + b].fill && !src[first + b].placed)
            return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu writes box %u of tensor "
                              "%s but gave no bytes for it", sv->d.name,
                              (unsigned long long)sv->d.rank, b, d->name);
    }
    return 0;
}

/* sv's plan: the layout every rank computes alike from the declaration. */
static int make_plan(ck_client_save *sv, ck__plan **out, ck_err *err)
{
    int r = ck__plan_new(&sv->d.mesh, out);
    if (r < 0)
        return ck_err_set(err, r, "checkpoint %s: out of memory", sv->d.name);
    for (uint32_t t = 0; t < sv->d.ntensors && r == 0; t++) {
        const ck__decl_tensor *d = &sv->d.tensors[t];
        uint32_t first, count;
        size_t is = ck_dtype_size(d->dtype);
        r = sv->box_src[t] ? ck__plan_add_boxes(*out, d->name, d->ndim, d->shape, is, d->nboxes,
                                                d->boxes, d->writers, &first, &count, err)
                           : ck__plan_add(*out, d->name, d->ndim, d->shape, is, d->pl, &first,
                                          &count, err);
    }
    if (r < 0) {
        ck__plan_free(*out);
        *out = NULL;
    }
    return r;
}

/* The sources of every shard of sv's plan (malloc'd); every shard this rank writes must
 * have one by now. */
static int plan_all_sources(ck_client_save *sv, ck__shard_src **src, ck_err *err)
{
    uint32_t n = ck__plan_nshards(sv->plan);
    if (!(*src = calloc(n ? n : 1, sizeof **src)))
        return ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory", sv->d.name);
    int r = 0;
    for (uint32_t t = 0; t < sv->d.ntensors && r == 0; t++)
        r = plan_sources(sv, sv->plan, t, *src, err);
    if (r < 0) {
        free(*src);
        *src = NULL;
    }
    return r;
}

static void list_add(ck_client_save *sv)
{
    ck_client *cl = sv->cl;
    lock(cl);
    ck_client_save **l = cl->t->saves(cl);
    sv->next = *l;
    *l = sv;
    sv->listed = true;
    unlock(cl);
}

static int stage(ck_client_save *sv, const ck__client_slot *s, ck_err *err)
{
    ck_client *cl = sv->cl;
    lock(cl);
    ck__client_set_state(sv, CK_CLIENT_STAGED, 0, NULL);
    unlock(cl);
    return cl->t->stage(sv, s, err);
}

/* The staging bytes of this rank's part: its file image, then the blobs. */
static int part_bytes(ck_client_save *sv, ck__plan **p, uint64_t *image, uint64_t *total,
                      ck_err *err)
{
    uint64_t blob_bytes = 0;
    if (!ck__decl_blob_bytes(&sv->d, &blob_bytes))
        return ck_err_set(err, -EINVAL, "checkpoint %s: blob sizes overflow", sv->d.name);
    int r = make_plan(sv, p, err);
    if (r < 0)
        return r;
    *image = ck__plan_file_size(*p, sv->d.rank);
    *total = *image + blob_bytes;
    return 0;
}

int ck_client_save_reserve(ck_client_save *sv, bool wait, ck_err *err)
{
    ck__plan *p;
    uint64_t image, total;
    int r = building(sv, err);
    if (r == 0)
        r = part_bytes(sv, &p, &image, &total, err);
    if (r < 0)
        return r;
    ck__plan_free(p);
    ck_client_reserve(sv->cl, total, wait);
    return 0;
}

/* Picks a staging slot that no save holds (waiting while both drain) and gives it to
 * sv; -1 when none came free. */
static int take_slot(ck_client_save *sv)
{
    ck_client *cl = sv->cl;
    ck__client_wait_for(cl, any_slot_free, NULL, cl->commit_timeout,
                        "a staging area to come free (the save before the last one is "
                        "still being written)");
    lock(cl);
    int k = -1;
    for (int i = 0; i < CK_CLIENT_SLOTS && k < 0; i++) {
        int j = (int)((cl->next_slot + (unsigned)i) % CK_CLIENT_SLOTS);
        if (slot_free(&cl->slots[j]))
            k = j;
    }
    if (k >= 0) {
        cl->slots[k].user = sv;
        sv->slot = k;
        cl->next_slot = (unsigned)k + 1;
    }
    unlock(cl);
    return k;
}

/* Declares the part to the engine (s: its staging area, or NULL for a part read from
 * its sources) and checks that both lay it out alike. */
static int join_engine(ck_client_save *sv, const ck__client_slot *s, ck_err *err)
{
    list_add(sv);
    int r = sv->cl->t->join(sv, s, err);
    if (r == 0 && sv->image_bytes != sv->image)
        r = ck_err_set(err, -EPROTO, "checkpoint %s, rank %llu: the engine lays out %llu "
                       "bytes, this client %llu", sv->d.name, (unsigned long long)sv->d.rank,
                       (unsigned long long)sv->image_bytes, (unsigned long long)sv->image);
    return r;
}

/* The first half of a save: sv's layout, a staging slot large enough for it, and the
 * engine's admission, checked against our layout. */
static int admit(ck_client_save *sv, ck_err *err)
{
    ck_client *cl = sv->cl;
    int r = part_bytes(sv, &sv->plan, &sv->image, &sv->total, err);
    if (r < 0)
        return r;
    int k = take_slot(sv);
    if (k < 0)
        return ck_err_set(err, -ECONNRESET, "checkpoint %s: no staging area came free (the "
                          "engine stopped answering)", sv->d.name);
    ck__client_slot *s = &cl->slots[k];
    bool grew = !s->map || s->size < sv->total;
    /* A link given up (ckptd did not answer in time) is made again for this save. */
    if (cl->t->revive)
        r = cl->t->revive(cl, err);
    if (r == 0)
        r = slot_map(cl, s, sv->total, err);
    if (r < 0)
        return ck_err_set(err, r, "checkpoint %s, rank %llu", sv->d.name,
                          (unsigned long long)sv->d.rank);
    /* A new size: the next save's slot is made meanwhile, off the caller's thread. */
    if (grew)
        reserve_start(cl, sv->total);
    sv->d.staging_size = s->size;
    return join_engine(sv, s, err);
}

static void failed(ck_client_save *sv, int r, const ck_err *err)
{
    lock(sv->cl);
    ck__client_set_state(sv, CK_CLIENT_FAILED, r, ck_err_msg(err));
    unlock(sv->cl);
}

/* save_async's work, on the caller's thread or (save_lazy) on the copier's: the second
 * half (after admit, if place did not run it): every source into the slot, the caller's
 * own copies waited for, the part handed over. */
static int save_run(ck_client_save *sv, ck_err *err)
{
    ck_client *cl = sv->cl;
    int r = sv->plan ? 0 : admit(sv, err);
    ck__shard_src *src = NULL;
    if (r == 0)
        r = plan_all_sources(sv, &src, err);
    if (r == 0)
        r = copy_in(sv, sv->plan, src, cl->slots[sv->slot].map, sv->image, err);
    free(src);
    /* Waited for even when the part failed: until they land, the caller's copies still
     * write into a slot that failing would free. */
    if (sv->copies_wait) {
        ck_err werr = { 0 };
        int w = sv->copies_wait(sv->copies_arg, &werr);
        sv->copies_wait = NULL;
        if (r == 0 && w < 0)
            r = ck_err_set(err, w, "checkpoint %s, rank %llu: %s", sv->d.name,
                           (unsigned long long)sv->d.rank, ck_err_msg(&werr));
    }
    ck__plan_free(sv->plan);
    sv->plan = NULL;
    if (r == 0)
        r = stage(sv, &cl->slots[sv->slot], err);
    if (r < 0)
        failed(sv, r, err);
    return r;
}

int ck_client_save_place(ck_client_save *sv, ck_err *err)
{
    settle(sv->cl);
    int r = declaring(sv, err);
    if (r < 0)
        return r;
    if ((r = admit(sv, err)) < 0)
        failed(sv, r, err);
    return r;
}

/* The staging address of plan shard i, marked as the caller's to write; NULL with err
 * set when this rank does not write it. */
static void *place_at(ck_client_save *sv, uint32_t i, ck__shard_src *src, const char *tensor,
                      ck_err *err)
{
    const ck__plan_shard *ps = ck__plan_shard_at(sv->plan, i);
    if (ps->writer != sv->d.rank || !ps->bytes) {
        ck_err_set(err, -ENOENT, "checkpoint %s: rank %llu writes no bytes of this part of "
                   "tensor %s (%s)", sv->d.name, (unsigned long long)sv->d.rank, tensor,
                   ps->bytes ? "another replica writes them" : "it is empty");
        return NULL;
    }
    *src = (ck__shard_src){ .placed = true };
    return sv->cl->slots[sv->slot].map + ps->file_off;
}

static int placed(ck_client_save *sv, const char *tensor, uint32_t *t, ck_err *err)
{
    if (!sv->plan && building(sv, err) == 0)
        return ck_err_set(err, -EINVAL, "checkpoint %s: tensor %s: its place in staging is "
                          "known only after ck_client_save_place", sv->d.name, tensor);
    return find(sv, tensor, t, err);
}

void *ck_client_shard_at(ck_client_save *sv, const char *tensor, ck_err *err)
{
    uint32_t t;
    if (placed(sv, tensor, &t, err) < 0)
        return NULL;
    if (sv->box_src[t]) {
        ck_err_set(err, -EINVAL, "tensor %s is a box list: ask for its boxes "
                   "(ck_client_box_at)", tensor);
        return NULL;
    }
    return place_at(sv, ck__plan_shard_of(sv->plan, t, sv->d.rank), &sv->src[t], tensor, err);
}

void *ck_client_box_at(ck_client_save *sv, const char *tensor, uint32_t box, ck_err *err)
{
    uint32_t t, first, count;
    if (placed(sv, tensor, &t, err) < 0)
        return NULL;
    if (!sv->box_src[t]) {
        ck_err_set(err, -EINVAL, "tensor %s has placements, not a box list: ask for its "
                   "shard (ck_client_shard_at)", tensor);
        return NULL;
    }
    ck__plan_range(sv->plan, t, &first, &count);
    if (box >= count) {
        ck_err_set(err, -EINVAL, "tensor %s: box %u does not exist (it has %u)", tensor, box,
                   count);
        return NULL;
    }
    return place_at(sv, first + box, &sv->box_src[t][box], tensor, err);
}

int ck_client_save_staging(ck_client_save *sv, void **base, size_t *len, ck_err *err)
{
    int r = building(sv, err);
    if (r == 0 && !sv->plan)
        r = ck_err_set(err, -EINVAL, "checkpoint %s: no staging before ck_client_save_place",
                       sv->d.name);
    if (r < 0)
        return r;
    *base = sv->cl->slots[sv->slot].map;
    *len = (size_t)sv->total;
    return 0;
}

void ck_client_save_copies(ck_client_save *sv, int (*wait)(void *arg, ck_err *err), void *arg)
{
    sv->copies_wait = wait;
    sv->copies_arg = arg;
}

int ck_client_save_async(ck_client_save *sv, ck_err *err)
{
    settle(sv->cl);
    int r = building(sv, err);
    return r < 0 ? r : save_run(sv, err);
}

/* Whether the engine can read sv's part straight from its sources: an embedded
 * engine, and every source given by address (fills are the caller's to run, on the
 * caller's thread; placed boxes live in staging). */
static bool by_address(const ck_client_save *sv)
{
    if (!sv->cl->t->stage_sources || sv->plan)
        return false;
    for (uint32_t t = 0; t < sv->d.ntensors; t++) {
        if (!sv->box_src[t]) {
            if (sv->src[t].fill || sv->src[t].placed)
                return false;
            continue;
        }
        for (uint32_t b = 0; b < sv->d.tensors[t].nboxes; b++)
            if (sv->box_src[t][b].fill || sv->box_src[t][b].placed)
                return false;
    }
    return true;
}

/* The engine's read of a synchronous part's source: refused once the client gave the
 * part up (ck__client_direct_forsake), since the caller may have freed the memory. */
static int direct_read(void *arg, uint64_t off, void *dst, size_t len)
{
    const ck__direct_src *a = arg;
    pthread_rwlock_rdlock(&a->d->lock);
    bool gone = a->d->gone;
    if (!gone)
        memcpy(dst, a->mem + off, len);
    pthread_rwlock_unlock(&a->d->lock);
    return gone ? -ECANCELED : 0;
}

static int direct_new(ck_client_save *sv, const ck__shard_src *src, ck_err *err)
{
    uint32_t n = ck__plan_nshards(sv->plan);
    ck__client_direct *d = calloc(1, sizeof *d);
    if (d) {
        d->src = calloc(n ? n : 1, sizeof *d->src);
        d->args = calloc(n ? n : 1, sizeof *d->args);
    }
    if (!d || !d->src || !d->args || pthread_rwlock_init(&d->lock, NULL) != 0) {
        if (d) {
            free(d->src);
            free(d->args);
        }
        free(d);
        return ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory", sv->d.name);
    }
    d->n = n;
    for (uint32_t i = 0; i < n; i++) {
        if (!src[i].mem)
            continue;   /* not this rank's: the engine never reads it */
        d->args[i] = (ck__direct_src){ .d = d, .mem = src[i].mem };
        d->src[i] = (ck__shard_src){ .fill = direct_read, .arg = &d->args[i] };
    }
    sv->direct = d;
    return 0;
}

/* save_sync's hand-over without staging: the engine copies the sources itself. */
static int save_direct(ck_client_save *sv, ck_err *err)
{
    ck_client *cl = sv->cl;
    int r = part_bytes(sv, &sv->plan, &sv->image, &sv->total, err);
    ck__shard_src *src = NULL;
    uint8_t *blobs = NULL;
    if (r == 0) {
        sv->d.staging_size = sv->total;     /* what the engine checks the part against */
        r = join_engine(sv, NULL, err);
    }
    if (r == 0)
        r = plan_all_sources(sv, &src, err);
    if (r == 0)
        r = direct_new(sv, src, err);
    if (r == 0 && !(blobs = malloc(sv->total - sv->image + 1)))
        r = ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory", sv->d.name);
    if (r == 0) {
        uint64_t at = 0;
        for (uint32_t b = 0; b < sv->d.nblobs; b++) {
            memcpy(blobs + at, sv->blob_data[b], sv->d.blobs[b].len);
            at += sv->d.blobs[b].len;
        }
        lock(cl);
        ck__client_set_state(sv, CK_CLIENT_STAGED, 0, NULL);
        unlock(cl);
        r = cl->t->stage_sources(sv, blobs, err);
    }
    free(blobs);
    free(src);
    ck__plan_free(sv->plan);
    sv->plan = NULL;
    if (r < 0)
        failed(sv, r, err);
    return r;
}

int ck_client_save_sync(ck_client_save *sv, ck_err *err)
{
    ck_client *cl = sv->cl;
    settle(cl);
    int r = building(sv, err);
    if (r == 0)
        r = by_address(sv) ? save_direct(sv, err) : save_run(sv, err);
    if (r < 0)
        return r;
    ck__client_wait_for(cl, part_done, sv, cl->commit_timeout, "its part to be durable");
    ck_client_state st;
    return ck_client_poll(sv, &st, err);
}

static void *copier_main(void *arg)
{
    ck_client_save *sv = arg;
    sv->lazy_rc = save_run(sv, &sv->lazy_err);
    if (atomic_exchange(&sv->lazy_commit, CK__LAZY_DONE) == CK__LAZY_COMMIT_ASKED &&
        sv->lazy_rc == 0) {
        ck_err err = { 0 };
        int r = sv->cl->t->commit(sv, &err);
        if (r < 0)
            failed(sv, r, &err);
    }
    return NULL;
}

int ck_client_save_lazy(ck_client_save *sv, ck_err *err)
{
    ck_client *cl = sv->cl;
    settle(cl);
    int r = building(sv, err);
    if (r < 0)
        return r;
    sv->lazy_rc = 0;
    ck_err_clear(&sv->lazy_err);
    atomic_store(&sv->lazy_commit, CK__LAZY_RUNNING);
    int e = pthread_create(&sv->copier, NULL, copier_main, sv);
    if (e)
        return ck_err_set(err, -e, "checkpoint %s, rank %llu: starting the copy thread: %s",
                          sv->d.name, (unsigned long long)sv->d.rank, strerror(e));
    sv->copying = true;
    cl->lazy = sv;
    return 0;
}

int ck_client_save_fence(ck_client_save *sv, ck_err *err)
{
    ck_client *cl = sv->cl;
    bool lazy = sv->copying;
    if (cl->lazy == sv)
        settle(cl);
    if (lazy && sv->lazy_rc < 0)
        return ck_err_set(err, sv->lazy_rc, "%s", ck_err_msg(&sv->lazy_err));
    if (sv->state == CK_CLIENT_BUILDING)
        return ck_err_set(err, -EINVAL, "checkpoint %s: fence before save_lazy", sv->d.name);
    lock(cl);
    int r = sv->state == CK_CLIENT_FAILED ? ck_err_set(err, sv->code, "%s", sv->msg) : 0;
    unlock(cl);
    return r;
}

int ck_client_commit(ck_client_save *sv, ck_err *err)
{
    if (sv->d.rank != 0)
        return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu asked for the commit; only "
                          "rank 0 does", sv->d.name, (unsigned long long)sv->d.rank);
    /* A lazy save still copying: its copier asks once the part is staged. */
    int running = CK__LAZY_RUNNING;
    if (sv->cl->lazy == sv &&
        atomic_compare_exchange_strong(&sv->lazy_commit, &running, CK__LAZY_COMMIT_ASKED))
        return 0;
    settle(sv->cl);
    if (sv->state == CK_CLIENT_BUILDING)
        return ck_err_set(err, -EINVAL, "checkpoint %s: commit before save_async", sv->d.name);
    if (sv->state == CK_CLIENT_FAILED)     /* as the embedded engine answers */
        return ck_err_set(err, sv->code, "%s", sv->msg);
    return sv->cl->t->commit(sv, err);
}

int ck_client_poll(ck_client_save *sv, ck_client_state *state, ck_err *err)
{
    ck_client *cl = sv->cl;
    settle(cl);
    cl->t->poll(cl);
    lock(cl);
    *state = sv->state;
    int r = sv->state == CK_CLIENT_FAILED ? ck_err_set(err, sv->code, "%s", sv->msg) : 0;
    unlock(cl);
    return r;
}

int ck_client_wait(ck_client_save *sv, ck_err *err)
{
    settle(sv->cl);
    if (sv->state == CK_CLIENT_BUILDING)
        return ck_err_set(err, -EINVAL, "checkpoint %s: wait before save_async", sv->d.name);
    ck__client_wait_for(sv->cl, save_done, sv, sv->cl->commit_timeout, "the commit");
    ck_client_state st;
    return ck_client_poll(sv, &st, err);
}

void ck_client_save_free(ck_client_save *sv)
{
    if (!sv)
        return;
    ck_client *cl = sv->cl;
    settle(cl);
    ck__client_wait_for(cl, part_done, sv, cl->commit_timeout, "its part to be durable");
    lock(cl);
    if (sv->slot >= 0 && cl->slots[sv->slot].user == sv)
        cl->slots[sv->slot].user = NULL;
    if (sv->listed)
        for (ck_client_save **pp = cl->t->saves(cl); *pp; pp = &(*pp)->next)
            if (*pp == sv) {
                *pp = sv->next;
                break;
            }
    unlock(cl);
    ck__client_direct_free(sv->direct);
    ck__plan_free(sv->plan);
    for (uint32_t b = 0; b < sv->d.nblobs; b++)
        free(sv->blob_data[b]);
    free(sv->blob_data);
    for (uint32_t t = 0; t < sv->d.ntensors; t++)
        free(sv->box_src[t]);
    free(sv->box_src);
    free(sv->src);
    ck__decl_free(&sv->d);
    free(sv);
}
