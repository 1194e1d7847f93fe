/* kd_drain_copy.c - one drain: a checkpoint whose parts lie in the nodes' local tiers
 * made a complete copy in the durable root (docs/ARCHITECTURE.md, "The drain";
 * decision 0178).
 *
 * The daemon that drains reads each data file from the nearest copy that holds it
 * (kd_tiers.c): its own partial copy, a replica it keeps, or a file fetched from a
 * live peer (GET, checked on arrival, under LOCAL/.fetched/N). The manifest and the
 * files stream, in the manifest's order, into ck__copy_in (ops/copy.h) on the durable
 * root: the commit protocol of every copy, so the durable checkpoint is made by the
 * same pending directory, save lock, fsyncs, structure check and one rename as any
 * other, and nothing of a drain that fails or whose daemon dies is visible there.
 * ck__copy_in checks every block's SHA-256 against the manifest as its last byte
 * arrives: a local copy whose byte flipped on disk fails its block, and that file is
 * fetched from a peer's copy instead (once), the drain started over; a file no copy
 * can give fails the drain, naming it. The reads of local copies and what is fetched
 * are paced by a token bucket at the drain's rate, so the drain leaves the local disk
 * to the saves.
 */
#include <fcntl.h>
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

#define DRAIN_CHUNK (1u << 20)     /* bytes read and written at once */
#define DRAIN_CREDIT 0.1           /* s of the rate a paced drain may catch up */

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
    uint64_t total;                /* bytes to stream: manifest and data files */
} dsrc;

static void dsrc_free(dsrc *s)
{
    free(s->files);
    free(s->dir);
    free(s->refetched);
}

static void bucket_take(kd_drain_bucket *b, uint64_t n)
{
    if (!b || !b->rate)
        return;
    double now = kd_now();
    /* Time spent reading and writing counts, up to one chunk's worth (a tenth of a
     * second); idle time beyond earns nothing: no burst after a pause. */
    if (b->t < now - DRAIN_CREDIT)
        b->t = now - DRAIN_CREDIT;
    b->t += (double)n / (double)b->rate;
    double wait = b->t - now;
    if (wait > 0) {
        struct timespec ts = { .tv_sec = (time_t)wait,
                               .tv_nsec = (long)((wait - (double)(time_t)wait) * 1e9) };
        nanosleep(&ts, NULL);
    }
}

/* A fetch from a peer is paced as the local reads are: kd_tiers_opts.progress. */
static void fetch_paced(void *arg, uint64_t done, uint64_t total)
{
    kd_drain_ctx *d = arg;
    (void)total;
    if (done > d->fetched_seen)
        bucket_take(d->bucket, done - d->fetched_seen);
    d->fetched_seen = done;
}

/* The chunk: at most a tenth of a second of the rate, so that pacing is smooth and a
 * stop is seen soon. */
static size_t chunk_of(const kd_drain_ctx *d)
{
    uint64_t c = d->bucket && d->bucket->rate ? d->bucket->rate / 10 : DRAIN_CHUNK;
    c = c < 4096 ? 4096 : c > DRAIN_CHUNK ? DRAIN_CHUNK : c;
    return (size_t)(c & ~(uint64_t)4095);
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

/* Finds the checkpoint's copies and makes every data file readable here (fetching what
 * no local copy holds from a live peer). 1: the durable root holds this save already. */
static int sources(const kd_drain_ctx *d, dsrc *s, ck_err *err)
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
    char (*names)[CK_FILE_NAME_MAX] = calloc(s->n ? s->n : 1, sizeof *names);
    if (!s->files || !s->dir || !s->refetched || !names)
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
    if (r == 0)
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

/* Streams len bytes of the file at dir/rel into c, paced; *read_bad tells a failure of
 * the source (a read error, a short file) from one of the durable side. */
static int stream(kd_drain_ctx *d, ck__copy_in *c, const char *dir, const char *rel,
                  uint64_t len, uint8_t *buf, bool *read_bad, ck_err *err)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int fd = dfd < 0 ? -errno : ck__openat_reg(dfd, rel, O_RDONLY, 0);
    if (dfd >= 0)
        close(dfd);
    if (fd < 0) {
        *read_bad = true;
        return ck_err_set(err, fd, "%s/%s: %s", dir, rel, ck__why(fd));
    }
    size_t chunk = chunk_of(d);
    int r = 0;
    for (uint64_t off = 0; r == 0 && off < len;) {
        size_t want = len - off < chunk ? (size_t)(len - off) : chunk;
        ssize_t k = pread(fd, buf, want, (off_t)off);
        if (k <= 0) {
            *read_bad = true;
            r = ck_err_set(err, k < 0 ? -errno : -EIO, "%s/%s: %s at byte %llu", dir, rel,
                           k < 0 ? strerror(errno) : "the file ends", (unsigned long long)off);
            break;
        }
        bucket_take(d->bucket, (uint64_t)k);
        if ((r = ck__copy_in_write(c, buf, (size_t)k, err)) < 0)
            break;
        off += (uint64_t)k;
        d->done += (uint64_t)k;
        if (d->stop && d->stop(d->stop_arg))
            r = ck_err_set(err, -ECANCELED, "the daemon is stopping");
    }
    close(fd);
    return r;
}

/* One attempt at the durable copy; *bad gets the data file whose source failed (its
 * read, or a block's hash), else -1. */
static int attempt(kd_drain_ctx *d, const dsrc *s, uint8_t *buf, int64_t *bad, ck_err *err)
{
    ck__copy_in_opts co = { .root = d->o.durable, .name = d->name, .source = d->o.id,
                            .manifest_size = s->msize, .files = s->files, .n_files = s->n,
                            .log = d->o.log, .log_arg = d->o.log_arg };
    ck__copy_in *c;
    bool read_bad = false;
    *bad = -1;
    d->done = 0;
    int r = ck__copy_in_begin(&co, &c, err);
    if (r == 0)
        r = stream(d, c, s->mdir, CK_MANIFEST, s->msize, buf, &read_bad, err);
    for (uint32_t f = 0; r == 0 && f < s->n; f++) {
        r = stream(d, c, s->dir[f], s->files[f].name, s->files[f].size, buf, &read_bad, err);
        if (r < 0 && (read_bad || r == -EBADMSG))
            *bad = f;
    }
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

int kd_drain_copy(kd_drain_ctx *d, uint64_t *step, ck_err *err)
{
    dsrc s = { 0 };
    d->o.progress = fetch_paced;
    d->o.progress_arg = d;
    d->fetched_seen = 0;
    int r = sources(d, &s, err);
    uint8_t *buf = r == 0 ? malloc(DRAIN_CHUNK) : NULL;
    if (r == 0 && !buf)
        r = ck_err_set(err, -ENOMEM, "out of memory");
    *step = s.step;
    d->total = s.total;
    if (r == 0 && (r = durable_has(d, s.time, err)) == 1)
        goto out;
    /* NAME's lock in the durable root may still be held by the save itself: its
     * coordinator lets it go once every daemon settled, a poll after this one heard
     * (decision 0189). A lock held past the peer timeout is another writer's. */
    double lock_until = kd_now() + d->o.timeout;
    while (r == 0) {
        int64_t bad;
        ck_err why = { 0 };
        if ((r = attempt(d, &s, buf, &bad, &why)) == 0)
            break;
        if (r == -EEXIST) {
            r = durable_has(d, s.time, err);
            break;
        }
        if (r == -EBUSY && kd_now() < lock_until && !d->stop(d->stop_arg)) {
            struct timespec ts = { 0, 50 * 1000 * 1000 };
            nanosleep(&ts, NULL);
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
    free(buf);
    dsrc_free(&s);
    return r;
}
