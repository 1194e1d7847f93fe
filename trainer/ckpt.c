/* ckpt.c - see ckpt.h. */
#include "ckpt.h"

#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "ck/catalog.h"
#include "ck/client.h"
#include "ck/load.h"
#include "ck/save.h"
#include "export/safetensors.h"

/* Connected, every rank has one client and stages its own part in ckptd's shared
 * memory. Embedded, every rank runs its own writer: it copies its shards into its
 * data file's image, a thread writes and fsyncs that file into the save's shared
 * pending directory, and at a later step boundary the ranks send their block hashes
 * to rank 0 (a small gather), whose thread commits. */
typedef enum emb_phase { EMB_IDLE, EMB_WRITING, EMB_COMMITTING } emb_phase;

struct tr_ckpt {
    sh_world *w;
    char root[PATH_MAX];
    int keep_last;
    bool connected;
    ck_client **cl;
    ck_client_save **sv;       /* per client: the save in flight, NULL when none */
    int ncl;
    char name[CK_NAME_MAX];    /* the save in flight */
    uint64_t bytes;
    struct timespec t0;
    tr_ckpt_done *report;      /* rank 0: finished saves not yet polled */
    int nreport;
    /* Embedded: */
    char token[16];            /* names the shared pending directories of this job */
    ck_save *save;
    uint8_t *image;            /* this rank's data file, as written */
    size_t image_cap;
    emb_phase phase;
    pthread_t th;
    atomic_bool th_done;
    int th_rc;
    ck_err th_err;
};

static double since_ms(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

int tr_ckpt_new(sh_world *w, const tr_ckpt_opts *o, tr_ckpt **out, ck_err *err)
{
    *out = NULL;
    tr_ckpt *c = calloc(1, sizeof *c);
    if (!c)
        return ck_err_set(err, -ENOMEM, "checkpoints: out of memory");
    c->w = w;
    c->keep_last = o->keep_last;
    snprintf(c->root, sizeof c->root, "%s", o->root);
    const char *env = getenv("CKPTD_SOCKET");
    c->connected = o->daemon || (env && *env);
    int rank = sh_world_rank(w), rc = 0;
    if (rank == 0 && mkdir(c->root, 0755) && errno != EEXIST)
        rc = ck_err_set(err, -errno, "checkpoint root %s: %s", o->root, strerror(errno));
    c->ncl = c->connected ? 1 : 0;
    if (!c->connected) {
        /* One token for the job, drawn by rank 0: every rank's part of a save goes to
         * ROOT/.pending/NAME.TOKEN. */
        uint32_t tok[2] = { 0, 0 };
        if (rank == 0) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            tok[0] = (uint32_t)ts.tv_nsec ^ (uint32_t)getpid() << 8;
            tok[1] = (uint32_t)ts.tv_sec;
        }
        if (!rc)
            rc = sh_broadcast(sh_world_comm(w), tok, 2, CK_I32, 0, NULL, err);
        snprintf(c->token, sizeof c->token, "%08x%04x", tok[0], tok[1] & 0xffff);
    }
    c->cl = calloc((size_t)c->ncl + 1, sizeof *c->cl);
    c->sv = calloc((size_t)c->ncl + 1, sizeof *c->sv);
    if (!rc && (!c->cl || !c->sv))
        rc = ck_err_set(err, -ENOMEM, "checkpoints: out of memory");
    for (int k = 0; !rc && k < c->ncl; k++) {
        ck_client_opts co = {.socket = o->daemon, .embedded = !c->connected,
                             .peer = k ? c->cl[0] : NULL};
        rc = ck_client_open(&c->cl[k], c->root, &co, err);
    }
    if (rc) {
        tr_ckpt_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path) ? -errno : 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Removes the oldest "step-*" checkpoints beyond keep_last. Each leaves the catalog
 * first, then moves under .pending/ before its files go, so a crash half-way leaves
 * what recovery removes anyway, never a half-deleted checkpoint in sight. */
static int prune(tr_ckpt *c, ck_err *err)
{
    ck_scan sc;
    int rc = ck_root_scan(c->root, &sc, err);
    if (rc)
        return rc;
    char **mine = calloc(sc.n_committed + 1, sizeof *mine);
    size_t n = 0;
    for (size_t i = 0; mine && i < sc.n_committed; i++)
        if (strncmp(sc.committed[i], "step-", 5) == 0)
            mine[n++] = sc.committed[i];
    qsort(mine, n, sizeof *mine, cmp_names);
    char pend[PATH_MAX], from[PATH_MAX], to[PATH_MAX];
    snprintf(pend, sizeof pend, "%s/%s", c->root, CK_PENDING);
    for (size_t i = 0; !rc && n > (size_t)c->keep_last && i < n - (size_t)c->keep_last; i++) {
        snprintf(from, sizeof from, "%s/%s", c->root, mine[i]);
        snprintf(to, sizeof to, "%s/%s.removed", pend, mine[i]);
        rc = ck_catalog_del(c->root, mine[i], err);
        if (!rc && mkdir(pend, 0755) && errno != EEXIST)
            rc = ck_err_set(err, -errno, "%s: %s", pend, strerror(errno));
        if (!rc && rename(from, to))
            rc = ck_err_set(err, -errno, "removing %s: %s", from, strerror(errno));
        if (!rc && nftw(to, rm_entry, 8, FTW_DEPTH | FTW_PHYS))
            rc = ck_err_set(err, -EIO, "removing %s: %s", to, strerror(errno));
    }
    free(mine);
    ck_scan_free(&sc);
    return rc;
}

/* Rank 0: queues the report of the save in flight, and prunes after a commit. */
static int report(tr_ckpt *c, int code, const ck_err *why, ck_err *err)
{
    tr_ckpt_done d = {.rc = code, .bytes = c->bytes, .seconds = since_ms(&c->t0) / 1e3};
    snprintf(d.name, sizeof d.name, "%s", c->name);
    snprintf(d.msg, sizeof d.msg, "%s", code ? ck_err_msg(why) : "");
    tr_ckpt_done *r = realloc(c->report, sizeof *r * (size_t)(c->nreport + 1));
    if (!r)
        return ck_err_set(err, -ENOMEM, "checkpoint: out of memory");
    c->report = r;
    r[c->nreport++] = d;
    return !code && c->keep_last > 0 ? prune(c, err) : 0;
}

/* Connected: waits for the save in flight; rank 0 reports it. */
static int retire(tr_ckpt *c, ck_err *err)
{
    if (!c->name[0])
        return 0;
    int rc = 0;
    if (sh_world_rank(c->w) == 0 && c->ncl) {
        ck_err why = {0};
        int code = ck_client_wait(c->sv[0], &why);
        rc = report(c, code, &why, err);
    }
    for (int k = 0; k < c->ncl; k++) {
        ck_client_save_free(c->sv[k]);
        c->sv[k] = NULL;
    }
    c->name[0] = '\0';
    return rc;
}

/* ---- embedded: every rank writes its own part ---- */

static void *write_part(void *arg)
{
    tr_ckpt *c = arg;
    c->th_rc = ck_save_write_rank(c->save, (uint64_t)sh_world_rank(c->w), &c->th_err);
    atomic_store(&c->th_done, true);
    return NULL;
}

static void *commit_all(void *arg)
{
    tr_ckpt *c = arg;
    c->th_rc = ck_save_commit(c->save, NULL, &c->th_err);
    c->save = NULL;   /* commit frees it, in every case */
    atomic_store(&c->th_done, true);
    return NULL;
}

static int start(tr_ckpt *c, void *(*fn)(void *), emb_phase phase, ck_err *err)
{
    atomic_store(&c->th_done, false);
    ck_err_clear(&c->th_err);
    int e = pthread_create(&c->th, NULL, fn, c);
    if (e)
        return ck_err_set(err, -e, "checkpoint %s: starting a writer thread: %s", c->name,
                          strerror(e));
    c->phase = phase;
    return 0;
}

/* Every rank's part is durable: rank 0 collects the hashes (the proof) and commits on
 * its thread; the others let go of their save. A failed part fails the save. */
static int exchange(tr_ckpt *c, ck_err *err)
{
    int W = sh_world_size(c->w), rank = sh_world_rank(c->w);
    ck_save *s = c->save;
    /* Each rank's hash bytes are known to all from the plan: the gather's record is
     * a status word and the largest of them. */
    size_t most = 0;
    for (int r = 0; r < W; r++)
        most = ck_save_hash_bytes(s, (uint64_t)r) > most ? ck_save_hash_bytes(s, (uint64_t)r)
                                                          : most;
    size_t rec = 8 + most;
    uint8_t *mine = calloc(1, rec), *all = rank == 0 ? calloc((size_t)W, rec) : NULL;
    if (!mine || (rank == 0 && !all)) {
        free(mine);
        free(all);
        return ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory", c->name);
    }
    const uint8_t *h = NULL;
    size_t hlen = 0;
    int64_t status = c->th_rc;
    if (!status && ck_save_rank_hashes(s, (uint64_t)rank, &h, &hlen) < 0)
        status = -EIO;
    memcpy(mine, &status, 8);
    if (hlen)
        memcpy(mine + 8, h, hlen);
    /* rec is a multiple of 8 (hashes are 32 bytes): sent as 32-bit words. */
    int rc = sh_gather(sh_world_comm(c->w), mine, all, rec / 4, CK_I32, 0, NULL, err);
    int code = 0;
    ck_err why = {0};
    if (!rc && rank == 0) {
        for (int r = 0; r < W && !code; r++) {
            int64_t st;
            memcpy(&st, all + (size_t)r * rec, 8);
            if (st) {
                code = (int)st;
                ck_err_set(&why, code, "rank %d could not write its part%s%s", r,
                           r == 0 ? ": " : "", r == 0 ? ck_err_msg(&c->th_err) : "");
                break;
            }
            code = ck_save_adopt_rank(s, (uint64_t)r, all + (size_t)r * rec + 8,
                                      ck_save_hash_bytes(s, (uint64_t)r), &why);
        }
    }
    free(mine);
    free(all);
    if (rc)
        return rc;
    if (rank != 0) {
        ck_save_detach(s);
        c->save = NULL;
        c->phase = EMB_IDLE;
        c->name[0] = '\0';
        return 0;
    }
    if (code) {
        ck_save_abort(s);
        c->save = NULL;
        c->phase = EMB_IDLE;
        rc = report(c, code, &why, err);
        c->name[0] = '\0';
        return rc;
    }
    return start(c, commit_all, EMB_COMMITTING, err);
}

/* Collective: moves the save in flight on. With block set, it returns only when
 * there is none. Ranks agree on the step at which they exchange hashes by an
 * all-reduce of "my part is not yet durable". */
static int advance(tr_ckpt *c, bool block, ck_err *err)
{
    int rank = sh_world_rank(c->w), rc = 0;
    if (c->phase == EMB_WRITING) {
        if (block)
            pthread_join(c->th, NULL);
        int32_t busy = atomic_load(&c->th_done) ? 0 : 1;
        if ((rc = sh_all_reduce(sh_world_comm(c->w), &busy, &busy, 1, CK_I32, SH_MAX, NULL, err)))
            return rc;
        if (busy)
            return 0;
        if (!block)
            pthread_join(c->th, NULL);
        if ((rc = exchange(c, err)))
            return rc;
    }
    if (c->phase == EMB_COMMITTING && rank == 0 && (block || atomic_load(&c->th_done))) {
        pthread_join(c->th, NULL);
        c->phase = EMB_IDLE;
        rc = report(c, c->th_rc, &c->th_err, err);
        c->name[0] = '\0';
    }
    return rc;
}

/* Lays out this rank's data file image from the plan and copies its shards in: the
 * stall of an embedded save. */
static int stage_own(tr_ckpt *c, uint64_t step, const sh_state_dict *const *sd, int nsd,
                     const tr_blob *blobs, int nblobs, ck_err *err)
{
    const ck_mesh *mesh = &sd[0]->entry[0].mesh;
    uint64_t rank = (uint64_t)sh_world_rank(c->w);
    ck_save *s;
    int rc = ck_save_begin(&s, c->root, c->name, step, mesh, NULL, err);
    if (rc)
        return rc;
    for (int d = 0; !rc && d < nsd; d++)
        for (size_t i = 0; !rc && i < sd[d]->n; i++) {
            const sh_shard_entry *e = &sd[d]->entry[i];
            rc = ck_save_tensor(s, e->name, e->dtype, e->ndim, e->shape, e->placement, err);
            if (!rc && ck_box_numel(&e->box))
                rc = ck_save_shard(s, e->name, rank, e->data, err);
        }
    for (int b = 0; !rc && rank == 0 && b < nblobs; b++)
        rc = ck_save_blob(s, blobs[b].name, blobs[b].data, blobs[b].len, err);
    if (!rc)
        rc = ck_save_prepare_shared(s, c->token, err);
    size_t size = rc ? 0 : (size_t)ck_save_rank_bytes(s, rank);
    if (!rc && size > c->image_cap) {
        free(c->image);
        c->image = NULL;
        c->image_cap = 0;
        if (posix_memalign((void **)&c->image, 4096, size))
            rc = ck_err_set(err, -ENOMEM, "checkpoint %s: no memory for a %zu-byte staging "
                            "image", c->name, size);
        else
            c->image_cap = size;
    }
    if (!rc)
        rc = ck_save_copy_rank(s, rank, c->image, err);
    c->save = s;
    if (!rc)
        rc = start(c, write_part, EMB_WRITING, err);
    return rc;
}

int tr_ckpt_wait(tr_ckpt *c, ck_err *err)
{
    return c->connected ? retire(c, err) : advance(c, true, err);
}

int tr_ckpt_progress(tr_ckpt *c, ck_err *err)
{
    return c->connected ? 0 : advance(c, false, err);
}

int tr_ckpt_poll(tr_ckpt *c, tr_ckpt_done *done, ck_err *err)
{
    if (c->connected && c->name[0] && sh_world_rank(c->w) == 0 && c->ncl) {
        ck_client_state st;
        ck_err why = {0};
        ck_client_poll(c->sv[0], &st, &why);
        int rc = st == CK_CLIENT_COMMITTED || st == CK_CLIENT_FAILED ? retire(c, err) : 0;
        if (rc)
            return rc;
    }
    if (!c->nreport)
        return 0;
    *done = c->report[0];
    memmove(c->report, c->report + 1, sizeof *c->report * (size_t)--c->nreport);
    return 1;
}

void tr_ckpt_free(tr_ckpt *c)
{
    if (!c)
        return;
    if (c->sv && c->connected)
        retire(c, NULL);
    if (c->phase != EMB_IDLE) {
        /* Only on an error path, so no collective: let go, recovery removes the rest. */
        pthread_join(c->th, NULL);
        if (c->phase == EMB_WRITING)
            ck_save_detach(c->save);
    }
    free(c->image);
    for (int k = c->ncl - 1; c->cl && k >= 0; k--)
        ck_client_close(c->cl[k]);
    free(c->cl);
    free(c->sv);
    free(c->report);
    free(c);
}

/* Connected: declares this rank's part, offers its shards and, on rank 0, the blobs;
 * then save_async copies them into ckptd's staging. */
static int stage_part(tr_ckpt *c, uint64_t rank, uint64_t step, const sh_state_dict *const *sd,
                      int nsd, const tr_blob *blobs, int nblobs, ck_err *err)
{
    const ck_mesh *mesh = &sd[0]->entry[0].mesh;
    uint32_t coord[CK_MAX_MESH_DIMS];
    ck_mesh_coord(mesh, rank, coord);
    ck_client_save *sv;
    int rc = ck_client_begin(c->cl[0], &sv, c->name, step, mesh, rank, ck_mesh_world(mesh),
                             err);
    if (rc)
        return rc;
    c->sv[0] = sv;
    for (int d = 0; !rc && d < nsd; d++)
        for (size_t i = 0; !rc && i < sd[d]->n; i++) {
            const sh_shard_entry *e = &sd[d]->entry[i];
            if (e->dtype != CK_F32)
                return ck_err_set(err, -EINVAL, "checkpoint: tensor '%s' is %s, only f32 "
                                  "state is saved", e->name, ck_dtype_name(e->dtype));
            rc = ck_client_tensor(sv, e->name, e->dtype, e->ndim, e->shape, e->placement, err);
        }
    for (int d = 0; !rc && d < nsd; d++)
        for (size_t i = 0; !rc && i < sd[d]->n; i++) {
            const sh_shard_entry *e = &sd[d]->entry[i];
            ck_box box;
            ck_shard_box(e->ndim, e->shape, mesh, e->placement, coord, &box);
            if (ck_box_numel(&box))
                rc = ck_client_shard(sv, e->name, e->data, err);
        }
    for (int b = 0; !rc && rank == 0 && b < nblobs; b++)
        rc = ck_client_blob(sv, blobs[b].name, blobs[b].data, blobs[b].len, err);
    if (!rc)
        rc = ck_client_save_async(sv, err);
    return rc;
}

int tr_ckpt_save_async(tr_ckpt *c, uint64_t step, const sh_state_dict *const *sd, int nsd,
                       const tr_blob *blobs, int nblobs, double *stall_ms, ck_err *err)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (nsd < 1 || sd[0]->n < 1)
        return ck_err_set(err, -EINVAL, "checkpoint: nothing to save");
    /* One save in flight: the next one waits for it. */
    int rc = c->connected ? retire(c, err) : advance(c, true, err);
    snprintf(c->name, sizeof c->name, "step-%08llu", (unsigned long long)step);
    c->t0 = t0;
    c->bytes = 0;
    for (int d = 0; d < nsd; d++)
        for (size_t i = 0; i < sd[d]->n; i++) {
            ck_box full;
            ck_box_full(sd[d]->entry[i].ndim, sd[d]->entry[i].shape, &full);
            c->bytes += ck_box_numel(&full) * sizeof(float);
        }
    if (!rc && c->connected)
        rc = stage_part(c, (uint64_t)sh_world_rank(c->w), step, sd, nsd, blobs, nblobs, err);
    else if (!rc)
        rc = stage_own(c, step, sd, nsd, blobs, nblobs, err);
    /* Every rank learns whether all parts were handed over, so that none trains on
     * believing in a save that cannot commit. */
    int bad = rc ? 1 : 0;
    int rc2 = sh_all_reduce(sh_world_comm(c->w), &bad, &bad, 1, CK_I32, SH_MAX, NULL, err);
    if (!rc && (rc2 || bad))
        rc = rc2 ? rc2 : ck_err_set(err, -EIO, "checkpoint %s: another rank failed to stage "
                                    "its part", c->name);
    if (!rc && c->connected && sh_world_rank(c->w) == 0)
        rc = ck_client_commit(c->sv[0], err);
    if (rc) {
        /* Nothing to wait for: drop this rank's part of the failed save. */
        for (int k = 0; k < c->ncl; k++) {
            ck_client_save_free(c->sv[k]);
            c->sv[k] = NULL;
        }
        if (c->phase == EMB_WRITING)
            pthread_join(c->th, NULL);
        if (c->save)
            ck_save_detach(c->save);   /* the writer's files: recovery removes them */
        c->save = NULL;
        c->phase = EMB_IDLE;
        c->name[0] = '\0';
    }
    *stall_ms = since_ms(&t0);
    return rc;
}

int tr_ckpt_latest(sh_world *w, const char *root, char name[CK_NAME_MAX], ck_err *err)
{
    /* Rank 0 alone looks, so that a save committing meanwhile (ckptd finishing a dead
     * run's last checkpoint) cannot make ranks disagree. */
    int32_t msg[1 + CK_NAME_MAX / 4] = {-ENOENT};
    char *best = (char *)&msg[1];
    if (sh_world_rank(w) == 0) {
        ck_scan sc;
        ck_err e2 = {0};
        uint64_t top = 0;
        if (ck_root_scan(root, &sc, &e2) == 0) {
            for (size_t i = 0; i < sc.n_committed; i++) {
                ck_ckpt *ck;
                if (ck_open(root, sc.committed[i], &ck, &e2))
                    continue;       /* unreadable: not a candidate for resuming */
                uint64_t step = ck_get_info(ck)->step;
                if (msg[0] || step > top) {
                    msg[0] = 0;
                    top = step;
                    snprintf(best, CK_NAME_MAX, "%s", sc.committed[i]);
                }
                ck_close(ck);
            }
            ck_scan_free(&sc);
        }
    }
    int rc = sh_broadcast(sh_world_comm(w), msg, sizeof msg / 4, CK_I32, 0, NULL, err);
    if (rc)
        return rc;
    if (msg[0])
        return ck_err_set(err, msg[0], "no committed checkpoint under %s", root);
    snprintf(name, CK_NAME_MAX, "%s", best);
    return 0;
}

int tr_ckpt_load_state_dict(ck_ckpt *ck, const sh_state_dict *sd, ck_err *err)
{
    for (size_t i = 0; i < sd->n; i++) {
        const sh_shard_entry *e = &sd->entry[i];
        ck_reader *rd;
        int rc = ck_reader_open(ck, e->name, &rd, err);
        if (rc)
            return ck_err_set(err, rc, "checkpoint %s", ck_get_info(ck)->name);
        const ck_tensor *t = ck_reader_tensor(rd);
        bool same = t->dtype == e->dtype && t->ndim == e->ndim;
        for (int d = 0; same && d < t->ndim; d++)
            same = t->shape[d] == e->shape[d];
        uint64_t n = ck_box_numel(&e->box);
        if (!same)
            rc = ck_err_set(err, -EINVAL, "checkpoint %s: tensor '%s' has another dtype or "
                            "shape than the model's (a different configuration?)",
                            ck_get_info(ck)->name, e->name);
        else if (n)
            rc = ck_reader_read(rd, &e->box, 0, n * ck_dtype_size(e->dtype), e->data, err);
        ck_reader_close(rd);
        if (rc)
            return rc;
    }
    return 0;
}

int tr_load_safetensors(const char *path, const sh_state_dict *sd, ck_err *err)
{
    ck_st_file f;
    int rc = ck_st_open(path, &f, err);
    if (rc)
        return rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        rc = ck_err_set(err, -errno, "%s: %s", path, strerror(errno));
    for (size_t i = 0; !rc && i < sd->n; i++) {
        const sh_shard_entry *e = &sd->entry[i];
        const ck_st_tensor *t = NULL;
        for (size_t k = 0; k < f.n && !t; k++)
            if (strcmp(f.t[k].name, e->name) == 0)
                t = &f.t[k];
        bool same = t && t->dtype == e->dtype && t->ndim == e->ndim;
        for (int d = 0; same && d < t->ndim; d++)
            same = t->shape[d] == e->shape[d];
        if (!same) {
            rc = ck_err_set(err, t ? -EINVAL : -ENOENT, "%s: tensor '%s' %s", path, e->name,
                            t ? "has another dtype or shape than the model's" : "is missing");
            break;
        }
        size_t n = ck_box_numel(&e->box), row = ck_dtype_size(e->dtype);
        for (int d = 1; d < e->ndim; d++)
            row *= e->shape[d];
        off_t at = (off_t)(f.data_start + t->begin + e->box.off[0] * row);
        ssize_t got = n ? pread(fd, e->data, n * ck_dtype_size(e->dtype), at) : 0;
        if (got != (ssize_t)(n * ck_dtype_size(e->dtype)))
            rc = ck_err_set(err, -EIO, "%s: short read of tensor '%s'", path, e->name);
    }
    if (fd >= 0)
        close(fd);
    ck_st_free(&f);
    return rc;
}
