/* kd_drain_copy.c - one drain: a checkpoint whose parts lie in the nodes' local tiers
 * made a complete copy in the durable root (docs/ARCHITECTURE.md, "The drain";
 * decisions 0178, 0197, 0198, 0199).
 *
 * Every way, the durable copy is made by ck__copy_in (ops/copy.h) on the durable root:
 * the commit protocol of every copy, so the durable checkpoint is made by the same
 * pending directory, save lock, fsyncs, structure check and one rename as any other,
 * and nothing of a drain that fails or whose daemon dies is visible there; every block
 * is checked against the manifest's SHA-256 once it is written: this daemon's stream and
 * each part go through a drain pipe (kd_drain_pipe.c, decision 0203), which reads ahead
 * past the page cache and checks on a thread of its own.
 *
 * In parts first (decision 0197): this daemon, the committer, streams the manifest and
 * the data files its own tier holds (its partial copy, the replicas it keeps), and each
 * live peer that holds others writes them into the same pending directory (PART,
 * kd_drain_part.c on the peer), the node whose own part a file is first. A part that
 * fails fails the attempt; its files go to another live holder in a new attempt, into
 * which the files written whole are carried (decisions 0198, 0199). Otherwise (no live
 * holder left for a file, a failure any writer would meet) the daemon drains alone
 * (decision 0178): each data file from the nearest copy that holds it (kd_tiers.c),
 * fetched from a live peer (GET, checked on arrival, under LOCAL/.fetched/N) where its
 * tier lacks it, the manifest and the files streamed in the manifest's order. There a
 * local copy whose byte flipped on disk fails its block, and that file is fetched from
 * a peer's copy instead (once), the drain started over; a file no copy can give fails
 * the drain, naming it. Reads of local copies and what is fetched are paced by a token
 * bucket at the drain's rate, on each node, so the drain leaves the local disks to the
 * saves.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kd.h"

#include "ck/ckpt.h"
#include "format/layout.h"
#include "io/rootfs.h"
#include "ops/copy.h"

/* What a drain reads: the manifest's copy, and for each data file the copy it is read
 * from. */
typedef struct dsrc {
    char mdir[PATH_MAX];           /* the copy whose manifest is streamed */
    uint64_t msize;
    uint64_t time, step;
    ck_file *files;                /* every data file of the checkpoint, in its order */
    uint32_t n;
    char (*dir)[PATH_MAX];         /* dir[f]: the copy data file f is read from */
    bool *refetched;               /* dir[f] is a copy fetched after dir[f] was bad */
    bool *kept;                    /* in parts: file f was written whole in the failed
                                    * attempt's directory, and is carried into the next */
    uint64_t total;                /* bytes to stream: manifest and data files */
} dsrc;

static void dsrc_free(dsrc *s)
{
    free(s->files);
    free(s->dir);
    free(s->refetched);
    free(s->kept);
}

/* A fetch from a peer is paced as the local reads are: kd_tiers_opts.progress. */
static void fetch_paced(void *arg, uint64_t done, uint64_t total)
{
    kd_drain_ctx *d = arg;
    (void)total;
    if (done > d->fetched_seen)
        kd_drain_pace(d->bucket, done - d->fetched_seen);
    d->fetched_seen = done;
}

/* Which copy each data file of the save of name at time is read from (the nearest that
 * holds it: kd_tiers_cover's order). */
static int assign(const ck__restore_dirs *dirs, dsrc *s, ck_err *err)
{
    for (uint32_t i = 0; i < dirs->n; i++) {
        ck_ckpt *ck;
        int r = ck_open_dir(dirs->dirs[i], &ck, err);
        if (r < 0)
            return r;
        for (uint32_t f = 0; f < s->n; f++)
            if (!s->dir[f][0] && ck_file_held(ck, f))
                memcpy(s->dir[f], dirs->dirs[i], PATH_MAX);
        ck_close(ck);
    }
    for (uint32_t f = 0; f < s->n; f++)
        if (!s->dir[f][0])
            return ck_err_set(err, -ENODATA, "%s: no copy on this node holds it",
                              s->files[f].name);
    return 0;
}

/* Finds the checkpoint's copies and, with fetch, makes every data file readable here
 * (fetching what no local copy holds from a live peer); without, leaves where each
 * file comes from to the drain in parts (place). 1: the durable root holds this save
 * already. */
static int sources(const kd_drain_ctx *d, dsrc *s, bool fetch, ck_err *err)
{
    const kd_tiers_opts *o = &d->o;
    ck__restore_dirs dirs = { 0 };
    ck_ckpt *ck = NULL;
    int r = kd_tiers_fetch(o, d->name, NULL, 0, &s->time, err);
    if (r == 0)
        r = kd_tiers_cover(o, d->name, s->time, NULL, 0, &dirs, err);
    if (r == 0)
        r = ck_open_dir(dirs.dirs[0], &ck, err);
    if (r < 0) {
        ck__restore_dirs_free(&dirs);
        return r;
    }
    const ck_info *in = ck_get_info(ck);
    s->step = in->step;
    s->n = in->n_files;
    snprintf(s->mdir, sizeof s->mdir, "%s", dirs.dirs[0]);
    ck__restore_dirs_free(&dirs);
    /* The durable root's own copy is no source: it is what the drain makes. */
    if (!strncmp(s->mdir, o->durable, strlen(o->durable)) &&
        s->mdir[strlen(o->durable)] == '/') {
        ck_close(ck);
        return 1;
    }
    s->files = calloc(s->n ? s->n : 1, sizeof *s->files);
    s->dir = calloc(s->n ? s->n : 1, sizeof *s->dir);
    s->refetched = calloc(s->n ? s->n : 1, sizeof *s->refetched);
    s->kept = calloc(s->n ? s->n : 1, sizeof *s->kept);
    char (*names)[CK_FILE_NAME_MAX] = calloc(s->n ? s->n : 1, sizeof *names);
    if (!s->files || !s->dir || !s->refetched || !s->kept || !names)
        r = ck_err_set(err, -ENOMEM, "out of memory");
    for (uint32_t f = 0; r == 0 && f < s->n; f++) {
        s->files[f] = *ck_file_get(ck, f);
        memcpy(names[f], s->files[f].name, sizeof names[f]);
        s->total += s->files[f].size;
    }
    ck_close(ck);
    char mpath[PATH_MAX + 16];
    struct stat st;
    if (r == 0 && ck__name_manifest(s->mdir, mpath, sizeof mpath) == 0 && stat(mpath, &st) < 0)
        r = ck_err_set(err, -errno, "%s: %s", mpath, strerror(errno));
    s->msize = r == 0 ? (uint64_t)st.st_size : 0;
    s->total += s->msize;
    uint64_t time = s->time;
    if (r < 0 || !fetch) {
        free(names);
        return r;
    }
    r = kd_tiers_fetch(o, d->name, names, s->n, &time, err);
    if (r == 0 && time != s->time)
        r = ck_err_set(err, -ESTALE, "checkpoint %s was saved again while it drained",
                       d->name);
    if (r == 0 && (r = kd_tiers_cover(o, d->name, s->time, names, s->n, &dirs, err)) == 0) {
        r = assign(&dirs, s, err);
        ck__restore_dirs_free(&dirs);
    }
    free(names);
    return r;
}

/* The tag of the manifest in a drain's own stream: no data file to fetch again. */
#define STREAM_MANIFEST UINT32_MAX

static void stream_wrote(void *arg, size_t n)
{
    kd_drain_ctx *d = arg;
    d->done += n;
}

static bool stream_stop(void *arg)
{
    kd_drain_ctx *d = arg;
    return d->stop && d->stop(d->stop_arg);
}

/* Streams len bytes of the file at dir/rel into the drain's copy through p (paced,
 * read ahead past the page cache, checked on the pipe's checker: decision 0203); *bad
 * gets the tag of a file whose read or block failed, from this one or before. */
static int stream(kd_drain_ctx *d, kd_dpipe *p, const char *dir, const char *rel,
                  uint64_t len, uint32_t tag, uint32_t *bad, ck_err *err)
{
    char what[PATH_MAX + CK_NAME_MAX];
    snprintf(what, sizeof what, "%s/%s", dir, rel);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int fd = dfd < 0 ? -errno : ck__openat_reg(dfd, rel, O_RDONLY, 0);
    if (dfd >= 0)
        close(dfd);
    if (fd < 0) {
        *bad = tag;
        return ck_err_set(err, fd, "%s: %s", what, ck__why(fd));
    }
    kd_dpipe_file_in f = { .fd = fd, .direct = ck__direct_on(fd), .len = len, .what = what,
                           .tag = tag, .wrote = stream_wrote, .stop = stream_stop, .arg = d };
    /* A read still in flight on fd after an error keeps its file open itself. */
    int r = kd_dpipe_file(p, &f, bad, err);
    close(fd);
    return r;
}

/* One attempt at the durable copy; *bad gets the data file whose source failed (its
 * read, or a block's hash), else -1. */
static int attempt(kd_drain_ctx *d, const dsrc *s, int64_t *bad, ck_err *err)
{
    ck__copy_in_opts co = { .root = d->o.durable, .name = d->name, .source = d->o.id,
                            .manifest_size = s->msize, .files = s->files, .n_files = s->n,
                            .checkers = 1, .log = d->o.log, .log_arg = d->o.log_arg };
    ck__copy_in *c;
    kd_dpipe *p = NULL;
    uint32_t badf = STREAM_MANIFEST;
    *bad = -1;
    d->done = 0;
    int r = ck__copy_in_begin(&co, &c, err);
    if (r < 0)
        return r;
    r = kd_dpipe_open(c, d->bucket, &p, err);
    if (r == 0)
        r = stream(d, p, s->mdir, CK_MANIFEST, s->msize, STREAM_MANIFEST, &badf, err);
    for (uint32_t f = 0; r == 0 && f < s->n; f++)
        r = stream(d, p, s->dir[f], s->files[f].name, s->files[f].size, f, &badf, err);
    if (r == 0)
        r = kd_dpipe_end(p, &badf, err);
    kd_dpipe_free(p);
    *bad = r < 0 && badf != STREAM_MANIFEST ? (int64_t)badf : -1;
    if (r == 0)
        r = ck__copy_in_commit(c, err);
    ck__copy_in_free(c);
    return r;
}

/* Whether the durable root holds the save of name committed at time: 1 yes, 0 no such
 * checkpoint there, -EEXIST another save of the name. */
static int durable_has(const kd_drain_ctx *d, uint64_t time, ck_err *err)
{
    ck_ckpt *ck;
    if (ck_open(d->o.durable, d->name, &ck, NULL) < 0)
        return 0;
    bool same = ck_get_info(ck)->time_ns == time && !ck_get_copy(ck)->partial;
    ck_close(ck);
    return same ? 1 : ck_err_set(err, -EEXIST, "the durable root %s holds another save of %s",
                                 d->o.durable, d->name);
}

/* Waits a little for NAME's lock in the durable root: the save itself may still hold
 * it (its coordinator lets it go once every daemon settled, a poll after this one
 * heard; decision 0189). False once until passed (a lock held past the peer timeout
 * is another writer's) or the daemon stops. */
static bool lock_wait(const kd_drain_ctx *d, double until)
{
    if (kd_now() >= until || d->stop(d->stop_arg))
        return false;
    struct timespec ts = { 0, 50 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    return true;
}

/* ---- the drain in parts (decision 0197) ---- */

/* A live peer that writes the files of the drain this node's copies lack: its own
 * copy's, or a replica's. */
typedef struct dpart {
    kd_drain_ctx *d;
    _Atomic bool *abandon;         /* the attempt cannot be saved: the part is given up */
    kd_preq q;                     /* name, time, the manifest's SHA-256, token, files */
    uint32_t *idx;                 /* idx[i]: the drain's index of q.files[i] */
    char addr[KD_PEER_ADDR_MAX], holder[CK_COPY_ID_MAX];
    uint64_t seen;                 /* its bytes written, as last heard */
    pthread_t th;
    int r;
    ck_err err;
} dpart;

static void part_free(dpart *p)
{
    kd_preq_free(&p->q);
    free(p->idx);
    p->idx = NULL;
}

static void parts_free(dpart *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        part_free(&p[i]);
    free(p);
}

/* Whether id is one of the n daemons in ids. */
static bool named(char (*ids)[CK_COPY_ID_MAX], size_t n, const char *id)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(ids[i], id))
            return true;
    return false;
}

/* Where each data file comes from: a copy in this node's tier (s->dir[f]), else a live
 * peer's copy of the same save, the peer's own copy first (the node whose part the file
 * is: its write is its own disk's read), then a replica, never a copy held by one of
 * the nx daemons in lost (their part failed); one PART per copy (a peer writes the part
 * of its own copy and that of a replica it keeps one after the other). A file kept from
 * a failed attempt is placed nowhere: it is carried. -ENODATA naming a file none
 * holds. */
static int place(kd_drain_ctx *d, dsrc *s, char (*lost)[CK_COPY_ID_MAX], size_t nx,
                 dpart **out, size_t *np, ck_err *err)
{
    kd_tview t;
    *out = NULL;
    *np = 0;
    int r = kd_tiers_gather(&d->o, d->name, true, &t, err);
    if (r < 0)
        return r;
    dpart *p = calloc(t.n ? t.n : 1, sizeof *p);
    for (size_t i = 0; p && i < t.n; i++) {
        p[i].q.files = calloc(s->n ? s->n : 1, sizeof *p[i].q.files);
        p[i].idx = calloc(s->n ? s->n : 1, sizeof *p[i].idx);
        if (!p[i].q.files || !p[i].idx)
            r = ck_err_set(err, -ENOMEM, "out of memory");
    }
    if (!p)
        r = ck_err_set(err, -ENOMEM, "out of memory");
    for (uint32_t f = 0; r == 0 && f < s->n; f++) {
        const char *file = s->files[f].name;
        int best = -1, score = 0;
        if (s->kept[f])
            continue;
        for (size_t i = 0; i < t.n && !s->dir[f][0]; i++) {
            const kd_tcopy *c = &t.v[i];
            if (strcmp(c->c.name, d->name) || c->c.time_ns != s->time ||
                !kd_tiers_holds(&c->c, file) ||
                (c->where == KD_AT_PEER && named(lost, nx, c->holder)))
                continue;
            if (c->where == KD_AT_LOCAL)
                snprintf(s->dir[f], PATH_MAX, "%.*s/%s", PATH_MAX - CK_NAME_MAX - 2, c->root,
                         d->name);
            int sc = c->where != KD_AT_PEER ? 0 : !strcmp(c->c.source, c->holder) ? 2 : 1;
            if (sc > score)
                best = (int)i, score = sc;
        }
        if (s->dir[f][0])
            continue;
        if (best < 0) {
            r = ck_err_set(err, -ENODATA, "checkpoint %s: %s: neither this node's tier nor a "
                           "live peer holds it%s", d->name, file,
                           nx ? " (but one whose part failed)" : "");
            break;
        }
        dpart *q = &p[best];
        q->idx[q->q.n] = f;
        q->q.files[q->q.n++] = s->files[f];
        snprintf(q->q.source, sizeof q->q.source, "%s", t.v[best].c.source);
        snprintf(q->addr, sizeof q->addr, "%s", t.peers[t.v[best].peer].addr);
        snprintf(q->holder, sizeof q->holder, "%s", t.v[best].holder);
    }
    size_t ncopies = t.n;
    kd_tview_free(&t);
    if (r < 0) {
        if (p)
            parts_free(p, ncopies);
        return r;
    }
    /* The parts with files, first. */
    size_t n = 0;
    for (size_t i = 0; i < ncopies; i++) {
        if (!p[i].q.n)
            continue;
        dpart keep = p[i];
        p[i] = p[n];
        p[n++] = keep;
    }
    *out = p;
    *np = n;
    for (size_t i = n; i < ncopies; i++)
        part_free(&p[i]);
    return 0;
}

/* A part's bytes, as its peer says it wrote them, count as the drain's. */
static void part_progress(void *arg, uint64_t done, uint64_t total)
{
    dpart *p = arg;
    (void)total;
    if (done > p->seen)
        p->d->done += done - p->seen;
    p->seen = done;
}

/* Whether a write into the durable root failed because the root refuses writes (full,
 * over quota, read-only): it does so to every writer, whichever node. */
static bool durable_refuses(int r)
{
    return r == -ENOSPC || r == -EDQUOT || r == -EROFS;
}

/* Whether a part that failed with code r may be given to another holder. */
static bool replaceable(int r)
{
    return !durable_refuses(r) && r != -ECANCELED;
}

/* A part is given up once the attempt cannot be saved (the committer's own stream
 * failed, or the durable root refuses writes) or the daemon stops: its connection
 * closes, and the peer removes what it wrote. A part is not given up because another
 * failed: what it writes whole is carried into the next attempt (decision 0199). */
static bool part_stop(void *arg)
{
    dpart *p = arg;
    return atomic_load(p->abandon) || p->d->stop(p->d->stop_arg);
}

static void *part_run(void *arg)
{
    dpart *p = arg;
    kd_peer_call call = { .addr = p->addr, .id = p->d->o.id, .key = p->d->o.key,
                          .timeout = p->d->o.timeout, .progress = part_progress, .arg = p,
                          .stop = part_stop, .stop_arg = p };
    p->r = kd_peer_part(&call, &p->q, &p->err);
    /* The durable root refuses every writer: the others need not finish. */
    if (durable_refuses(p->r))
        atomic_store(p->abandon, true);
    if (p->r == 0)
        kd_log_to(p->d->o.log, p->d->o.log_arg, "drain of %s: ckptd %s wrote its part (%u "
                  "data file(s))", p->d->name, p->holder, p->q.n);
    return NULL;
}

/* The SHA-256 of the manifest at dir, which the drain streams: its parts' writers check
 * the durable copy's against it. */
static int manifest_sha(const char *dir, uint8_t out[CK_SHA256_LEN], ck_err *err)
{
    uint8_t *bytes = NULL;
    size_t len = 0;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int r = dfd < 0 ? -errno : ck__read_whole(dfd, CK_MANIFEST, CK_COPY_MANIFEST_MAX, &bytes,
                                              &len);
    if (dfd >= 0)
        close(dfd);
    if (r == 0 && ck__sha256(bytes, len, out) < 0)
        r = -ENOMEM;
    free(bytes);
    return r < 0 ? ck_err_set(err, r, "%s/%s: %s", dir, CK_MANIFEST, ck__why(r)) : 0;
}

/* One attempt in parts: this node streams the manifest and the files its tier holds
 * into the durable copy, the peers of parts[0, np) write theirs into its pending
 * directory meanwhile, and it commits them all. *prev: the failed attempt before this
 * one, or NULL; its kept files are carried into this one, and it is freed. *begun: the
 * copy was begun (a -EBUSY before is NAME's lock); *failed: the part whose failure
 * failed the attempt, else np. When that part failed and the rest of the attempt did
 * not, the attempt is left in *prev (its directory and NAME's lock), the files written
 * whole in it marked kept, for the next. */
static int attempt_parts(kd_drain_ctx *d, dsrc *s, dpart *parts, size_t np,
                         const uint8_t sha[CK_SHA256_LEN], ck__copy_in **prev,
                         bool *begun, size_t *failed, ck_err *err)
{
    ck_file *own = calloc(s->n ? s->n : 1, sizeof *own);
    ck_file *joined = calloc(s->n ? s->n : 1, sizeof *joined);
    uint32_t n_own = 0, n_joined = 0;
    const char **dir = calloc(s->n ? s->n : 1, sizeof *dir);
    if (!own || !joined || !dir) {
        free(own);
        free(joined);
        free(dir);
        return ck_err_set(err, -ENOMEM, "out of memory");
    }
    for (uint32_t f = 0; f < s->n; f++) {
        if (s->dir[f][0] && !s->kept[f]) {
            dir[n_own] = s->dir[f];
            own[n_own++] = s->files[f];
        } else {
            joined[n_joined++] = s->files[f];
        }
    }
    ck__copy_in_opts co = { .root = d->o.durable, .name = d->name, .source = d->o.id,
                            .manifest_size = s->msize, .manifest_sha256 = sha,
                            .files = own, .n_files = n_own, .joined = joined,
                            .n_joined = n_joined, .checkers = 1, .log = d->o.log,
                            .log_arg = d->o.log_arg, .again = *prev };
    ck__copy_in *c = NULL;
    kd_dpipe *pipe = NULL;
    uint32_t badf = STREAM_MANIFEST;
    _Atomic bool abandon = false;
    size_t started = 0;
    d->done = 0;
    int r = ck__copy_in_begin(&co, &c, err);
    *begun = r == 0;
    for (uint32_t f = 0; r == 0 && f < s->n; f++)
        if (s->kept[f]) {
            r = ck__copy_in_carry(c, *prev, s->files[f].name, err);
            d->done += s->files[f].size;
        }
    ck__copy_in_free(*prev);
    *prev = NULL;
    if (r == 0)
        r = kd_dpipe_open(c, d->bucket, &pipe, err);
    /* The manifest first: the parts' writers find it in the directory they join. */
    if (r == 0)
        r = stream(d, pipe, s->mdir, CK_MANIFEST, s->msize, STREAM_MANIFEST, &badf, err);
    for (; r == 0 && started < np; started++) {
        dpart *p = &parts[started];
        p->d = d;
        p->abandon = &abandon;
        p->seen = 0;
        p->err = (ck_err){ 0 };
        snprintf(p->q.name, sizeof p->q.name, "%s", d->name);
        p->q.time_ns = s->time;
        memcpy(p->q.manifest_sha256, sha, CK_SHA256_LEN);
        snprintf(p->q.token, sizeof p->q.token, "%s", ck__copy_in_token(c));
        if ((r = -pthread_create(&p->th, NULL, part_run, p)) < 0)
            ck_err_set(err, r, "drain of %s: starting a part: %s", d->name, strerror(-r));
    }
    /* A part that fails does not stop this stream: what it writes whole is carried into
     * the attempt that gives the failed part to another holder. */
    for (uint32_t f = 0; r == 0 && f < n_own; f++)
        r = stream(d, pipe, dir[f], own[f].name, own[f].size, f, &badf, err);
    /* Written whole means checked too: what is kept for a new attempt. */
    if (r == 0)
        r = kd_dpipe_end(pipe, &badf, err);
    kd_dpipe_free(pipe);
    /* Every part ends (written, failed, given up with this attempt, or its peer silent
     * for the timeout) before the copy is committed or removed. */
    if (r < 0)
        atomic_store(&abandon, true);
    for (size_t i = 0; i < started; i++) {
        pthread_join(parts[i].th, NULL);
        if (parts[i].r < 0 && parts[i].r != -ECANCELED)
            kd_log_to(d->o.log, d->o.log_arg, "drain of %s: the part of ckptd %s (%u data "
                      "file(s)) failed: %s", d->name, parts[i].holder, parts[i].q.n,
                      ck_err_msg(&parts[i].err));
    }
    /* The first failed part is the one given to other holders; a part given up was
     * given up for the attempt. */
    *failed = np;
    for (size_t i = 0; r == 0 && i < started; i++)
        if (parts[i].r < 0 && parts[i].r != -ECANCELED) {
            *failed = i;
            r = ck_err_set(err, parts[i].r, "the part of ckptd %s: %s", parts[i].holder,
                           ck_err_msg(&parts[i].err));
        }
    for (size_t i = 0; r == 0 && i < started; i++)
        if (parts[i].r < 0)
            r = ck_err_set(err, parts[i].r, "the part of ckptd %s: %s", parts[i].holder,
                           ck_err_msg(&parts[i].err));
    if (r == 0) {
        r = ck__copy_in_commit(c, err);
    } else if (*failed < np) {
        /* Only the files of the parts that failed are left to write: the others are
         * whole in c's directory, each block checked by its writer. */
        for (uint32_t f = 0; f < s->n; f++)
            s->kept[f] = s->kept[f] || s->dir[f][0];
        for (size_t i = 0; i < started; i++)
            for (uint32_t k = 0; parts[i].r == 0 && k < parts[i].q.n; k++)
                s->kept[parts[i].idx[k]] = true;
        *prev = c;
        c = NULL;
    }
    ck__copy_in_free(c);
    free(own);
    free(joined);
    free(dir);
    return r;
}

/* Says where the parts of a drain come from. */
static void say_parts(const kd_drain_ctx *d, const dpart *parts, size_t np)
{
    char said[CK_ERR_MSG_MAX / 2];
    size_t at = 0;
    for (size_t i = 0; i < np && at < sizeof said; i++) {
        const dpart *p = &parts[i];
        bool replica = strcmp(p->q.source, p->holder) != 0;
        at += (size_t)snprintf(said + at, sizeof said - at, "%sckptd %s %u%s%s%s", i ? ", " : "",
                               p->holder, p->q.n, replica ? " (replica of " : "",
                               replica ? p->q.source : "", replica ? ")" : "");
    }
    if (np)
        kd_log_to(d->o.log, d->o.log_arg, "drain of %s: in parts: the data files of this "
                  "node's tier from here, the others written by the nodes that hold them "
                  "(%s)", d->name, said);
}

/* The drain in parts: no node reads another's part, or stores it on the way. A part
 * that fails is given, in a new attempt, to the other live nodes that hold its files
 * (a node lost mid-drain leaves its part to its replicas' holders), each failed holder
 * left out in turn, so at most one attempt per peer; what the failed attempt wrote
 * whole is carried into the new one, not written again (decision 0199). 0 committed,
 * 1 the durable root held it already; -EEXIST another save of the name is there; else
 * why it could not be drained so (the caller drains it alone). */
static int in_parts(kd_drain_ctx *d, uint64_t *step, ck_err *err)
{
    dsrc s = { 0 };
    dpart *parts = NULL;
    ck__copy_in *prev = NULL;      /* the failed attempt, whose kept files are carried */
    size_t np = 0, nlost = 0;
    char (*lost)[CK_COPY_ID_MAX] = NULL;
    uint8_t sha[CK_SHA256_LEN];
    int r = sources(d, &s, false, err);
    *step = s.step;
    d->total = s.total;
    if (r == 0 && (r = durable_has(d, s.time, err)) == 1)
        goto out;
    if (r == 0)
        r = place(d, &s, NULL, 0, &parts, &np, err);
    if (r == 0)
        r = manifest_sha(s.mdir, sha, err);
    if (r == 0)
        say_parts(d, parts, np);
    double lock_until = kd_now() + d->o.timeout;
    bool begun = false;
    while (r == 0) {
        ck_err why = { 0 };
        size_t failed = np;
        if ((r = attempt_parts(d, &s, parts, np, sha, &prev, &begun, &failed, &why)) == 0)
            break;
        if (r == -EEXIST) {
            r = durable_has(d, s.time, err);
            break;
        }
        if (r == -EBUSY && !begun && lock_wait(d, lock_until)) {
            r = 0;
            continue;
        }
        ck_err_set(err, r, "%s", ck_err_msg(&why));
        if (failed == np || !replaceable(r) || (d->stop && d->stop(d->stop_arg)))
            break;
        uint32_t nkept = 0;
        uint64_t bkept = 0;
        for (uint32_t f = 0; f < s.n; f++)
            if (s.kept[f])
                nkept++, bkept += s.files[f].size;
        /* The failed part's files from the other holders, in a new attempt: a new
         * pending directory, which a writer of the failed one that still runs never
         * touches, the files written whole carried into it and the old one removed. */
        void *more = realloc(lost, (nlost + 1) * sizeof *lost);
        if (!more)
            break;
        lost = more;
        snprintf(lost[nlost++], CK_COPY_ID_MAX, "%s", parts[failed].holder);
        kd_log_to(d->o.log, d->o.log_arg, "drain of %s: ckptd %s's part failed; its data "
                  "files are asked of the other nodes that hold them, and the %u written "
                  "whole (%llu bytes) are carried into the new attempt", d->name,
                  parts[failed].holder, nkept, (unsigned long long)bkept);
        parts_free(parts, np);
        parts = NULL;
        np = 0;
        ck_err e2 = { 0 };
        if ((r = place(d, &s, lost, nlost, &parts, &np, &e2)) < 0) {
            ck_err_set(err, r, "%s; %s", ck_err_msg(&why), ck_err_msg(&e2));
            break;
        }
        say_parts(d, parts, np);
    }
out:
    ck__copy_in_free(prev);
    free(lost);
    parts_free(parts, np);
    dsrc_free(&s);
    return r;
}

/* ---- one node's drain (decision 0178) ---- */

int kd_drain_copy(kd_drain_ctx *d, uint64_t *step, ck_err *err)
{
    ck_err not_parts = { 0 };
    int r = in_parts(d, step, &not_parts);
    /* A durable root that refuses writes refuses one node's drain too: fetching what
     * this tier lacks would only fill its local disk for nothing. */
    if (r >= 0 || r == -EEXIST || r == -ECANCELED || durable_refuses(r)) {
        if (r < 0)
            *err = not_parts;
        return r;
    }
    kd_log_to(d->o.log, d->o.log_arg, "drain of %s: not drained in parts (%s); this node "
              "drains it alone, fetching what its tier lacks", d->name,
              ck_err_msg(&not_parts));
    dsrc s = { 0 };
    d->o.progress = fetch_paced;
    d->o.progress_arg = d;
    d->fetched_seen = 0;
    r = sources(d, &s, true, err);
    *step = s.step;
    d->total = s.total;
    if (r == 0 && (r = durable_has(d, s.time, err)) == 1)
        goto out;
    double lock_until = kd_now() + d->o.timeout;
    while (r == 0) {
        int64_t bad;
        ck_err why = { 0 };
        if ((r = attempt(d, &s, &bad, &why)) == 0)
            break;
        if (r == -EEXIST) {
            r = durable_has(d, s.time, err);
            break;
        }
        if (r == -EBUSY && lock_wait(d, lock_until)) {
            r = 0;
            continue;
        }
        if (bad < 0 || s.refetched[bad]) {
            ck_err_set(err, r, "%s", ck_err_msg(&why));
            break;
        }
        /* The local copy of this file is bad: one peer's copy instead, checked as it
         * comes, and the drain again from the start (what was written is gone with the
         * pending directory). */
        kd_log_to(d->o.log, d->o.log_arg, "drain of %s: the copy at %s is bad (%s); fetching "
                  "%s from a peer", d->name, s.dir[bad], ck_err_msg(&why), s.files[bad].name);
        char root[PATH_MAX];
        ck_err e2 = { 0 };
        d->fetched_seen = 0;
        if ((r = kd_tiers_refetch(&d->o, d->name, s.time, s.files[bad].name, root, &e2)) < 0) {
            ck_err_set(err, r, "%s; %s", ck_err_msg(&why), ck_err_msg(&e2));
            break;
        }
        snprintf(s.dir[bad], PATH_MAX, "%.*s/%s", PATH_MAX - CK_NAME_MAX - 2, root, d->name);
        s.refetched[bad] = true;
    }
out:
    dsrc_free(&s);
    return r;
}
