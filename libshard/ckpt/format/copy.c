/* copy.c - the file that marks a partial copy: reading it against the manifest, writing
 * it (see format/copy.h and docs/FORMAT.md, "Copies"); what a handle holds, and, for
 * one opened through several copies (format/copies.c), which copy holds each file. */
#include "format/copy.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/reader_int.h"
#include "io/rootfs.h"
#include "format/layout.h"

#define MAGIC_LINE "libshard copy "
/* The three header lines at their longest ("files 4294967295"), with room to spare;
 * each file line is a name and its newline. */
#define HEAD_MAX 128

int ck__copy_source_check(const char *id, ck_err *err)
{
    size_t n = strnlen(id, CK_COPY_ID_MAX);
    bool ok = n > 0 && n < CK_COPY_ID_MAX && id[0] != '.';
    for (size_t i = 0; ok && i < n; i++)
        ok = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
                    id[i]) != NULL;
    if (!ok)
        return ck_err_set(err, -EINVAL, "daemon id '%.80s': 1 to %d characters of "
                          "[A-Za-z0-9._-], not starting with '.'", id, CK_COPY_ID_MAX - 1);
    return 0;
}

static int cmp_id(const void *a, const void *b, void *files)
{
    const ck_file *f = files;
    return strcmp(f[*(const uint32_t *)a].name, f[*(const uint32_t *)b].name);
}

uint32_t *ck__files_by_name(const ck_file *files, uint32_t n)
{
    uint32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids)
        return NULL;
    for (uint32_t i = 0; i < n; i++)
        ids[i] = i;
    qsort_r(ids, n, sizeof *ids, cmp_id, (void *)files);
    return ids;
}

int64_t ck__file_find(const ck_file *files, const uint32_t *by_name, uint32_t n,
                      const char *name)
{
    for (uint32_t lo = 0, hi = n; lo < hi;) {
        uint32_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, files[by_name[mid]].name);
        if (c == 0)
            return by_name[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return -1;
}

/* The next line of [*p, end) without its newline into line (cap bytes), *p moved past
 * it. -1 when there is no whole line or it does not fit. */
static int next_line(const char **p, const char *end, char *line, size_t cap)
{
    const char *nl = memchr(*p, '\n', (size_t)(end - *p));
    if (!nl || (size_t)(nl - *p) >= cap || memchr(*p, '\0', (size_t)(nl - *p)))
        return -1;
    memcpy(line, *p, (size_t)(nl - *p));
    line[nl - *p] = '\0';
    *p = nl + 1;
    return 0;
}

static int parse(const char *buf, size_t len, const char *path, const ck_file *files,
                 uint32_t n, ck_copy *copy, uint8_t *held, ck_err *err)
{
    const char *p = buf, *end = buf + len;
    char line[HEAD_MAX];
    unsigned long version;
    char *tail;
    if (next_line(&p, end, line, sizeof line) < 0 ||
        strncmp(line, MAGIC_LINE, strlen(MAGIC_LINE)) != 0)
        return ck_err_set(err, -EBADMSG, "%s: line 1 is not 'libshard copy VERSION'", path);
    version = strtoul(line + strlen(MAGIC_LINE), &tail, 10);
    if (*tail || !line[strlen(MAGIC_LINE)] || line[strlen(MAGIC_LINE)] == '-')
        return ck_err_set(err, -EBADMSG, "%s: line 1 is not 'libshard copy VERSION'", path);
    if (version != CK_COPY_VERSION)
        return ck_err_set(err, -EPROTONOSUPPORT, "%s: copy file version %lu, this build "
                          "reads version %d", path, version, CK_COPY_VERSION);
    if (next_line(&p, end, line, sizeof line) < 0 || strncmp(line, "source ", 7) != 0 ||
        ck__copy_source_check(line + 7, NULL) < 0)
        return ck_err_set(err, -EBADMSG, "%s: line 2 is not 'source ID' with a daemon id",
                          path);
    snprintf(copy->source, sizeof copy->source, "%s", line + 7);
    if (next_line(&p, end, line, sizeof line) < 0 || strncmp(line, "files ", 6) != 0 ||
        !line[6] || line[6] == '-')
        return ck_err_set(err, -EBADMSG, "%s: line 3 is not 'files N'", path);
    unsigned long long want = strtoull(line + 6, &tail, 10);
    if (*tail || want > n)
        return ck_err_set(err, -EBADMSG, "%s: line 3 says %s files; the manifest has %u",
                          path, line + 6, n);
    uint32_t *idx = ck__files_by_name(files, n);
    if (!idx)
        return ck_err_set(err, -ENOMEM, "%s: out of memory", path);
    int r = 0;
    for (unsigned long long k = 0; r == 0 && k < want; k++) {
        char name[CK_FILE_NAME_MAX];
        if (next_line(&p, end, name, sizeof name) < 0) {
            r = ck_err_set(err, -EBADMSG, "%s: line %llu: expected a data file name (the file "
                           "lists %llu)", path, k + 4, want);
            break;
        }
        int64_t id = ck__file_find(files, idx, n, name);
        if (id < 0)
            r = ck_err_set(err, -EBADMSG, "%s: line %llu names '%.64s', which is no data file "
                           "of the manifest", path, k + 4, name);
        else if (held[id])
            r = ck_err_set(err, -EBADMSG, "%s: line %llu names %s a second time", path, k + 4,
                           name);
        else
            held[id] = 1;
    }
    free(idx);
    if (r == 0 && p != end)
        r = ck_err_set(err, -EBADMSG, "%s: bytes after the %llu file names it declares", path,
                       want);
    copy->partial = true;
    copy->files_held = (uint32_t)want;
    return r;
}

int ck__copy_read(int dirfd, const char *dir, const ck_file *files, uint32_t n,
                  ck_copy *copy, uint8_t **held, ck_err *err)
{
    char path[PATH_MAX + 8];
    snprintf(path, sizeof path, "%s/%s", dir, CK_COPY_FILE);
    *held = NULL;
    *copy = (ck_copy){ .files_held = n };
    uint64_t max = HEAD_MAX + (uint64_t)n * CK_FILE_NAME_MAX;
    uint8_t *buf;
    size_t got;
    int r = ck__read_whole(dirfd, CK_COPY_FILE, max, &buf, &got);
    if (r == -ENOENT)
        return 0;
    if (r == -EFBIG)
        return ck_err_set(err, -EBADMSG, "%s: more than a copy of %u data files needs (%llu "
                          "bytes)", path, n, (unsigned long long)max);
    if (r < 0)
        return ck_err_set(err, r == -ELOOP || r == CK_ENOTREG || r == -EIO ? -EBADMSG : r,
                          "%s: %s", path, r == -EIO ? "cut short while read" : ck__why(r));
    uint8_t *h = calloc(n ? n : 1, 1);
    r = h ? parse((char *)buf, got, path, files, n, copy, h, err)
          : ck_err_set(err, -ENOMEM, "%s: out of memory", path);
    free(buf);
    if (r < 0) {
        free(h);
        *copy = (ck_copy){ .files_held = n };
        return r;
    }
    *held = h;
    return 0;
}

int ck__copy_write(int dirfd, const char *dir, const char *source, const ck_file *files,
                   const uint8_t *held, uint32_t n, ck_err *err)
{
    char path[PATH_MAX + 8];
    snprintf(path, sizeof path, "%s/%s", dir, CK_COPY_FILE);
    int r = ck__copy_source_check(source, err);
    if (r < 0)
        return r;
    uint32_t count = 0;
    for (uint32_t i = 0; i < n; i++)
        count += held[i] != 0;
    size_t cap = HEAD_MAX + (size_t)count * CK_FILE_NAME_MAX, len;
    char *buf = malloc(cap);
    if (!buf)
        return ck_err_set(err, -ENOMEM, "%s: out of memory", path);
    len = (size_t)snprintf(buf, cap, MAGIC_LINE "%d\nsource %s\nfiles %u\n", CK_COPY_VERSION,
                           source, count);
    for (uint32_t i = 0; i < n; i++)
        if (held[i])
            len += (size_t)snprintf(buf + len, cap - len, "%s\n", files[i].name);
    int fd = ck__openat(dirfd, CK_COPY_FILE, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) {
        free(buf);
        return ck_err_set(err, fd, "%s: %s", path, ck__why(fd));
    }
    for (size_t done = 0; r == 0 && done < len;) {
        ssize_t k = write(fd, buf + done, len - done);
        if (k < 0 && errno != EINTR)
            r = -errno;
        else if (k > 0)
            done += (size_t)k;
    }
    if (r == 0 && fsync(fd) < 0)
        r = -errno;
    if (close(fd) < 0 && r == 0)
        r = -errno;
    free(buf);
    return r < 0 ? ck_err_set(err, r, "%s: writing it: %s", path, strerror(-r)) : 0;
}

const ck_copy *ck_get_copy(const ck_ckpt *ck)
{
    return &ck->copy;
}

bool ck_file_held(const ck_ckpt *ck, uint32_t id)
{
    return id < ck->info.n_files && (!ck->held || ck->held[id]);
}

int ck__file_dirfd(const ck_ckpt *ck, uint32_t id)
{
    return ck->from && ck->from[id] != CK__NOWHERE ? ck->copies[ck->from[id]].fd : ck->dirfd;
}

const char *ck__file_dir(const ck_ckpt *ck, uint32_t id)
{
    return ck->from && ck->from[id] != CK__NOWHERE ? ck->copies[ck->from[id]].dir : ck->dir;
}

/* The held flags and the copy record of the union. */
void ck__copies_unite(ck_ckpt *ck)
{
    uint32_t held = 0;
    for (uint32_t f = 0; f < ck->info.n_files; f++) {
        bool h = ck->from[f] != CK__NOWHERE;
        if (ck->held)
            ck->held[f] = h;
        held += h;
    }
    ck->copy.files_held = held;
    ck->copy.partial = held < ck->info.n_files;
}

int ck__copies_dup(const ck_ckpt *src, ck_ckpt *dst, ck_err *err)
{
    uint32_t nf = src->info.n_files;
    dst->copies = calloc(src->n_copies, sizeof *dst->copies);
    dst->from = malloc((nf ? nf : 1) * sizeof *dst->from);
    if (!dst->copies || !dst->from)
        return ck_err_set(err, -ENOMEM, "%s: out of memory", src->dir);
    memcpy(dst->from, src->from, nf * sizeof *dst->from);
    dst->copies[0].fd = dst->dirfd;
    snprintf(dst->copies[0].dir, sizeof dst->copies[0].dir, "%s", src->copies[0].dir);
    dst->n_copies = 1;
    for (uint32_t i = 1; i < src->n_copies; i++) {
        dst->copies[i].fd = fcntl(src->copies[i].fd, F_DUPFD_CLOEXEC, 0);
        if (dst->copies[i].fd < 0)
            return ck_err_set(err, -errno, "%s: %s", src->copies[i].dir, strerror(errno));
        snprintf(dst->copies[i].dir, sizeof dst->copies[i].dir, "%s", src->copies[i].dir);
        dst->n_copies = i + 1;
    }
    ck__copies_unite(dst);
    return 0;
}

void ck__copies_free(ck_ckpt *ck)
{
    for (uint32_t i = 1; ck->copies && i < ck->n_copies; i++)
        close(ck->copies[i].fd);
    free(ck->copies);
    free(ck->from);
    ck->copies = NULL;
    ck->from = NULL;
    ck->n_copies = 0;
}

int ck__copies_lack(const ck_ckpt *ck, uint32_t id, ck_err *err)
{
    char list[CK_ERR_MSG_MAX / 2];
    size_t at = 0;
    list[0] = '\0';
    for (uint32_t i = 0; i < ck->n_copies && at < sizeof list; i++)
        at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", i ? ", " : "",
                               ck->copies[i].dir);
    return ck_err_set(err, -ENODATA, "checkpoint %s: data file %s is in none of the %u copies "
                      "opened (%s)", ck->info.name, ck->files[id].name, ck->n_copies, list);
}
