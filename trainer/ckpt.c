/* ckpt.c - see ckpt.h. */
#include "ckpt.h"

#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

#include "ck/catalog.h"
#include "ck/load.h"
#include "ck/safetensors.h"
#include "ck/save.h"

/* What rank 0's writer thread needs: the tensors' declarations (one per state dict
 * entry, every rank's the same), every rank's packed shards, and the blobs. */
typedef struct save_job {
    pthread_t thread;
    pthread_mutex_t mu;
    bool finished;
    const char *root;
    char name[CK_NAME_MAX];
    uint64_t step;
    ck_mesh mesh;
    int world;
    sh_shard_entry *t;         /* declarations; data pointers unused */
    int nt;
    float *all;                /* world slices of per_rank floats */
    size_t per_rank;
    tr_blob *blob;             /* owned copies */
    int nblob;
    struct timespec t0;
    tr_ckpt_done done;
} save_job;

struct tr_ckpt {
    sh_world *w;
    char root[PATH_MAX];
    int keep_last;
    save_job *job;             /* rank 0: the save in flight */
    tr_ckpt_done *report;      /* rank 0: finished saves not yet polled */
    int nreport;
};

static double since_ms(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

static void job_free(save_job *j)
{
    if (!j)
        return;
    for (int i = 0; i < j->nblob; i++)
        free((void *)j->blob[i].data);
    free(j->blob);
    free(j->t);
    free(j->all);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

static int job_write(save_job *j, ck_err *err)
{
    ck_save *s;
    ck_save_opts o = {0};
    int rc = ck_save_begin(&s, j->root, j->name, j->step, &j->mesh, &o, err);
    if (rc)
        return rc;
    for (int i = 0; !rc && i < j->nt; i++)
        rc = ck_save_tensor(s, j->t[i].name, CK_F32, j->t[i].ndim, j->t[i].shape,
                            j->t[i].placement, err);
    for (int r = 0; !rc && r < j->world; r++) {
        uint32_t coord[CK_MAX_MESH_DIMS];
        ck_mesh_coord(&j->mesh, (uint64_t)r, coord);
        const float *src = j->all + (size_t)r * j->per_rank;
        for (int i = 0; !rc && i < j->nt; i++) {
            ck_box box;
            ck_shard_box(j->t[i].ndim, j->t[i].shape, &j->mesh, j->t[i].placement, coord, &box);
            uint64_t n = ck_box_numel(&box);
            if (n && ck_save_writes(s, j->t[i].name, (uint64_t)r))
                rc = ck_save_shard(s, j->t[i].name, (uint64_t)r, src, err);
            src += n;
        }
    }
    for (int i = 0; !rc && i < j->nblob; i++)
        rc = ck_save_blob(s, j->blob[i].name, j->blob[i].data, j->blob[i].len, err);
    if (rc) {
        ck_save_abort(s);
        return rc;
    }
    ck_save_stats st;
    return ck_save_commit(s, &st, err);
}

static void *job_main(void *arg)
{
    save_job *j = arg;
    ck_err err = {0};
    int rc = job_write(j, &err);
    pthread_mutex_lock(&j->mu);
    j->done.rc = rc;
    snprintf(j->done.msg, sizeof j->done.msg, "%s", rc ? ck_err_msg(&err) : "");
    j->done.seconds = since_ms(&j->t0) / 1e3;
    j->finished = true;
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

int tr_ckpt_new(sh_world *w, const tr_ckpt_opts *o, tr_ckpt **out, ck_err *err)
{
    *out = NULL;
    if (o->daemon)
        return ck_err_set(err, -ENOTSUP, "--daemon %s: this build saves through the "
                          "embedded engine only", o->daemon);
    tr_ckpt *c = calloc(1, sizeof *c);
    if (!c)
        return ck_err_set(err, -ENOMEM, "checkpoints: out of memory");
    c->w = w;
    c->keep_last = o->keep_last;
    snprintf(c->root, sizeof c->root, "%s", o->root);
    if (sh_world_rank(w) == 0 && mkdir(c->root, 0755) && errno != EEXIST) {
        int e = errno;
        free(c);
        return ck_err_set(err, -e, "checkpoint root %s: %s", o->root, strerror(e));
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

/* Rank 0: waits for the save in flight, queues its report, and prunes after a
 * commit. */
static int retire_job(tr_ckpt *c, ck_err *err)
{
    save_job *j = c->job;
    if (!j)
        return 0;
    pthread_join(j->thread, NULL);
    c->job = NULL;
    tr_ckpt_done *r = realloc(c->report, sizeof *r * (size_t)(c->nreport + 1));
    int rc = r ? 0 : ck_err_set(err, -ENOMEM, "checkpoint: out of memory");
    if (r) {
        c->report = r;
        r[c->nreport++] = j->done;
    }
    if (!rc && j->done.rc == 0 && c->keep_last > 0)
        rc = prune(c, err);
    job_free(j);
    return rc;
}

int tr_ckpt_wait(tr_ckpt *c, ck_err *err)
{
    return retire_job(c, err);
}

int tr_ckpt_poll(tr_ckpt *c, tr_ckpt_done *done, ck_err *err)
{
    if (c->job) {
        pthread_mutex_lock(&c->job->mu);
        bool fin = c->job->finished;
        pthread_mutex_unlock(&c->job->mu);
        int rc = fin ? retire_job(c, err) : 0;
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
    retire_job(c, NULL);
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

/* Rank 0's job for a save: declarations from its own state dicts (every rank's
 * differ only in boxes and data), room for every rank's packed shards, blob copies. */
static int make_job(tr_ckpt *c, uint64_t step, const sh_state_dict *const *sd, int nsd,
                    const tr_blob *blobs, int nblobs, size_t per_rank, save_job **out,
                    ck_err *err)
{
    *out = NULL;
    save_job *j = calloc(1, sizeof *j);
    if (!j)
        return ck_err_set(err, -ENOMEM, "checkpoint: out of memory");
    pthread_mutex_init(&j->mu, NULL);
    j->root = c->root;
    j->step = step;
    snprintf(j->name, sizeof j->name, "step-%08llu", (unsigned long long)step);
    snprintf(j->done.name, sizeof j->done.name, "%s", j->name);
    j->world = sh_world_size(c->w);
    j->per_rank = per_rank;
    size_t nt = 0;
    for (int k = 0; k < nsd; k++)
        nt += sd[k]->n;
    j->t = calloc(nt + 1, sizeof *j->t);
    j->all = malloc(sizeof(float) * (per_rank * (size_t)j->world + 1));
    j->blob = calloc((size_t)nblobs + 1, sizeof *j->blob);
    int rc = j->t && j->all && j->blob ? 0 :
        ck_err_set(err, -ENOMEM, "checkpoint %s: out of memory on rank 0", j->name);
    for (int k = 0; !rc && k < nsd; k++)
        for (size_t i = 0; !rc && i < sd[k]->n; i++) {
            const sh_shard_entry *e = &sd[k]->entry[i];
            if (e->dtype != CK_F32)
                rc = ck_err_set(err, -EINVAL, "checkpoint: tensor '%s' is %s, only f32 "
                                "state is saved", e->name, ck_dtype_name(e->dtype));
            j->t[j->nt++] = *e;
            j->mesh = e->mesh;
            ck_box full;
            ck_box_full(e->ndim, e->shape, &full);
            j->done.bytes += ck_box_numel(&full) * sizeof(float);
        }
    for (int i = 0; !rc && i < nblobs; i++) {
        void *copy = malloc(blobs[i].len + 1);
        if (!copy)
            rc = ck_err_set(err, -ENOMEM, "checkpoint: out of memory for blob %s",
                            blobs[i].name);
        else
            memcpy(copy, blobs[i].data, blobs[i].len);
        j->blob[j->nblob++] = (tr_blob){blobs[i].name, copy, blobs[i].len};
    }
    if (rc) {
        job_free(j);
        return rc;
    }
    *out = j;
    return 0;
}

int tr_ckpt_save_async(tr_ckpt *c, uint64_t step, const sh_state_dict *const *sd, int nsd,
                       const tr_blob *blobs, int nblobs, double *stall_ms, ck_err *err)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bool root = sh_world_rank(c->w) == 0;
    sh_comm *wc = sh_world_comm(c->w);
    /* One save in flight: the next waits for it (rank 0 holds the others in the
     * collectives below meanwhile). */
    int rc = root ? retire_job(c, err) : 0;
    /* The copy out of the training buffers: after it, training may change them. */
    size_t mine = local_floats(sd, nsd);
    float *pack = malloc(sizeof(float) * (mine + 1));
    if (!rc && !pack)
        rc = ck_err_set(err, -ENOMEM, "checkpoint: out of memory for the staging copy");
    size_t off = 0;
    for (int k = 0; !rc && k < nsd; k++)
        for (size_t i = 0; i < sd[k]->n; i++) {
            size_t n = ck_box_numel(&sd[k]->entry[i].box);
            if (n)
                memcpy(pack + off, sd[k]->entry[i].data, n * sizeof(float));
            off += n;
        }
    save_job *j = NULL;
    int64_t most = (int64_t)mine;
    if (!rc)
        rc = sh_all_reduce(wc, &most, &most, 1, CK_I64, SH_MAX, NULL, err);
    if (!rc && root)
        rc = make_job(c, step, sd, nsd, blobs, nblobs, (size_t)most, &j, err);
    /* Agree before the gather, so that no rank waits in it for a rank that failed. */
    int bad = rc ? 1 : 0;
    int rc2 = sh_all_reduce(wc, &bad, &bad, 1, CK_I32, SH_MAX, NULL, err);
    if (!rc && (rc2 || bad))
        rc = rc2 ? rc2 : ck_err_set(err, -EIO, "checkpoint step %llu: another rank failed",
                                    (unsigned long long)step);
    if (!rc) {
        float *send = mine < (size_t)most ? realloc(pack, sizeof(float) * (size_t)most) : pack;
        if (send) {
            pack = send;
            rc = sh_gather(wc, pack, j ? j->all : NULL, (size_t)most, CK_F32, 0, NULL, err);
        } else {
            rc = ck_err_set(err, -ENOMEM, "checkpoint: out of memory for the staging copy");
        }
    }
    free(pack);
    if (!rc && root) {
        j->t0 = t0;
        if (pthread_create(&j->thread, NULL, job_main, j))
            rc = ck_err_set(err, -EAGAIN, "checkpoint %s: cannot start the writer thread",
                            j->name);
        else
            c->job = j;
    }
    if (rc && j && c->job != j)
        job_free(j);
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
