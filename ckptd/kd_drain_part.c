/* kd_drain_part.c - one node's part of a drain: the data files of a copy in its local
 * tier, written into the durable copy that the drain's committer began (decision
 * 0197; docs/ARCHITECTURE.md, "The drain").
 *
 * The node that drains a checkpoint (its committer) makes the durable copy's pending
 * directory and its manifest, and asks each node that holds the files it lacks to
 * write them (PART, kd_peer_serve.c). The node streams its copy (ck__copy_out) into
 * that directory as a writer that joins it (ck__copy_in with opts.join): the directory
 * must hold the manifest the committer declared, every file is created there and never
 * over one that exists, and every block is checked against that manifest once it is
 * written; then the files are fsynced and the committer commits them with its own. A
 * part that fails or is given up leaves nothing of its own in the directory. So a
 * drain's bytes cross no network on their way from the node that holds them to the
 * durable tier beyond the durable tier's own, and no node needs room for another
 * node's part.
 *
 * The files go through the drain's pipe (kd_drain_pipe.c, decision 0203): read ahead
 * past the page cache, paced by the node's --drain-rate (a token bucket, also the
 * drain's own, so a part leaves the local disk to the saves as a drain does), and
 * checked on a thread of their own.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kd.h"

#include "ops/copy.h"

/* What the pipe tells a part as it goes. */
typedef struct part_go {
    const kd_dpart_opts *o;
    _Atomic uint64_t *done;
} part_go;

/* The data files' bytes: the manifest is the committer's to count. */
static void part_wrote(void *arg, size_t n)
{
    part_go *g = arg;
    atomic_fetch_add(g->done, n);
}

static bool part_given_up(void *arg)
{
    part_go *g = arg;
    return g->o->stop && g->o->stop(g->o->stop_arg);
}

int kd_drain_part(const kd_dpart_opts *o, _Atomic uint64_t *done, ck_err *err)
{
    const kd_preq *q = o->q;
    const char **names = calloc(q->n ? q->n : 1, sizeof *names);
    if (!names)
        return ck_err_set(err, -ENOMEM, "out of memory");
    for (uint32_t i = 0; i < q->n; i++)
        names[i] = q->files[i].name;
    ck__copy_out *out = NULL;
    ck__copy_in *in = NULL;
    kd_dpipe *p = NULL;
    int r = ck__copy_out_open(o->root, q->name, names, q->n, &out, err);
    free(names);
    if (r == 0 && out->info.time_ns != q->time_ns)
        r = ck_err_set(err, -ESTALE, "%s/%s is another save of %s than the drain's", o->root,
                       q->name, q->name);
    if (r == 0) {
        ck__copy_in_opts co = { .root = o->durable, .name = q->name, .source = o->id,
                                .manifest_size = out->manifest_size,
                                .manifest_sha256 = q->manifest_sha256, .files = out->files,
                                .n_files = out->n_files, .checkers = 1, .join = q->token };
        r = ck__copy_in_begin(&co, &in, err);
    }
    if (r == 0)
        r = kd_dpipe_open(in, o->bucket, &p, err);
    /* The copy's stream, an item (the manifest, then each file) at a time: each cut
     * whole, on a descriptor of its own. */
    part_go g = { .o = o, .done = done };
    uint32_t bad;
    for (ck__copy_cut k; r == 0;) {
        if ((r = ck__copy_out_cut(out, SIZE_MAX, &k, err)) < 0 || !k.len)
            break;
        char what[PATH_MAX + 2 * CK_NAME_MAX];
        snprintf(what, sizeof what, "%s/%s/%s", o->root, q->name,
                 k.item ? out->files[k.item - 1].name : CK_MANIFEST);
        kd_dpipe_file_in f = { .fd = k.fd, .direct = k.direct, .len = k.len, .what = what,
                               .tag = k.item, .wrote = k.item ? part_wrote : NULL,
                               .stop = part_given_up, .arg = &g };
        r = kd_dpipe_file(p, &f, &bad, err);
        ck__copy_cut_drop(&k);
    }
    if (r == 0)
        r = kd_dpipe_end(p, &bad, err);
    kd_dpipe_free(p);
    if (r == 0)
        r = ck__copy_in_commit(in, err);
    ck__copy_in_free(in);
    ck__copy_out_close(out);
    return r;
}

/* ---- a part on a thread of its own (the peer service's) ---- */

struct kd_dpart {
    kd_dpart_opts o;
    kd_preq q;                     /* o.q points here */
    char root[PATH_MAX], durable[PATH_MAX], id[CK_COPY_ID_MAX];
    kd_drain_bucket bucket;
    pthread_t th;
    _Atomic uint64_t done;
    _Atomic bool stop, ended;
    int r;                         /* once ended */
    ck_err err;
};

static bool part_stop(void *arg)
{
    kd_dpart *p = arg;
    return atomic_load(&p->stop);
}

static void *part_run(void *arg)
{
    kd_dpart *p = arg;
    p->r = kd_drain_part(&p->o, &p->done, &p->err);
    atomic_store(&p->ended, true);
    return NULL;
}

int kd_dpart_start(const kd_dpart_opts *o, kd_dpart **out, ck_err *err)
{
    *out = NULL;
    kd_dpart *p = calloc(1, sizeof *p);
    if (!p || !(p->q.files = malloc((o->q->n ? o->q->n : 1) * sizeof *p->q.files))) {
        free(p);
        return ck_err_set(err, -ENOMEM, "out of memory");
    }
    ck_file *files = p->q.files;
    p->q = *o->q;
    p->q.files = files;
    memcpy(files, o->q->files, o->q->n * sizeof *files);
    snprintf(p->root, sizeof p->root, "%s", o->root);
    snprintf(p->durable, sizeof p->durable, "%s", o->durable);
    snprintf(p->id, sizeof p->id, "%s", o->id);
    p->bucket = *o->bucket;
    p->o = (kd_dpart_opts){ .root = p->root, .durable = p->durable, .id = p->id, .q = &p->q,
                           .bucket = &p->bucket, .stop = part_stop, .stop_arg = p };
    int r = -pthread_create(&p->th, NULL, part_run, p);
    if (r < 0) {
        kd_preq_free(&p->q);
        free(p);
        return ck_err_set(err, r, "starting the part of %s: %s", o->q->name, strerror(-r));
    }
    *out = p;
    return 0;
}

int kd_dpart_poll(kd_dpart *p, uint64_t *done, ck_err *err)
{
    *done = atomic_load(&p->done);
    if (!atomic_load(&p->ended))
        return 0;
    if (p->r < 0)
        *err = p->err;
    return p->r < 0 ? p->r : 1;
}

void kd_dpart_free(kd_dpart *p)
{
    if (!p)
        return;
    atomic_store(&p->stop, true);
    pthread_join(p->th, NULL);
    kd_preq_free(&p->q);
    free(p);
}
