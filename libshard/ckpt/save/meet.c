/* meet.c - the files through which daemons share a save (see save/meet.h). */
#include "save/meet.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/enc.h"
#include "io/hash.h"
#include "io/rootfs.h"

#define PARTS_MAGIC "CKMEET2\0"
#define MEET_FILE_MAX (64u << 20)  /* a part file: records of one node's ranks, blobs */

int ck__node_id_check(const char *id, ck_err *err)
{
    size_t n = strlen(id);
    bool ok = n > 0 && n < CK_NODE_ID_MAX && id[0] != '.';
    for (size_t i = 0; ok && i < n; i++)
        ok = (id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') ||
             (id[i] >= '0' && id[i] <= '9') || id[i] == '.' || id[i] == '_' || id[i] == '-';
    if (!ok)
        return ck_err_set(err, -EINVAL, "daemon id '%s': 1 to %d characters of "
                          "[A-Za-z0-9._-], not starting with '.'", id, CK_NODE_ID_MAX - 1);
    return 0;
}

void ck__meet_dir(const char *root, const char *name, const char *token, char *out)
{
    char rel[PATH_MAX];
    if (ck__name_meet(name, token, rel, sizeof rel) < 0 ||
        snprintf(out, PATH_MAX, "%s/%s", root, rel) >= PATH_MAX)
        out[0] = '\0';
}

/* The directory dir (ROOT itself or a meeting under it), opened beneath ROOT without
 * following a link (io/rootfs.h): a meeting planted as a link leads nowhere. */
static int dir_open(const char *root, const char *dir, ck_err *err)
{
    const char *rel = ck__rel(root, dir);
    if (!rel)
        return ck_err_set(err, -EINVAL, "%s is not under the root %s", dir, root);
    int rootfd = ck__root_open(root, err);
    if (rootfd < 0 || !rel[0])
        return rootfd;
    int fd = ck__openat(rootfd, rel, O_RDONLY | O_DIRECTORY, 0);
    close(rootfd);
    if (fd < 0)
        return ck_err_set(err, fd, "%s: %s", dir, ck__why(fd));
    return fd;
}

static int write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, p + done, len - done);
        if (n < 0 && errno != EINTR)
            return -errno;
        if (n > 0)
            done += (size_t)n;
    }
    return 0;
}

int ck__meet_put(const char *root, const char *dir, const char *name, const void *buf,
                 size_t len, bool durable, ck_err *err)
{
    char tmp[NAME_MAX + 1];
    /* The temporary name starts with '.': no reader's prefix matches it. It is ours:
     * whatever is there (debris, or a link planted for us to write through) goes, and
     * the new one is made exclusive. */
    if (ck__name_tmp(name, tmp, sizeof tmp) < 0)
        return ck_err_set(err, -ENAMETOOLONG, "%s/%s: name too long", dir, name);
    int d = dir_open(root, dir, err);
    if (d < 0)
        return d;
    unlinkat(d, tmp, 0);
    int fd = ck__openat(d, tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
    int r = fd < 0 ? fd : write_all(fd, buf, len);
    if (r == 0 && durable && fsync(fd) < 0)
        r = -errno;
    if (fd >= 0 && close(fd) < 0 && r == 0)
        r = -errno;
    if (r == 0 && renameat(d, tmp, d, name) < 0)
        r = -errno;
    if (r == 0 && durable && fsync(d) < 0)
        r = -errno;
    if (r < 0 && fd >= 0)
        unlinkat(d, tmp, 0);
    close(d);
    if (r < 0)
        return ck_err_set(err, r, "%s/%s: %s", dir, fd < 0 ? tmp : name, ck__why(r));
    return 0;
}

/* The regular file name beneath d, whole (at most MEET_FILE_MAX bytes). Never through
 * a link, and never waiting: a FIFO or device planted in the shared directory must not
 * hang the daemon that polls it. */
static int read_all(int d, const char *name, uint8_t **out, size_t *len)
{
    return ck__read_whole(d, name, MEET_FILE_MAX, out, len);
}

/* ck__meet_each on the directory d (kept open; dir names it). */
static int each_at(int d, const char *dir, ck__meet_file kind,
                   int (*fn)(void *arg, const char *file, const uint8_t *buf, size_t len),
                   void *arg, ck_err *err)
{
    int fd = fcntl(d, F_DUPFD_CLOEXEC, 0);
    DIR *dd = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dd) {
        int e = -errno;
        if (fd >= 0)
            close(fd);
        return ck_err_set(err, e, "%s: %s", dir, strerror(-e));
    }
    struct dirent *de;
    int r = 0;
    while (r == 0 && (de = readdir(dd))) {
        if (ck__meet_file_of(de->d_name, NULL) != kind)
            continue;
        uint8_t *buf;
        size_t len;
        int e = read_all(d, de->d_name, &buf, &len);
        if (e == -ENOENT)
            continue;       /* removed since the readdir */
        if (e < 0) {
            r = ck_err_set(err, e, "%s/%s: %s", dir, de->d_name, ck__why(e));
            break;
        }
        r = fn(arg, de->d_name, buf, len);
        free(buf);
    }
    closedir(dd);
    return r;
}

int ck__meet_each(const char *root, const char *dir, ck__meet_file kind,
                  int (*fn)(void *arg, const char *file, const uint8_t *buf, size_t len),
                  void *arg, ck_err *err)
{
    int d = dir_open(root, dir, err);
    if (d < 0)
        return d;
    int r = each_at(d, dir, kind, fn, arg, err);
    close(d);
    return r;
}

void ck__meet_drop(const char *root, const char *dir, const char *file)
{
    int d = dir_open(root, dir, NULL);
    if (d < 0)
        return;
    unlinkat(d, file, 0);
    close(d);
}

void ck__meet_remove(const char *root, const char *dir)
{
    int d = dir_open(root, dir, NULL);
    int fd = d >= 0 ? fcntl(d, F_DUPFD_CLOEXEC, 0) : -1;
    DIR *dd = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dd && fd >= 0)
        close(fd);
    struct dirent *de;
    /* Names, never followed: a link in it is removed as a link, a directory stays. */
    while (dd && (de = readdir(dd)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            unlinkat(d, de->d_name, 0);
    if (dd)
        closedir(dd);
    if (d >= 0)
        close(d);
    int rootfd = ck__root_open(root, NULL);
    const char *rel = ck__rel(root, dir);
    if (rootfd >= 0 && rel && rel[0])
        ck__unlinkat(rootfd, rel, AT_REMOVEDIR);
    if (rootfd >= 0)
        close(rootfd);
}

/* ---- the plan ---- */

static int plan_text(const ck__meet_plan *p, char *buf, size_t cap)
{
    return snprintf(buf, cap, "ckptd meeting %d\nstep %" PRIu64 "\nworld %" PRIu64
                    "\nnodes %u\ncoordinator %s\ninstance %" PRIu64 "\njob %s\n",
                    CK_MEET_VERSION, p->step, p->world, p->nodes, p->coord, p->instance, p->job);
}

static int plan_parse(const char *buf, ck__meet_plan *p)
{
    int version;
    memset(p, 0, sizeof *p);
    /* The version first: a plan of another version may have other lines. */
    if (sscanf(buf, "ckptd meeting %d\n", &version) != 1)
        return -EBADMSG;
    if (version != CK_MEET_VERSION)
        return -EPROTONOSUPPORT;
    char job[64];
    int n = sscanf(buf, "ckptd meeting %*d\nstep %" SCNu64 "\nworld %" SCNu64 "\nnodes %u\n"
                   "coordinator %63s\ninstance %" SCNu64 "\njob %63s", &p->step, &p->world,
                   &p->nodes, p->coord, &p->instance, job);
    if (n != 6 || strlen(job) != CK_JOB_HEX_MAX - 1 ||
        strspn(job, "0123456789abcdef") != CK_JOB_HEX_MAX - 1)
        return -EBADMSG;
    memcpy(p->job, job, CK_JOB_HEX_MAX);
    /* Another host wrote it, and the id becomes part of a path (its heartbeat). */
    return ck__node_id_check(p->coord, NULL) < 0 ? -EBADMSG : 0;
}

int ck__meet_create(const char *root, const char *name, const char *token,
                    const ck__meet_plan *plan, ck_err *err)
{
    char dir[PATH_MAX], buf[512];      /* a plan is at most 229 bytes */
    ck__meet_dir(root, name, token, dir);
    int rootfd = ck__root_open(root, err);
    if (rootfd < 0)
        return rootfd;
    /* A tiered save's pending directory is in a local tier: the durable root may have
     * no .pending yet (never followed if it is a link: the mkdir below refuses). */
    int r = ck__mkdirat(rootfd, CK_PENDING, 0755);
    r = r == -EEXIST ? 0 : r;
    if (r == 0)
        r = ck__mkdirat(rootfd, ck__rel(root, dir), 0755);
    close(rootfd);
    if (r < 0)
        return ck_err_set(err, r, "%s: %s", dir, ck__why(r));
    int n = plan_text(plan, buf, sizeof buf);
    r = ck__meet_put(root, dir, ck__meet_prefix(CK_MEET_PLAN), buf, (size_t)n, false, err);
    if (r < 0)
        ck__meet_remove(root, dir);
    return r;
}

static int any_file(void *arg, const char *file, const uint8_t *buf, size_t len)
{
    (void)arg, (void)file, (void)buf, (void)len;
    return 1;
}

int ck__meet_each_open(const char *root, const char *name,
                       int (*fn)(void *arg, const char *token, const ck__meet_plan *plan),
                       void *arg, ck_err *err)
{
    char pending[PATH_MAX], dir[PATH_MAX + 256], token[CK_TOKEN_MAX], of[CK_NAME_MAX];
    snprintf(pending, sizeof pending, "%s/%s", root, CK_PENDING);
    int rootfd = ck__root_open(root, err);
    if (rootfd < 0)
        return rootfd;
    int pend = ck__openat(rootfd, CK_PENDING, O_RDONLY | O_DIRECTORY, 0);
    close(rootfd);
    if (pend < 0)
        return pend == -ENOENT ? 0 : ck_err_set(err, pend, "%s: %s", pending, ck__why(pend));
    int fd = fcntl(pend, F_DUPFD_CLOEXEC, 0);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int e = -errno;
        if (fd >= 0)
            close(fd);
        close(pend);
        return ck_err_set(err, e, "%s: %s", pending, strerror(-e));
    }
    struct dirent *de;
    int found = 0;
    while (!found && (de = readdir(d))) {
        if (ck__pending_entry(de->d_name, of, token) != CK_PEND_MEET || strcmp(of, name))
            continue;
        snprintf(dir, sizeof dir, "%s/%s", pending, de->d_name);
        int m = ck__openat(pend, de->d_name, O_RDONLY | O_DIRECTORY, 0);
        uint8_t *buf;
        size_t len;
        if (m < 0 || read_all(m, ck__meet_prefix(CK_MEET_PLAN), &buf, &len) < 0) {
            if (m >= 0)
                close(m);
            continue;           /* not planned yet, or gone, or not a meeting at all */
        }
        ck__meet_plan plan;
        int r = plan_parse((const char *)buf, &plan);
        free(buf);
        /* A meeting that failed, or that a member settled, is an earlier save of the
         * name, not one to join. */
        if (r == 0 && each_at(m, dir, CK_MEET_FAILED, any_file, NULL, NULL) == 0 &&
            each_at(m, dir, CK_MEET_SETTLED, any_file, NULL, NULL) == 0)
            found = fn(arg, token, &plan);
        close(m);
    }
    closedir(d);
    close(pend);
    return found;
}

/* ---- join and failed records ---- */

int ck__meet_join(const char *root, const char *dir, ck__meet_file kind, const char *id,
                  uint64_t instance, uint64_t rank, ck_err *err)
{
    char name[CK_NODE_ID_MAX + 8], buf[96];
    ck__name_meet_file(kind, id, 0, name, sizeof name);
    int n = snprintf(buf, sizeof buf, "instance %" PRIu64 "\nrank %" PRIu64 "\n", instance,
                     rank);
    return ck__meet_put(root, dir, name, buf, (size_t)n, false, err);
}

int ck__meet_join_decode(const uint8_t *buf, size_t len, uint64_t *instance, uint64_t *rank)
{
    (void)len;
    /* The rank line came later in version 1: a join without it names no rank. */
    *rank = UINT64_MAX;
    int got = sscanf((const char *)buf, "instance %" SCNu64 "\nrank %" SCNu64, instance, rank);
    return got >= 1 ? 0 : -EBADMSG;
}

int ck__meet_fail(const char *root, const char *dir, const char *id, int code, const char *msg,
                  ck_err *err)
{
    char name[CK_NODE_ID_MAX + 8], buf[CK_ERR_MSG_MAX + 32];
    ck__name_meet_file(CK_MEET_FAILED, id, 0, name, sizeof name);
    int n = snprintf(buf, sizeof buf, "code %d\n%s\n", code, msg);
    if (n >= (int)sizeof buf)
        n = (int)sizeof buf - 1;
    return ck__meet_put(root, dir, name, buf, (size_t)n, true, err);
}

int ck__meet_fail_decode(const uint8_t *buf, size_t len, int *code, char *msg, size_t cap)
{
    const char *nl = memchr(buf, '\n', len);
    if (!nl || sscanf((const char *)buf, "code %d", code) != 1 || *code >= 0)
        return -EBADMSG;
    size_t n = len - (size_t)(nl + 1 - (const char *)buf);
    while (n && nl[n] == '\n')
        n--;
    snprintf(msg, cap, "%.*s", (int)n, nl + 1);
    return 0;
}

/* ---- part files ---- */

int ck__meet_parts_encode(void *const *recs, const size_t *lens, uint32_t n,
                          const ck__meet_blob *blobs, uint32_t nblobs, uint8_t **out,
                          size_t *len)
{
    ck__wbuf w = { 0 };
    ck__put_bytes(&w, PARTS_MAGIC, 8);
    ck__put_u32(&w, n);
    for (uint32_t i = 0; i < n; i++) {
        ck__put_u32(&w, (uint32_t)lens[i]);
        ck__put_bytes(&w, recs[i], lens[i]);
    }
    ck__put_u32(&w, nblobs);
    for (uint32_t i = 0; i < nblobs; i++) {
        ck__put_str(&w, blobs[i].name);
        ck__put_u64(&w, blobs[i].len);
        ck__put_bytes(&w, blobs[i].data, blobs[i].len);
    }
    uint8_t digest[CK_SHA256_LEN];
    if (!w.oom && ck__sha256(w.p, w.len, digest) == 0)
        ck__put_bytes(&w, digest, sizeof digest);
    else
        w.oom = true;
    if (w.oom) {
        ck__wbuf_free(&w);
        return -ENOMEM;
    }
    *out = w.p;
    *len = w.len;
    return 0;
}

int ck__meet_parts_decode(const uint8_t *buf, size_t len,
                          int (*fn)(void *arg, const void *rec, size_t rec_len,
                                    const ck__meet_blob *blob),
                          void *arg, ck_err *err)
{
    uint8_t digest[CK_SHA256_LEN];
    if (len < 8 + 4 + 4 + CK_SHA256_LEN || memcmp(buf, PARTS_MAGIC, 8) ||
        ck__sha256(buf, len - CK_SHA256_LEN, digest) < 0 ||
        memcmp(digest, buf + len - CK_SHA256_LEN, CK_SHA256_LEN))
        return ck_err_set(err, -EBADMSG, "not a part file of meeting version %d, or damaged "
                          "(its digest does not match)", CK_MEET_VERSION);
    /* Two passes: the structure is checked whole before anything is handed out. */
    for (int pass = 0; pass < 2; pass++) {
        ck__rbuf r = ck__rbuf_make(buf + 8, len - 8 - CK_SHA256_LEN);
        uint32_t n = ck__get_u32(&r);
        for (uint32_t i = 0; i < n && !r.bad; i++) {
            uint32_t k = ck__get_u32(&r);
            const void *rec = ck__get_bytes(&r, k);
            int e = pass && !r.bad ? fn(arg, rec, k, NULL) : 0;
            if (e)
                return e;
        }
        uint32_t nb = ck__get_u32(&r);
        for (uint32_t i = 0; i < nb && !r.bad; i++) {
            char name[CK_NAME_MAX];
            ck__get_str(&r, name, sizeof name);
            uint64_t bl = ck__get_u64(&r);
            const void *data = bl <= r.len - r.pos ? ck__get_bytes(&r, (size_t)bl) : NULL;
            if (!data)
                r.bad = true;
            ck__meet_blob b = { .name = name, .data = data, .len = bl };
            int e = pass && !r.bad ? fn(arg, NULL, 0, &b) : 0;
            if (e)
                return e;
        }
        if (!ck__rbuf_done(&r))
            return ck_err_set(err, -EBADMSG, "a part file is truncated or has trailing bytes");
    }
    return 0;
}

/* ---- heartbeats ---- */

int ck__beat_write(const char *root, const char *id, uint64_t instance, uint64_t counter,
                   ck_err *err)
{
    char name[CK_NODE_ID_MAX + 16], buf[96];
    ck__name_engine(id, CK_ENGINE_BEAT, name, sizeof name);
    int n = snprintf(buf, sizeof buf, "ckptd beat 1 instance %" PRIu64 " counter %" PRIu64 "\n",
                     instance, counter);
    /* ck__meet_put's temporary name is ".NAME.tmp" in the same directory. */
    return ck__meet_put(root, root, name, buf, (size_t)n, false, err);
}

int ck__beat_read(const char *root, const char *id, uint64_t *instance, uint64_t *counter)
{
    char name[CK_NODE_ID_MAX + 16];
    ck__name_engine(id, CK_ENGINE_BEAT, name, sizeof name);
    int rootfd = ck__root_open(root, NULL);
    if (rootfd < 0)
        return rootfd;
    uint8_t *buf;
    size_t len;
    int r = read_all(rootfd, name, &buf, &len);
    close(rootfd);
    if (r < 0)
        return r;
    int v;
    r = sscanf((const char *)buf, "ckptd beat %d instance %" SCNu64 " counter %" SCNu64, &v,
               instance, counter) == 3 && v == 1 ? 0 : -EBADMSG;
    free(buf);
    return r;
}

void ck__beat_remove(const char *root, const char *id)
{
    char name[CK_NODE_ID_MAX + 16];
    ck__name_engine(id, CK_ENGINE_BEAT, name, sizeof name);
    int rootfd = ck__root_open(root, NULL);
    if (rootfd < 0)
        return;
    unlinkat(rootfd, name, 0);
    close(rootfd);
}
