/* client.c - async saves from training ranks (see ck/client.h).
 *
 * What every transport shares (async/client_int.h): a part begun with its declaration,
 * its sources, the one submit and the copy into a staging slot (client_slots.c), the
 * order of the steps, and the states, which only move forward. The transport (cl->t)
 * carries each step to the engine and brings its news back.
 */
#include "ck/client.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "async/client_int.h"
#include "format/decl.h"
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

/* Makes the client its caller's alone again: the lazy save's copy (fenced), the
 * reserver (joined). */
/* A lazy submit's copier joined. */
static void settle_copier(ck_client *cl)
{
    ck_client_save *sv = cl->lazy;
    if (sv) {
        pthread_join(sv->copier, NULL);
        sv->copying = false;
        cl->lazy = NULL;
    }
}

/* The copier and the reserver joined: before a call that takes, frees or maps a slot.
 * A commit, a poll or a wait touches none: the reserver, which maps only slots that
 * were free when it started, goes on beside them (the first save asks for its commit
 * while the second slot is being made). */
static void settle(ck_client *cl)
{
    settle_copier(cl);
    ck__slots_join(cl);
}

void ck_client_reserve(ck_client *cl, uint64_t bytes, bool wait)
{
    settle(cl);
    ck__slots_reserve(cl, bytes);
    if (wait)
        ck__slots_join(cl);
}

void ck_client_close(ck_client *cl)
{
    if (!cl)
        return;
    settle(cl);
    /* The engine writes from the staging areas in place: unmap them only once every
     * part this client staged is durable (or failed). A client whose transport never
     * opened staged nothing. */
    if (cl->t)
        ck__client_wait_for(cl, ck__slots_all_free, NULL, cl->commit_timeout,
                            "every part it staged to be durable");
    for (int i = 0; i < CK_CLIENT_SLOTS; i++)
        ck__client_slot_release(cl, &cl->slots[i]);
    if (cl->t)
        cl->t->close(cl);
    free(cl);
}

/* ---- building a part ---- */

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
                    ck_decl *decl, uint64_t rank, const ck_job_id *job, ck_err *err)
{
    int r = ck_name_check("checkpoint", name, err);
    if (r < 0)
        return r;
    uint64_t world = ck_mesh_world(ck_decl_mesh(decl));
    if (!job || !ck__job_set(job))
        return ck_err_set(err, -EINVAL, "checkpoint %s, rank %llu: no job id (make one with "
                          "ck_job_id_new on one rank and give it to every rank of the job)",
                          name, (unsigned long long)rank);
    if (rank >= world)
        return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu of a mesh of %llu ranks",
                          name, (unsigned long long)rank, (unsigned long long)world);
    if ((r = ck_decl_seal(decl, err)) < 0)
        return ck_err_set(err, r, "checkpoint %s", name);
    ck_client_save *sv = calloc(1, sizeof *sv);
    uint32_t n = ck__plan_nshards(ck__decl_plan(decl));
    if (!sv || !(sv->src = calloc(n ? n : 1, sizeof *sv->src))) {
        free(sv);
        return ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory", name);
    }
    sv->cl = cl;
    sv->slot = -1;
    snprintf(sv->b.name, sizeof sv->b.name, "%s", name);
    sv->b.step = step;
    sv->b.decl = ck_decl_ref(decl);
    sv->b.rank = rank;
    sv->b.nodes = cl->nodes;
    sv->b.job = *job;
    sv->plan = ck__decl_plan(decl);
    sv->image = ck_decl_file_bytes(decl, rank);
    *out = sv;
    return 0;
}

void ck_client_no_hash(ck_client_save *sv)
{
    sv->b.no_hash = true;
}

void ck_client_level(ck_client_save *sv, ck_level level)
{
    sv->b.level = (uint8_t)level;
}

/* The engine's threads move a submitted save's state, its level and its note: every
 * read of them is under the client's lock. */
ck_level ck_client_level_reached(const ck_client_save *sv, char *why, size_t cap)
{
    lock(sv->cl);
    bool done = sv->state == CK_CLIENT_COMMITTED;
    ck_level level = done ? (ck_level)sv->reached : CK_LEVEL_DEFAULT;
    if (why && cap)
        snprintf(why, cap, "%s", done ? sv->note : "");
    unlock(sv->cl);
    return level;
}

/* 0 while the part is still being built, before its submit. sv->copying is the
 * caller's own; the slot and the state are read under the lock, since a submitted
 * save's copier takes the slot and the engine's threads move the state. */
static int building(const ck_client_save *sv, ck_err *err)
{
    int r = 0;
    lock(sv->cl);
    if (sv->state == CK_CLIENT_FAILED)
        r = ck_err_set(err, sv->code, "%s", sv->msg);
    else if (sv->copying || sv->state != CK_CLIENT_BUILDING || sv->slot >= 0)
        r = ck_err_set(err, -EINVAL, "checkpoint %s, rank %llu: it was submitted already",
                       sv->b.name, (unsigned long long)sv->b.rank);
    unlock(sv->cl);
    return r;
}

/* The index of tensor (placed, or a box list when boxes) in the declaration. */
static int find(ck_client_save *sv, const char *tensor, bool boxes, uint32_t *t, ck_err *err)
{
    int r = building(sv, err);
    if (r < 0)
        return r;
    int64_t i = ck__decl_find(sv->b.decl, tensor);
    if (i < 0)
        return ck_err_set(err, -ENOENT, "checkpoint %s: no tensor %s was declared", sv->b.name,
                          tensor);
    *t = (uint32_t)i;
    if (ck__plan_is_boxes(sv->plan, *t) != boxes)
        return ck_err_set(err, -EINVAL, boxes ? "tensor %s has placements, not a box list: give "
                          "its shard (ck_client_shard)" : "tensor %s is a box list: give its "
                          "boxes (ck_client_box)", tensor);
    return 0;
}

static int set_src(ck_client_save *sv, const char *tensor, ck__shard_src src, ck_err *err)
{
    uint32_t t;
    int r = find(sv, tensor, false, &t, err);
    if (r == 0)
        sv->src[ck__plan_shard_of(sv->plan, t, sv->b.rank)] = src;
    return r;
}

static int set_box(ck_client_save *sv, const char *tensor, uint32_t box, ck__shard_src src,
                   ck_err *err)
{
    uint32_t t, first, count;
    int r = find(sv, tensor, true, &t, err);
    if (r < 0)
        return r;
    ck__plan_range(sv->plan, t, &first, &count);
    if (box >= count)
        return ck_err_set(err, -EINVAL, "tensor %s: box %u does not exist (it has %u)", tensor,
                          box, count);
    uint64_t writer = ck__plan_shard_at(sv->plan, first + box)->writer;
    if (writer != sv->b.rank)
        return ck_err_set(err, -EINVAL, "tensor %s: box %u is rank %llu's to write, not rank "
                          "%llu's", tensor, box, (unsigned long long)writer,
                          (unsigned long long)sv->b.rank);
    sv->src[first + box] = src;
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
    int r = building(sv, err);
    if (r == 0)
        r = ck_key_check("blob", name, err);
    if (r < 0)
        return r;
    if (len > CK_BLOB_MAX)
        return ck_err_set(err, -EFBIG, "blob %s: %zu bytes (at most %u)", name, len, CK_BLOB_MAX);
    if (sv->b.nblobs >= CK_PROTO_MAX_BLOBS)
        return ck_err_set(err, -E2BIG, "blob %s: more than %u blobs", name, CK_PROTO_MAX_BLOBS);
    if (sv->b.nblobs == sv->cap_b) {
        uint32_t cap = sv->cap_b ? sv->cap_b * 2 : 8;
        ck__begin_blob *b = realloc(sv->b.blobs, cap * sizeof *b);
        if (b)
            sv->b.blobs = b;
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
    ck__begin_blob *b = &sv->b.blobs[sv->b.nblobs];
    memset(b, 0, sizeof *b);
    snprintf(b->name, sizeof b->name, "%s", name);
    b->len = len;
    sv->blob_data[sv->b.nblobs++] = copy;
    return 0;
}

/* ---- the submit ---- */

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

/* The submit's sources, one per shard the plan gives this rank, into src; then every
 * shard this rank writes must have one (a placed one needs how->place). */
static int take_sources(ck_client_save *sv, const ck_submit *how, ck_err *err)
{
    uint32_t n = ck__plan_nshards(sv->plan), k = 0;
    for (uint32_t i = 0; how->src && i < n; i++) {
        if (ck__plan_shard_at(sv->plan, i)->writer != sv->b.rank)
            continue;
        if (k == how->nsrc)
            break;
        const ck_source *c = &how->src[k++];
        sv->src[i] = (ck__shard_src){ .mem = c->mem, .fill = c->fill, .arg = c->arg,
                                      .placed = !c->mem && !c->fill };
    }
    if (how->src && k != how->nsrc)
        return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu gave %u sources, but writes "
                          "%u shards", sv->b.name, (unsigned long long)sv->b.rank, how->nsrc,
                          ck_decl_writes(sv->b.decl, sv->b.rank));
    for (uint32_t i = 0; i < n; i++) {
        const ck__plan_shard *ps = ck__plan_shard_at(sv->plan, i);
        const ck__shard_src *c = &sv->src[i];
        if (ps->writer != sv->b.rank || !ps->bytes || c->mem || c->fill ||
            (c->placed && how->place))
            continue;
        const ck_tensor *t = &ck__decl_tensors(sv->b.decl)[ps->tensor];
        return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu writes %s of tensor %s but "
                          "gave no %s for it", sv->b.name, (unsigned long long)sv->b.rank,
                          ck_tensor_is_boxes(t) ? "a box" : "its shard", t->name,
                          c->placed ? "place callback" : "bytes");
    }
    sv->how = *how;
    sv->how.src = NULL;
    return 0;
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

static void set_state(ck_client_save *sv, ck_client_state st, int r, const ck_err *err)
{
    ck_client *cl = sv->cl;
    lock(cl);
    ck__client_set_state(sv, st, r, err ? ck_err_msg(err) : NULL);
    unlock(cl);
}

/* Declares the part to the engine (s: its staging area, or NULL for a part read from
 * its sources) and checks that both lay it out alike. */
static int join_engine(ck_client_save *sv, const ck__client_slot *s, ck_err *err)
{
    list_add(sv);
    int r = sv->cl->t->join(sv, s, err);
    if (r == 0 && sv->image_bytes != sv->image)
        r = ck_err_set(err, -EPROTO, "checkpoint %s, rank %llu: the engine lays out %llu "
                       "bytes, this client %llu", sv->b.name, (unsigned long long)sv->b.rank,
                       (unsigned long long)sv->image_bytes, (unsigned long long)sv->image);
    return r;
}

/* The part's bytes: its file image, then its blobs. */
static int part_bytes(ck_client_save *sv, ck_err *err)
{
    uint64_t blob_bytes = 0;
    if (!ck__begin_blob_bytes(&sv->b, &blob_bytes))
        return ck_err_set(err, -EINVAL, "checkpoint %s: blob sizes overflow", sv->b.name);
    sv->total = sv->image + blob_bytes;
    return 0;
}

/* A staging slot large enough for the part, and the engine's admission. */
static int admit(ck_client_save *sv, ck_err *err)
{
    ck_client *cl = sv->cl;
    int r = part_bytes(sv, err);
    if (r < 0)
        return r;
    ck__client_wait_for(cl, ck__slots_any_free, NULL, cl->commit_timeout,
                        "a staging area to come free (the save before the last one is "
                        "still being written)");
    int k = ck__slot_take(sv);
    if (k < 0)
        return ck_err_set(err, -ECONNRESET, "checkpoint %s: no staging area came free (the "
                          "engine stopped answering)", sv->b.name);
    ck__client_slot *s = &cl->slots[k];
    sv->grew = !s->map || s->size < sv->total;
    /* A link given up (ckptd did not answer in time) is made again for this save. */
    if (cl->t->revive)
        r = cl->t->revive(cl, err);
    if (r == 0)
        r = ck__slot_map(cl, s, sv->total, err);
    if (r < 0)
        return ck_err_set(err, r, "checkpoint %s, rank %llu", sv->b.name,
                          (unsigned long long)sv->b.rank);
    sv->b.staging_size = s->size;
    return join_engine(sv, s, err);
}

/* The caller's copies into the staging area (how.place), in the order of its sources. */
static int place_all(ck_client_save *sv, uint8_t *dst, ck_err *err)
{
    uint32_t n = ck__plan_nshards(sv->plan), k = 0;
    int r = 0;
    for (uint32_t i = 0; i < n && r == 0; i++) {
        const ck__plan_shard *ps = ck__plan_shard_at(sv->plan, i);
        if (ps->writer != sv->b.rank)
            continue;
        if (sv->src[i].placed && ps->bytes)
            r = sv->how.place(sv->how.arg, k, ck__decl_tensors(sv->b.decl)[ps->tensor].name,
                              i - ck__decl_first(sv->b.decl, ps->tensor), dst + ps->file_off,
                              (size_t)ps->bytes, err);
        k++;
    }
    return r;
}

/* This rank's file image from the plan (save/image.h), then the blobs. */
static int copy_in(ck_client_save *sv, uint8_t *dst, ck_err *err)
{
    uint32_t i;
    int r = ck__rank_image(sv->plan, sv->b.rank, sv->src, dst, &i);
    if (r < 0)
        return ck_err_set(err, r, "checkpoint %s, rank %llu: filling tensor %s: %s",
                          sv->b.name, (unsigned long long)sv->b.rank,
                          ck__decl_tensors(sv->b.decl)[ck__plan_shard_at(sv->plan, i)->tensor]
                              .name, strerror(-r));
    uint64_t at = sv->image;
    for (uint32_t b = 0; b < sv->b.nblobs; b++) {
        memcpy(dst + at, sv->blob_data[b], sv->b.blobs[b].len);
        at += sv->b.blobs[b].len;
    }
    return 0;
}

static int stage(ck_client_save *sv, const ck__client_slot *s, ck_err *err)
{
    set_state(sv, CK_CLIENT_STAGED, 0, NULL);
    return sv->cl->t->stage(sv, s, err);
}

/* A submit through staging, on the caller's thread or (lazy) on the copier's: the
 * slot, the caller's copies queued, every other source copied, the caller's copies
 * waited for, the part handed over. */
static int run(ck_client_save *sv, ck_err *err)
{
    ck_client *cl = sv->cl;
    int r = admit(sv, err);
    uint8_t *dst = sv->slot >= 0 ? cl->slots[sv->slot].map : NULL;
    if (r == 0 && sv->how.place)
        r = place_all(sv, dst, err);
    if (r == 0)
        r = copy_in(sv, dst, err);
    /* Waited for even when the part failed: until they land, the caller's copies still
     * write into a slot that failing would free. */
    if (sv->how.copies_done) {
        ck_err werr = { 0 };
        int w = sv->how.copies_done(sv->how.arg, &werr);
        if (r == 0 && w < 0)
            r = ck_err_set(err, w, "checkpoint %s, rank %llu: %s", sv->b.name,
                           (unsigned long long)sv->b.rank, ck_err_msg(&werr));
    }
    if (r == 0)
        r = stage(sv, &cl->slots[sv->slot], err);
    /* A new size: the next save's slot is made on a thread, once this part is handed
     * over (not beside its copy, which it would slow down). */
    if (r == 0 && sv->grew)
        ck__slots_reserve(cl, sv->total);
    if (r < 0)
        set_state(sv, CK_CLIENT_FAILED, r, err);
    return r;
}

/* Whether the engine can read sv's part straight from its sources: an embedded
 * engine, and every source given by address (fills are the caller's to run, on the
 * caller's thread; placed ones live in staging). */
static bool by_address(const ck_client_save *sv)
{
    if (!sv->cl->t->stage_sources)
        return false;
    for (uint32_t i = 0; i < ck__plan_nshards(sv->plan); i++) {
        const ck__plan_shard *ps = ck__plan_shard_at(sv->plan, i);
        if (ps->writer == sv->b.rank && ps->bytes && !sv->src[i].mem)
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

static int direct_new(ck_client_save *sv, ck_err *err)
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
        return ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory", sv->b.name);
    }
    d->n = n;
    for (uint32_t i = 0; i < n; i++) {
        if (ck__plan_shard_at(sv->plan, i)->writer != sv->b.rank || !sv->src[i].mem)
            continue;   /* not this rank's: the engine never reads it */
        d->args[i] = (ck__direct_src){ .d = d, .mem = sv->src[i].mem };
        d->src[i] = (ck__shard_src){ .fill = direct_read, .arg = &d->args[i] };
    }
    sv->direct = d;
    return 0;
}

/* A synchronous hand-over without staging: the engine copies the sources itself. */
static int run_direct(ck_client_save *sv, ck_err *err)
{
    ck_client *cl = sv->cl;
    uint8_t *blobs = NULL;
    int r = part_bytes(sv, err);
    if (r == 0) {
        sv->b.staging_size = sv->total;     /* what the engine checks the part against */
        r = join_engine(sv, NULL, err);
    }
    if (r == 0)
        r = direct_new(sv, err);
    if (r == 0 && !(blobs = malloc(sv->total - sv->image + 1)))
        r = ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory", sv->b.name);
    if (r == 0) {
        uint64_t at = 0;
        for (uint32_t b = 0; b < sv->b.nblobs; b++) {
            memcpy(blobs + at, sv->blob_data[b], sv->b.blobs[b].len);
            at += sv->b.blobs[b].len;
        }
        set_state(sv, CK_CLIENT_STAGED, 0, NULL);
        r = cl->t->stage_sources(sv, blobs, err);
    }
    free(blobs);
    if (r < 0)
        set_state(sv, CK_CLIENT_FAILED, r, err);
    return r;
}

static void *copier_main(void *arg)
{
    ck_client_save *sv = arg;
    sv->lazy_rc = run(sv, &sv->lazy_err);
    if (atomic_exchange(&sv->lazy_commit, CK__LAZY_DONE) == CK__LAZY_COMMIT_ASKED &&
        sv->lazy_rc == 0) {
        ck_err err = { 0 };
        int r = sv->cl->t->commit(sv, &err);
        if (r < 0)
            set_state(sv, CK_CLIENT_FAILED, r, &err);
    }
    return NULL;
}

int ck_client_submit(ck_client_save *sv, const ck_submit *how, ck_err *err)
{
    ck_client *cl = sv->cl;
    settle(cl);
    int r = building(sv, err);
    if (r == 0)
        r = take_sources(sv, how, err);
    if (r < 0)
        return r;
    if (how->mode == CK_SUBMIT_COPY)
        return run(sv, err);
    if (how->mode == CK_SUBMIT_SYNC) {
        r = by_address(sv) ? run_direct(sv, err) : run(sv, err);
        return r < 0 ? r : ck_client_wait(sv, CK_CLIENT_DURABLE, err);
    }
    sv->lazy_rc = 0;
    ck_err_clear(&sv->lazy_err);
    atomic_store(&sv->lazy_commit, CK__LAZY_RUNNING);
    int e = pthread_create(&sv->copier, NULL, copier_main, sv);
    if (e)
        return ck_err_set(err, -e, "checkpoint %s, rank %llu: starting the copy thread: %s",
                          sv->b.name, (unsigned long long)sv->b.rank, strerror(e));
    sv->copying = true;
    cl->lazy = sv;
    return 0;
}

int ck_client_commit(ck_client_save *sv, ck_err *err)
{
    if (sv->b.rank != 0)
        return ck_err_set(err, -EINVAL, "checkpoint %s: rank %llu asked for the commit; only "
                          "rank 0 does", sv->b.name, (unsigned long long)sv->b.rank);
    /* A lazy save still copying: its copier asks once the part is staged. */
    int running = CK__LAZY_RUNNING;
    if (sv->cl->lazy == sv &&
        atomic_compare_exchange_strong(&sv->lazy_commit, &running, CK__LAZY_COMMIT_ASKED))
        return 0;
    settle_copier(sv->cl);
    /* The engine's threads move the state once the part is submitted: read under the
     * lock. */
    int r = 0;
    lock(sv->cl);
    if (sv->state == CK_CLIENT_BUILDING)
        r = ck_err_set(err, -EINVAL, "checkpoint %s: commit before the submit", sv->b.name);
    else if (sv->state == CK_CLIENT_FAILED)     /* as the embedded engine answers */
        r = ck_err_set(err, sv->code, "%s", sv->msg);
    unlock(sv->cl);
    return r < 0 ? r : sv->cl->t->commit(sv, err);
}

int ck_client_poll(ck_client_save *sv, ck_client_state *state, ck_err *err)
{
    ck_client *cl = sv->cl;
    settle_copier(cl);
    cl->t->poll(cl);
    lock(cl);
    *state = sv->state;
    int r = sv->state == CK_CLIENT_FAILED ? ck_err_set(err, sv->code, "%s", sv->msg) : 0;
    unlock(cl);
    return r;
}

int ck_client_wait(ck_client_save *sv, ck_client_state state, ck_err *err)
{
    ck_client *cl = sv->cl;
    bool lazy = sv->copying;
    settle_copier(cl);
    if (lazy && sv->lazy_rc < 0)
        return ck_err_set(err, sv->lazy_rc, "%s", ck_err_msg(&sv->lazy_err));
    lock(cl);
    bool unsubmitted = sv->state == CK_CLIENT_BUILDING;    /* the engine's threads move it */
    unlock(cl);
    if (unsubmitted)
        return ck_err_set(err, -EINVAL, "checkpoint %s: a wait before the submit", sv->b.name);
    if (state >= CK_CLIENT_COMMITTED)
        ck__client_wait_for(cl, save_done, sv, cl->commit_timeout, "the commit");
    else if (state == CK_CLIENT_DURABLE)
        ck__client_wait_for(cl, part_done, sv, cl->commit_timeout, "its part to be durable");
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
    for (uint32_t b = 0; b < sv->b.nblobs; b++)
        free(sv->blob_data[b]);
    free(sv->blob_data);
    free(sv->src);
    ck__begin_free(&sv->b);
    free(sv);
}
