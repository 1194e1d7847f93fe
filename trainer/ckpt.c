/* ckpt.c - see ckpt.h. */
#include "ckpt.h"

#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ck/catalog.h"
#include "ck/client.h"
#include "ck/load.h"
#include "ck/safetensors.h"

/* Connected, every rank has one client and stages its own part. Embedded, rank 0
 * has one client per rank (peers sharing one engine) and stages every rank's part
 * from the gathered shards; the other ranks have none. */
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
    c->ncl = c->connected ? 1 : rank == 0 ? sh_world_size(w) : 0;
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

/* Waits for the save in flight; rank 0 queues its report and prunes after a
 * commit. */
static int retire(tr_ckpt *c, ck_err *err)
{
    if (!c->name[0])
        return 0;
    int rc = 0;
    if (sh_world_rank(c->w) == 0 && c->ncl) {
        ck_err why = {0};
        int code = ck_client_wait(c->sv[0], &why);
        tr_ckpt_done d = {.rc = code, .bytes = c->bytes, .seconds = since_ms(&c->t0) / 1e3};
        snprintf(d.name, sizeof d.name, "%s", c->name);
        snprintf(d.msg, sizeof d.msg, "%s", code ? ck_err_msg(&why) : "");
        tr_ckpt_done *r = realloc(c->report, sizeof *r * (size_t)(c->nreport + 1));
        if (!r)
            return ck_err_set(err, -ENOMEM, "checkpoint: out of memory");
        c->report = r;
        r[c->nreport++] = d;
        if (!code && c->keep_last > 0)
            rc = prune(c, err);
    }
    for (int k = 0; k < c->ncl; k++) {
        ck_client_save_free(c->sv[k]);
        c->sv[k] = NULL;
    }
    c->name[0] = '\0';
    return rc;
}

int tr_ckpt_wait(tr_ckpt *c, ck_err *err)
{
    return retire(c, err);
}

int tr_ckpt_poll(tr_ckpt *c, tr_ckpt_done *done, ck_err *err)
{
    if (c->name[0] && sh_world_rank(c->w) == 0 && c->ncl) {
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
    if (c->sv)
        retire(c, NULL);
    for (int k = c->ncl - 1; c->cl && k >= 0; k--)
        ck_client_close(c->cl[k]);
    free(c->cl);
    free(c->sv);
    free(c->report);
    free(c);
}

/* This rank's shards, in floats. */
static size_t local_floats(const sh_state_dict *const *sd, int nsd)
{
    size_t n = 0;
    for (int k = 0; k < nsd; k++)
        for (size_t i = 0; i < sd[k]->n; i++)
            n += ck_box_numel(&sd[k]->entry[i].box);
    return n;
}

/* Declares the save on client k as `rank`, offers that rank's shards (packed in
 * state dict order from src, or the entries' own data when src is NULL) and, for
 * rank 0, the blobs; then save_async copies them into staging. */
static int stage_part(tr_ckpt *c, int k, uint64_t rank, uint64_t step,
                      const sh_state_dict *const *sd, int nsd, const float *src,
                      const tr_blob *blobs, int nblobs, ck_err *err)
{
    const ck_mesh *mesh = &sd[0]->entry[0].mesh;
    uint32_t coord[CK_MAX_MESH_DIMS];
    ck_mesh_coord(mesh, rank, coord);
    ck_client_save *sv;
    int rc = ck_client_begin(c->cl[k], &sv, c->name, step, mesh, rank, ck_mesh_world(mesh),
                             err);
    if (rc)
        return rc;
    c->sv[k] = sv;
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
            uint64_t n = ck_box_numel(&box);
            if (n)
                rc = ck_client_shard(sv, e->name, src ? (const void *)src : e->data, err);
            if (src)
                src += n;
        }
    for (int b = 0; !rc && rank == 0 && b < nblobs; b++)
        rc = ck_client_blob(sv, blobs[b].name, blobs[b].data, blobs[b].len, err);
    if (!rc)
        rc = ck_client_save_async(sv, err);
    return rc;
}

/* Embedded: every rank's shards travel to rank 0 (padded to the largest part), whose
 * peer clients stage them. */
static int gather_and_stage(tr_ckpt *c, uint64_t step, const sh_state_dict *const *sd,
                            int nsd, const tr_blob *blobs, int nblobs, ck_err *err)
{
    int W = sh_world_size(c->w);
    size_t mine = local_floats(sd, nsd);
    int64_t most = (int64_t)mine;
    sh_comm *wc = sh_world_comm(c->w);
    int rc = sh_all_reduce(wc, &most, &most, 1, CK_I64, SH_MAX, NULL, err);
    if (rc)
        return rc;
    float *pack = calloc((size_t)most + 1, sizeof(float));
    float *all = c->ncl ? malloc(sizeof(float) * ((size_t)most * (size_t)W + 1)) : NULL;
    int bad = !pack || (c->ncl && !all);
    rc = sh_all_reduce(wc, &bad, &bad, 1, CK_I32, SH_MAX, NULL, err);
    if (!rc && bad)
        rc = ck_err_set(err, -ENOMEM, "checkpoint: out of memory for the staging copy");
    size_t off = 0;
    for (int d = 0; !rc && d < nsd; d++)
        for (size_t i = 0; i < sd[d]->n; i++) {
            size_t n = ck_box_numel(&sd[d]->entry[i].box);
            if (n)
                memcpy(pack + off, sd[d]->entry[i].data, n * sizeof(float));
            off += n;
        }
    if (!rc)
        rc = sh_gather(wc, pack, all, (size_t)most, CK_F32, 0, NULL, err);
    for (int r = 0; !rc && r < c->ncl; r++)
        rc = stage_part(c, r, (uint64_t)r, step, sd, nsd, all + (size_t)r * (size_t)most,
                        blobs, nblobs, err);
    free(pack);
    free(all);
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
    int rc = retire(c, err);
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
        rc = stage_part(c, 0, (uint64_t)sh_world_rank(c->w), step, sd, nsd, NULL, blobs,
                        nblobs, err);
    else if (!rc)
        rc = gather_and_stage(c, step, sd, nsd, blobs, nblobs, err);
    /* Every rank learns whether all parts were handed over, so that none trains on
     * believing in a save that cannot commit. */
    int bad = rc ? 1 : 0;
    int rc2 = sh_all_reduce(sh_world_comm(c->w), &bad, &bad, 1, CK_I32, SH_MAX, NULL, err);
    if (!rc && (rc2 || bad))
        rc = rc2 ? rc2 : ck_err_set(err, -EIO, "checkpoint %s: another rank failed to stage "
                                    "its part", c->name);
    if (!rc && sh_world_rank(c->w) == 0)
        rc = ck_client_commit(c->sv[0], err);
    if (rc) {
        /* Nothing to wait for: drop this rank's part of the failed save. */
        for (int k = 0; k < c->ncl; k++) {
            ck_client_save_free(c->sv[k]);
            c->sv[k] = NULL;
        }
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
