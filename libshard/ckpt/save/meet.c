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

#define PARTS_MAGIC "CKMEET1\0"
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
    snprintf(out, PATH_MAX, "%s/%s/%s.%s%s", root, CK_PENDING, name, token, CK_MEET_SUFFIX);
}

static int fsync_path(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int r = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return r;
}

int ck__meet_put(const char *dir, const char *name, const void *buf, size_t len,
                 bool durable, ck_err *err)
{
    char tmp[PATH_MAX + 64], path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    /* The temporary name starts with '.': no reader's prefix matches it. */
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return ck_err_set(err, -errno, "%s: %s", tmp, strerror(errno));
    const uint8_t *p = buf;
    size_t done = 0;
    int r = 0;
    while (r == 0 && done < len) {
        ssize_t n = write(fd, p + done, len - done);
        if (n < 0 && errno != EINTR)
            r = -errno;
        else if (n > 0)
            done += (size_t)n;
    }
    if (r == 0 && durable && fsync(fd) < 0)
        r = -errno;
    if (close(fd) < 0 && r == 0)
        r = -errno;
    if (r == 0 && rename(tmp, path) < 0)
        r = -errno;
    if (r == 0 && durable)
        r = fsync_path(dir);
    if (r < 0) {
        unlink(tmp);
        return ck_err_set(err, r, "%s: %s", path, strerror(-r));
    }
    return 0;
}

static int read_all(const char *path, uint8_t **out, size_t *len)
{
    /* Non-blocking and no links: a FIFO or device planted in the shared directory
     * must not hang the daemon that polls it. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    struct stat st;
    int r = fstat(fd, &st) < 0 ? -errno : 0;
    if (r == 0 && !S_ISREG(st.st_mode))
        r = -EINVAL;
    if (r == 0 && (uint64_t)st.st_size > MEET_FILE_MAX)
        r = -EFBIG;
    uint8_t *buf = r == 0 ? malloc((size_t)st.st_size + 1) : NULL;
    if (r == 0 && !buf)
        r = -ENOMEM;
    size_t done = 0;
    while (r == 0 && done < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + done, (size_t)st.st_size - done);
        if (n < 0 && errno != EINTR)
            r = -errno;
        else if (n == 0)
            break;
        else if (n > 0)
            done += (size_t)n;
    }
    close(fd);
    if (r < 0) {
        free(buf);
        return r;
    }
    buf[done] = 0;
    *out = buf;
    *len = done;
    return 0;
}

int ck__meet_each(const char *dir, const char *prefix,
                  int (*fn)(void *arg, const char *file, const uint8_t *buf, size_t len),
                  void *arg, ck_err *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return ck_err_set(err, -errno, "%s: %s", dir, strerror(errno));
    struct dirent *de;
    int r = 0;
    size_t k = strlen(prefix);
    char path[PATH_MAX + 256];
    while (r == 0 && (de = readdir(d))) {
        if (strncmp(de->d_name, prefix, k))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        uint8_t *buf;
        size_t len;
        int e = read_all(path, &buf, &len);
        if (e == -ENOENT)
            continue;       /* removed since the readdir */
        if (e < 0) {
            r = ck_err_set(err, e, "%s: %s", path, strerror(-e));
            break;
        }
        r = fn(arg, de->d_name, buf, len);
        free(buf);
    }
    closedir(d);
    return r;
}

void ck__meet_remove(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char path[PATH_MAX + 256];
    while (d && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        unlink(path);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

/* ---- the plan ---- */

static int plan_text(const ck__meet_plan *p, char *buf, size_t cap)
{
    return snprintf(buf, cap, "ckptd meeting %d\nstep %" PRIu64 "\nworld %" PRIu64
                    "\nnodes %u\ncoordinator %s\ninstance %" PRIu64 "\n", CK_MEET_VERSION,
                    p->step, p->world, p->nodes, p->coord, p->instance);
}

static int plan_parse(const char *buf, ck__meet_plan *p)
{
    int version;
    memset(p, 0, sizeof *p);
    int n = sscanf(buf, "ckptd meeting %d\nstep %" SCNu64 "\nworld %" SCNu64 "\nnodes %u\n"
                   "coordinator %63s\ninstance %" SCNu64, &version, &p->step, &p->world,
                   &p->nodes, p->coord, &p->instance);
    if (n != 6)
        return -EBADMSG;
    if (version != CK_MEET_VERSION)
        return -EPROTONOSUPPORT;
    /* Another host wrote it, and the id becomes part of a path (its heartbeat). */
    return ck__node_id_check(p->coord, NULL) < 0 ? -EBADMSG : 0;
}

int ck__meet_create(const char *root, const char *name, const char *token,
                    const ck__meet_plan *plan, ck_err *err)
{
    char dir[PATH_MAX], buf[256];
    ck__meet_dir(root, name, token, dir);
    if (mkdir(dir, 0755) < 0)
        return ck_err_set(err, -errno, "%s: %s", dir, strerror(errno));
    int n = plan_text(plan, buf, sizeof buf);
    int r = ck__meet_put(dir, "plan", buf, (size_t)n, false, err);
    if (r < 0)
        ck__meet_remove(dir);
    return r;
}

static int any_file(void *arg, const char *file, const uint8_t *buf, size_t len)
{
    (void)arg, (void)file, (void)buf, (void)len;
    return 1;
}

int ck__meet_find(const char *root, const char *name, char token[CK_TOKEN_MAX],
                  ck__meet_plan *plan, ck_err *err)
{
    char pending[PATH_MAX], dir[PATH_MAX + 256], path[PATH_MAX + 300];
    snprintf(pending, sizeof pending, "%s/%s", root, CK_PENDING);
    DIR *d = opendir(pending);
    if (!d)
        return errno == ENOENT ? 0 : ck_err_set(err, -errno, "%s: %s", pending, strerror(errno));
    size_t k = strlen(name), ks = strlen(CK_MEET_SUFFIX);
    struct dirent *de;
    int found = 0;
    while (!found && (de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n <= k + 1 + ks || strncmp(de->d_name, name, k) || de->d_name[k] != '.' ||
            strcmp(de->d_name + n - ks, CK_MEET_SUFFIX) || n - k - 1 - ks >= CK_TOKEN_MAX)
            continue;
        snprintf(dir, sizeof dir, "%s/%s", pending, de->d_name);
        snprintf(path, sizeof path, "%s/plan", dir);
        uint8_t *buf;
        size_t len;
        if (read_all(path, &buf, &len) < 0)
            continue;           /* not planned yet, or gone */
        int r = plan_parse((const char *)buf, plan);
        free(buf);
        /* A meeting that failed is an earlier attempt of the name, not ours. */
        if (r < 0 || ck__meet_each(dir, "failed.", any_file, NULL, NULL) != 0)
            continue;
        snprintf(token, CK_TOKEN_MAX, "%.*s", (int)(n - k - 1 - ks), de->d_name + k + 1);
        found = 1;
    }
    closedir(d);
    return found;
}

/* ---- join and failed records ---- */

int ck__meet_join(const char *dir, const char *id, uint64_t instance, ck_err *err)
{
    char name[CK_NODE_ID_MAX + 8], buf[64];
    snprintf(name, sizeof name, "join.%s", id);
    int n = snprintf(buf, sizeof buf, "instance %" PRIu64 "\n", instance);
    return ck__meet_put(dir, name, buf, (size_t)n, false, err);
}

int ck__meet_join_decode(const uint8_t *buf, size_t len, uint64_t *instance)
{
    (void)len;
    return sscanf((const char *)buf, "instance %" SCNu64, instance) == 1 ? 0 : -EBADMSG;
}

int ck__meet_fail(const char *dir, const char *id, int code, const char *msg, ck_err *err)
{
    char name[CK_NODE_ID_MAX + 8], buf[CK_ERR_MSG_MAX + 32];
    snprintf(name, sizeof name, "failed.%s", id);
    int n = snprintf(buf, sizeof buf, "code %d\n%s\n", code, msg);
    if (n >= (int)sizeof buf)
        n = (int)sizeof buf - 1;
    return ck__meet_put(dir, name, buf, (size_t)n, true, err);
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
    snprintf(name, sizeof name, ".ckptd.%s.beat", id);
    int n = snprintf(buf, sizeof buf, "ckptd beat 1 instance %" PRIu64 " counter %" PRIu64 "\n",
                     instance, counter);
    /* ck__meet_put's temporary name is ".NAME.tmp" in the same directory. */
    return ck__meet_put(root, name, buf, (size_t)n, false, err);
}

int ck__beat_read(const char *root, const char *id, uint64_t *instance, uint64_t *counter)
{
    char path[PATH_MAX + CK_NODE_ID_MAX + 16];
    snprintf(path, sizeof path, "%s/.ckptd.%s.beat", root, id);
    uint8_t *buf;
    size_t len;
    int r = read_all(path, &buf, &len);
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
    char path[PATH_MAX + CK_NODE_ID_MAX + 16];
    snprintf(path, sizeof path, "%s/.ckptd.%s.beat", root, id);
    unlink(path);
}
