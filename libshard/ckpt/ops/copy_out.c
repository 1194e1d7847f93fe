/* copy_out.c - reading a committed copy as its stream: the manifest file, then the data
 * files asked for, whole, or those files and the manifest last (see ops/copy.h). Nothing is checked against the hashes
 * here: the receiver checks every block, and a copy whose bytes went bad on this disk
 * fails there, naming the block.
 *
 * Data files are read with O_DIRECT where the file system takes it and the caller's
 * buffer allows it (ck__copy_out_read, ck__copy_cut_read; ck__direct_on, which the
 * drain's reads use too): a copy was written with O_DIRECT, so its bytes are not in
 * the page cache, and a buffered read pays for filling it (a copy into the
 * cache, another out, the pages charged and reclaimed) - half of a peer sender's CPU
 * time, which on a node that saves, replicates and serves at once is time taken from
 * the others (docs/decisions/0186-peer-transfer-pipeline.md).
 *
 * ck__copy_whole_in asks whether another root holds a copy's save whole: what a
 * tiered save and a daemon standing by for its drain ask of the durable root. */
#include "ops/copy.h"

#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/copy.h"
#include "format/reader_int.h"
#include "io/rootfs.h"
#include "format/layout.h"

struct ck__copy_out_state {
    ck_ckpt *ck;
    bool mlast;                    /* the manifest comes after the data files */
    uint32_t seq;                  /* the item being cut, in stream order (item_at) */
    uint64_t off;
    int mfd;                       /* the manifest's, open from the start: it is hashed then */
    int fd;                        /* the data file being cut */
    bool direct;                   /* fd is O_DIRECT (where its file system takes it) */
};

/* The item at place seq of the stream (0: the manifest; i + 1: file i). */
static uint32_t item_at(const ck__copy_out *c, uint32_t seq)
{
    return !c->st->mlast ? seq : seq < c->n_files ? seq + 1 : 0;
}

/* The SHA-256 of the manifest's bytes, which the stream's declaration carries: a read
 * of the file ahead of the stream's (a manifest is small beside its data files). */
static int hash_manifest(ck__copy_out *c, ck_err *err)
{
    struct ck__copy_out_state *st = c->st;
    size_t cap = 1u << 20;
    uint8_t *buf = malloc(cap);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    int r = buf && md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 ? 0 : -ENOMEM;
    for (uint64_t off = 0; r == 0 && off < c->manifest_size;) {
        size_t want = c->manifest_size - off < cap ? (size_t)(c->manifest_size - off) : cap;
        ssize_t got = pread(st->mfd, buf, want, (off_t)off);
        if (got <= 0)
            r = got < 0 ? -errno : -EBADMSG;      /* cut short under the reader: torn */
        else if (EVP_DigestUpdate(md, buf, (size_t)got) != 1)
            r = -ENOMEM;
        else
            off += (uint64_t)got;
    }
    unsigned n = 0;
    if (r == 0 && (EVP_DigestFinal_ex(md, c->manifest_sha256, &n) != 1 || n != CK_SHA256_LEN))
        r = -ENOMEM;
    EVP_MD_CTX_free(md);
    free(buf);
    return r == 0 ? 0 : ck_err_set(err, r, "%s/%s: hashing it: %s", st->ck->dir, CK_MANIFEST,
                                   r == -EBADMSG ? "shorter than it was a moment ago"
                                                 : strerror(-r));
}

/* Opens item (0: the manifest, into st->mfd; else a data file, into st->fd) and checks
 * it is the size it should be. */
static int open_item(ck__copy_out *c, uint32_t item, ck_err *err)
{
    struct ck__copy_out_state *st = c->st;
    const char *name = item ? c->files[item - 1].name : CK_MANIFEST;
    int fd = ck__openat_reg(st->ck->dirfd, name, O_RDONLY, 0);
    if (fd < 0)
        return ck_err_set(err, fd == -ENOENT || fd == -ELOOP || fd == CK_ENOTREG
                          ? -EBADMSG : fd, "%s/%s: %s", st->ck->dir, name,
                          fd == -ENOENT ? "missing" : ck__why(fd));
    *(item ? &st->fd : &st->mfd) = fd;
    struct stat s;
    if (fstat(fd, &s) < 0)
        return ck_err_set(err, -errno, "%s/%s: %s", st->ck->dir, name, strerror(errno));
    if (item == 0) {
        c->manifest_size = (uint64_t)s.st_size;
        return hash_manifest(c, err);
    }
    if ((uint64_t)s.st_size != c->files[item - 1].size)
        return ck_err_set(err, -EBADMSG, "%s/%s: %llu bytes, its manifest records %llu",
                          st->ck->dir, name, (unsigned long long)s.st_size,
                          (unsigned long long)c->files[item - 1].size);
    /* Set after the open, which checked the file is a regular one reached without
     * links; a file system that refuses the flag is read through the cache. */
    st->direct = ck__direct_on(fd);
    return 0;
}

/* The files to send: those named, or every file the copy holds. */
static int pick_files(ck__copy_out *c, const char *const *names, uint32_t n, ck_err *err)
{
    ck_ckpt *ck = c->st->ck;
    uint32_t all = c->info.n_files;
    c->files = malloc((names ? (n ? n : 1) : (all ? all : 1)) * sizeof *c->files);
    if (!c->files)
        return ck_err_set(err, -ENOMEM, "%s: out of memory", ck->dir);
    if (!names) {
        for (uint32_t i = 0; i < all; i++)
            if (ck_file_held(ck, i))
                c->files[c->n_files++] = ck->files[i];
        return 0;
    }
    uint32_t *idx = ck__files_by_name(ck->files, all);
    uint8_t *seen = calloc(all ? all : 1, 1);
    int r = !idx || !seen ? ck_err_set(err, -ENOMEM, "%s: out of memory", ck->dir) : 0;
    for (uint32_t i = 0; r == 0 && i < n; i++) {
        int64_t id = ck__file_find(ck->files, idx, all, names[i]);
        if (id < 0)
            r = ck_err_set(err, -ENOENT, "%s: checkpoint %s has no data file '%.64s'", ck->dir,
                           c->info.name, names[i]);
        else if (!ck_file_held(ck, (uint32_t)id))
            r = ck_err_set(err, -ENODATA, "%s: data file %s is not in this partial copy (from "
                           "ckptd %s)", ck->dir, names[i], c->copy.source);
        else if (seen[id]++)
            r = ck_err_set(err, -EINVAL, "%s: data file %s is asked for twice", ck->dir,
                           names[i]);
        else
            c->files[c->n_files++] = ck->files[id];
    }
    free(idx);
    free(seen);
    return r;
}

int ck__copy_out_open(const char *root, const char *name, const char *const *names,
                      uint32_t n, ck__copy_out **out, ck_err *err)
{
    *out = NULL;
    ck__copy_out *c = calloc(1, sizeof *c);
    if (!c || !(c->st = calloc(1, sizeof *c->st))) {
        free(c);
        return ck_err_set(err, -ENOMEM, "%s/%s: out of memory", root, name);
    }
    c->st->fd = c->st->mfd = -1;
    int r = ck_open(root, name, &c->st->ck, err);
    if (r == 0) {
        c->info = *ck_get_info(c->st->ck);
        c->copy = *ck_get_copy(c->st->ck);
        r = pick_files(c, names, n, err);
    }
    if (r == 0)
        r = open_item(c, 0, err);
    c->total = c->manifest_size;
    for (uint32_t i = 0; r == 0 && i < c->n_files; i++)
        c->total += c->files[i].size;
    if (r < 0) {
        ck__copy_out_close(c);
        return r;
    }
    *out = c;
    return 0;
}

void ck__copy_out_manifest_last(ck__copy_out *c)
{
    c->st->mlast = true;
}

int ck__copy_out_cut(ck__copy_out *c, size_t max, ck__copy_cut *k, ck_err *err)
{
    struct ck__copy_out_state *st = c->st;
    *k = (ck__copy_cut){ .fd = -1 };
    uint32_t item;
    uint64_t size;
    for (;;) {
        if (st->seq > c->n_files || !max)
            return 0;
        item = item_at(c, st->seq);
        size = item ? c->files[item - 1].size : c->manifest_size;
        int r = item && st->fd < 0 ? open_item(c, item, err) : 0;
        if (r < 0)
            return r;
        if (st->off < size)
            break;
        if (item) {
            close(st->fd);
            st->fd = -1;
        }
        st->seq++;
        st->off = 0;
        st->direct = false;
    }
    /* Its own descriptor of the item's open file (one offset-free description, so
     * several cuts of a file can be read at once; pread moves no offset). */
    k->fd = fcntl(item ? st->fd : st->mfd, F_DUPFD_CLOEXEC, 0);
    if (k->fd < 0)
        return ck_err_set(err, -errno, "%s/%s: %s", st->ck->dir,
                          item ? c->files[item - 1].name : CK_MANIFEST, strerror(errno));
    k->item = item;
    k->off = st->off;
    k->len = max < size - st->off ? max : (size_t)(size - st->off);
    k->direct = item && st->direct;
    st->off += k->len;
    return 0;
}

int ck__copy_pread(int fd, bool *direct, void *buf, size_t len, uint64_t off)
{
    int r = ck__direct_fit(fd, direct, buf, len, off);
    if (r < 0)
        return r;
    for (size_t got = 0; got < len;) {
        ssize_t n = pread(fd, (uint8_t *)buf + got, len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? -errno : -EBADMSG;
        got += (size_t)n;
    }
    return 0;
}

int ck__copy_cut_read(const ck__copy_out *c, ck__copy_cut *k, void *buf, ck_err *err)
{
    int r = ck__copy_pread(k->fd, &k->direct, buf, k->len, k->off);
    if (r < 0)
        ck_err_set(err, r, "%s/%s: %s", c->st->ck->dir,
                   k->item ? c->files[k->item - 1].name : CK_MANIFEST,
                   r == -EBADMSG ? "cut short while read" : strerror(-r));
    ck__copy_cut_drop(k);
    return r;
}

bool ck__direct_on(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl >= 0 && fcntl(fd, F_SETFL, fl | O_DIRECT) == 0;
}

int ck__direct_fit(int fd, bool *direct, const void *buf, size_t len, uint64_t off)
{
    /* Data files are multiples of the alignment, so an aligned buffer stays aligned
     * through a file; the manifest's last piece is not, and is read through the cache. */
    if (*direct && ((uintptr_t)buf % CK_COPY_OUT_ALIGN || len % CK_COPY_OUT_ALIGN ||
                    off % CK_COPY_OUT_ALIGN)) {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_DIRECT) < 0)
            return -errno;
        *direct = false;
    }
    return 0;
}

void ck__copy_cut_drop(ck__copy_cut *k)
{
    if (k->fd >= 0)
        close(k->fd);
    k->fd = -1;
}

/* The next bytes of the stream into buf, at most len, never past the end of a file:
 * *got < len at each file's end, 0 at the stream's end. */
static int copy_out_chunk(ck__copy_out *c, void *buf, size_t len, size_t *got, ck_err *err)
{
    ck__copy_cut k;
    int r = ck__copy_out_cut(c, len, &k, err);
    if (r == 0 && k.len)
        r = ck__copy_cut_read(c, &k, buf, err);
    *got = r == 0 ? k.len : 0;
    return r;
}

int ck__copy_out_read(ck__copy_out *c, void *buf, size_t len, size_t *got, ck_err *err)
{
    uint8_t *p = buf;
    *got = 0;
    while (*got < len) {
        size_t k;
        int r = copy_out_chunk(c, p + *got, len - *got, &k, err);
        if (r < 0)
            return r;
        if (!k)
            return 0;
        *got += k;
    }
    return 0;
}

void ck__copy_out_close(ck__copy_out *c)
{
    if (!c)
        return;
    if (c->st) {
        if (c->st->fd >= 0)
            close(c->st->fd);
        if (c->st->mfd >= 0)
            close(c->st->mfd);
        ck_close(c->st->ck);
        free(c->st);
    }
    free(c->files);
    free(c);
}

/* Whether ROOT/NAME is a directory: a look that costs a stat, not a checkpoint's open. */
static bool dir_in(const char *root, const char *name)
{
    struct stat st;
    int fd = ck__root_open(root, NULL);
    bool is = fd >= 0 && ck__statat(fd, name, &st) == 0 && S_ISDIR(st.st_mode);
    if (fd >= 0)
        close(fd);
    return is;
}

int ck__copy_whole_in(const char *here, const char *there, const char *name)
{
    /* Asked once a second per drain waited or stood by for, by every daemon of a save:
     * while the durable root does not hold NAME yet, two stats answer. */
    if (!dir_in(here, name))
        return -1;
    if (!dir_in(there, name))
        return 0;
    ck_ckpt *mine, *theirs;
    if (ck_open(here, name, &mine, NULL) < 0)
        return -1;
    int same = 0;
    if (ck_open(there, name, &theirs, NULL) == 0) {
        same = ck_get_info(theirs)->time_ns == ck_get_info(mine)->time_ns &&
               !ck_get_copy(theirs)->partial;
        ck_close(theirs);
    }
    ck_close(mine);
    return same;
}
