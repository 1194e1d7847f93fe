/* copy_in.c - writing a copy of a checkpoint from its stream, every block checked on
 * arrival, committed by rename (see ops/copy.h).
 *
 * The manifest is the truth for the rest: the declared data files must be its files
 * with its sizes, and each block of each file must have the SHA-256 it records. When it
 * arrives first, a copy is checked as it is written, against the manifest's hashes read
 * once when it is whole (32 bytes a block), and never needs a second pass over its
 * bytes. When it arrives last (a PUT, whose sender sends a node's files before its
 * save's manifest exists; decision 0204), each block's SHA-256 is kept as it arrives
 * (32 bytes a block, cut at the block size declared) and compared with the manifest's
 * at the commit: the same hashes, taken once, compared later. Such a copy takes its data
 * files in any order, each file's bytes in order (a PUT follows every file as it lands,
 * decision 0206): each file has its own place and descriptor while it is written, and
 * each checker its own place and hash in it. One check path serves both ways of receiving: K checkers on the caller's
 * threads (ck__copy_in_check), or, without them, one checker that ck__copy_in_write
 * runs itself on the bytes it wrote.
 *
 * Data files are written with O_DIRECT, as a save writes them, through one aligned
 * buffer of COPY_BUF bytes. A copy's bytes are read again by a load, which reads with
 * O_DIRECT, and an O_DIRECT read of pages that buffered writes left in the page cache
 * waits for them to be written back and dropped: after a node loss, the verified load
 * of a fetched 1 GiB file took 2.3-2.4 s after buffered writes, 0.82-0.95 s after
 * O_DIRECT ones (the whole restore 5.8 s against 4.45 s, medians of three;
 * BENCHMARKS.md, "Issue 31: restore"). A file system that refuses O_DIRECT (tmpfs) gets
 * buffered writes.
 *
 * A copy may have several writers (a drain in parts, decision 0197): the committer,
 * which holds the lock and streams the manifest first, names the files others write
 * (opts.joined) and checks at its commit that each is there, of its size; a joiner
 * (opts.join) streams its own files into the committer's directory through the same
 * write and check paths, but writes no manifest (it checks the one there against the
 * SHA-256 it was given), takes no lock, and at its end fsyncs rather than commits, or
 * removes the files it made. The committer's rename stays the only commit. When a
 * writer fails, the committer may begin the copy again under the lock it holds, in a
 * new directory, carrying over by hard link the files that were written whole
 * (opts.again, ck__copy_in_carry; decision 0199).
 */
#include "ops/copy.h"

#include <fcntl.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck/verify.h"
#include "format/copy.h"
#include "format/reader_int.h"
#include "io/engine.h"
#include "io/rootfs.h"
#include "save/commit.h"
#include "format/layout.h"

struct ck__copy_in {
    char root[PATH_MAX], name[CK_NAME_MAX], source[CK_COPY_ID_MAX];
    char pending[PATH_MAX];        /* ROOT/.pending/NAME.TOKEN */
    char token[CK_TOKEN_MAX];
    bool join;                     /* a joiner: writes into another's pending directory */
    ck_engine *e;
    int rootfd, lock, dirfd;       /* dirfd: the pending directory */
    uint64_t manifest_size, left;
    uint64_t data;                 /* the declared data files' bytes */
    EVP_MD_CTX *mf;                /* the manifest's bytes, hashed as they come; NULL:
                                    * no SHA-256 was declared for them */
    uint8_t mf_want[CK_SHA256_LEN];
    ck_file *files;                /* as declared: the n streamed, then the nj joined */
    uint32_t n, nj;
    uint32_t made;                 /* a joiner's: files[0, made) are the ones it created */
    uint32_t *ids;                 /* declared file i is the manifest's file ids[i] */
    uint32_t *jby;                 /* the joined files by name, once one is carried */
    bool mlast;                    /* the manifest comes after the data files */
    bool mdecl;                    /* its size is known: declared at begin, or since */
    uint32_t bs;                   /* the block size the data files are hashed by */
    uint32_t seq;                  /* the item being written, in stream order (item_at) */
    uint32_t item;                 /* 0: the manifest; i + 1: declared file i */
    uint64_t off;                  /* bytes of the item taken (hashed, and written or buffered) */
    int fd;                        /* the item being written */
    bool direct;                   /* fd is O_DIRECT: bytes go through buf */
    uint8_t *buf;                  /* COPY_BUF bytes, aligned for O_DIRECT */
    size_t fill;                   /* bytes in buf, which go at file offset wpos */
    uint64_t wpos;
    ck_ckpt *ck;                   /* the manifest, once whole */
    /* The manifest's hashes of the declared files' blocks, file i's from want[at[i]],
     * read once the manifest is whole; and each checker's place in the stream: the
     * caller's opts.checkers, or one that ck__copy_in_write runs (own). */
    unsigned nchk;
    bool own;
    struct ck__copy_check *chk;
    uint8_t (*want)[CK_HASH_LEN];
    uint64_t *at, nblocks;
    uint8_t (*got)[CK_HASH_LEN];   /* manifest last: each block's as it was checked */
    /* A manifest that comes last: the data files in any order. base[i]: where file i
     * begins in the stream (base[n]: the data's end); fw[i]: where its writing is;
     * fck[k * n + i]: where checker k is in it. */
    uint64_t *base;
    struct ck__copy_fw *fw;
    struct ck__copy_fck *fck;
    uint32_t begun, ended;         /* data files begun and not ended; ended */
    bool committed;
    void (*log)(void *arg, const char *msg);
    void *log_arg;
};

#define COPY_BUF (4u << 20)
#define COPY_ALIGN 4096u

typedef struct ck__copy_check {
    uint32_t seq;                  /* as ck__copy_in's, for this checker */
    uint64_t off, left;            /* left: data bytes still to take */
    uint64_t pos;                  /* stream bytes taken, in stream order */
    EVP_MD_CTX *md;
} ck__copy_check;

typedef struct ck__copy_fw {
    int fd;                        /* -1: not begun, or ended */
    bool direct;
    uint64_t off;                  /* bytes taken */
} ck__copy_fw;

typedef struct ck__copy_fck {
    uint64_t off;                  /* bytes taken */
    EVP_MD_CTX *md;                /* the block under way, while the file is */
} ck__copy_fck;

static uint64_t item_size(const ck__copy_in *c, uint32_t item)
{
    return item == 0 ? c->manifest_size : c->files[item - 1].size;
}

static const char *item_name(const ck__copy_in *c, uint32_t item)
{
    return item == 0 ? CK_MANIFEST : c->files[item - 1].name;
}

/* The item at place seq of the stream. */
static uint32_t item_at(const ck__copy_in *c, uint32_t seq)
{
    return !c->mlast ? seq : seq < c->n ? seq + 1 : 0;
}

/* Where each declared file's blocks begin among all of them (bs a block), and their
 * count: never more hashes than the largest manifest can hold. */
static int block_index(ck__copy_in *c, uint32_t bs, ck_err *err)
{
    uint64_t n = 0;
    if (!(c->at = malloc((c->n ? c->n : 1) * sizeof *c->at)))
        return ck_err_set(err, -ENOMEM, "copy of %s: out of memory", c->name);
    for (uint32_t i = 0; i < c->n; i++) {
        c->at[i] = n;
        n += (c->files[i].size + bs - 1) / bs;
        if (n > CK_COPY_MANIFEST_MAX / CK_HASH_LEN)
            return ck_err_set(err, -EBADMSG, "copy of %s: more blocks of %u bytes than a "
                              "manifest can hold the hashes of", c->name, bs);
    }
    c->nblocks = n;
    return 0;
}

/* files[0, n): the streamed files and the joined ones, each once. */
static int check_declared(const ck__copy_in_opts *o, const ck_file *files, uint32_t n,
                          ck_err *err)
{
    int r = ck_name_check("checkpoint", o->name, err);
    if (r < 0 || (r = ck__copy_source_check(o->source, err)) < 0)
        return r;
    if (o->manifest_last &&
        (o->manifest_size || o->manifest_sha256 || o->join || o->n_joined || o->again ||
         o->block_size < CK_ALIGN || o->block_size > CK_COPY_BLOCK_MAX ||
         (o->block_size & (o->block_size - 1))))
        return ck_err_set(err, -EINVAL, "copy of %s: a copy whose manifest comes last declares "
                          "a block size (a power of two, 4096 to %u; this one %u), and neither "
                          "its manifest, nor joined files, nor another attempt", o->name,
                          CK_COPY_BLOCK_MAX, o->block_size);
    if (!o->manifest_last &&
        (o->manifest_size == 0 || o->manifest_size > CK_COPY_MANIFEST_MAX))
        return ck_err_set(err, -EINVAL, "copy of %s: a manifest of %llu bytes (1 to %llu)",
                          o->name, (unsigned long long)o->manifest_size,
                          (unsigned long long)CK_COPY_MANIFEST_MAX);
    if (o->join && (o->n_joined || !o->manifest_sha256))
        return ck_err_set(err, -EINVAL, "copy of %s: a writer that joins another's copy "
                          "declares its manifest's SHA-256 and no joined files", o->name);
    /* A token ck__name_token makes: never another kind of directory of the name (a
     * meeting's, a removal's). */
    if (o->again && (o->join || o->again->join || o->again->lock < 0 || o->again->committed ||
                     strcmp(o->again->root, o->root) || strcmp(o->again->name, o->name)))
        return ck_err_set(err, -EINVAL, "copy of %s: a new attempt follows a committer's "
                          "attempt at the same copy that holds its lock", o->name);
    if (o->join && !ck__token_ok(o->join))
        return ck_err_set(err, -EINVAL, "copy of %s: '%.32s' is no pending directory's token "
                          "(12 hex digits)", o->name, o->join);
    uint32_t *idx = ck__files_by_name(files, n);
    if (!idx)
        return -ENOMEM;
    for (uint32_t i = 0; r == 0 && i < n; i++) {
        const ck_file *f = &files[idx[i]];
        if (ck_name_check("data file", f->name, NULL) < 0)
            r = ck_err_set(err, -EINVAL, "copy of %s: '%.64s' is not a plain file name",
                           o->name, f->name);
        else if (i && !strcmp(f->name, files[idx[i - 1]].name))
            r = ck_err_set(err, -EINVAL, "copy of %s: data file %s is declared twice", o->name,
                           f->name);
        else if (f->size % CK_ALIGN || f->size > (UINT64_C(1) << 62))
            r = ck_err_set(err, -EINVAL, "copy of %s: data file %s of %llu bytes (a multiple "
                           "of 4096, at most 2^62)", o->name, f->name,
                           (unsigned long long)f->size);
    }
    free(idx);
    return r;
}

static int open_seq(ck__copy_in *c, ck_err *err);
static int begin_any(ck__copy_in *c, ck_err *err);

int ck__copy_in_begin(const ck__copy_in_opts *o, ck__copy_in **out, ck_err *err)
{
    *out = NULL;
    if ((uint64_t)o->n_files + o->n_joined > CK_MAX_WORLD)
        return ck_err_set(err, -EINVAL, "copy of %s: %llu data files, more than ranks can "
                          "write", o->name, (unsigned long long)o->n_files + o->n_joined);
    ck__copy_in *c = calloc(1, sizeof *c);
    uint32_t all = o->n_files + o->n_joined;
    if (!c || !(c->files = malloc((all ? all : 1) * sizeof *c->files))) {
        if (c) {
            free(c->files);
            free(c);
        }
        return ck_err_set(err, -ENOMEM, "copy of %s: out of memory", o->name);
    }
    if (o->n_files)
        memcpy(c->files, o->files, o->n_files * sizeof *c->files);
    if (o->n_joined)
        memcpy(c->files + o->n_files, o->joined, o->n_joined * sizeof *c->files);
    int r = check_declared(o, c->files, all, err);
    if (r < 0) {
        free(c->files);
        free(c);
        return r;
    }
    c->rootfd = c->lock = c->dirfd = c->fd = -1;
    c->e = ck_engine_default();
    snprintf(c->root, sizeof c->root, "%s", o->root);
    snprintf(c->name, sizeof c->name, "%s", o->name);
    snprintf(c->source, sizeof c->source, "%s", o->source);
    c->n = o->n_files;
    c->nj = o->n_joined;
    c->join = o->join != NULL;
    c->mlast = o->manifest_last;
    c->mdecl = !c->mlast;
    c->bs = o->block_size;
    c->manifest_size = c->left = o->manifest_size;
    uint64_t data = 0;
    for (uint32_t i = 0; i < c->n; i++)
        data += c->files[i].size;
    c->left += data;
    c->data = data;
    c->log = o->log;
    c->log_arg = o->log_arg;
    *out = c;
    if (o->manifest_sha256) {
        memcpy(c->mf_want, o->manifest_sha256, sizeof c->mf_want);
        if (!(c->mf = EVP_MD_CTX_new()) || EVP_DigestInit_ex(c->mf, EVP_sha256(), NULL) != 1)
            return ck_err_set(err, -ENOMEM, "copy of %s: out of memory", c->name);
    }
    c->own = !o->checkers;
    c->nchk = c->own ? 1 : o->checkers;
    if (!(c->chk = calloc(c->nchk, sizeof *c->chk)))
        return ck_err_set(err, -ENOMEM, "copy of %s: out of memory", c->name);
    /* A copy whose manifest comes last hashes into a context per file (begin_any). */
    for (unsigned k = 0; k < c->nchk; k++) {
        c->chk[k].left = data;
        if (!c->mlast && (!(c->chk[k].md = EVP_MD_CTX_new()) ||
                          EVP_DigestInit_ex(c->chk[k].md, EVP_sha256(), NULL) != 1))
            return ck_err_set(err, -ENOMEM, "copy of %s: out of memory", c->name);
    }
    /* The hashes of the blocks to come, kept until the manifest: 32 bytes a block,
     * reserved, and touched only as the blocks arrive. */
    if (c->mlast && (r = block_index(c, c->bs, err)) == 0 &&
        !(c->got = calloc(c->nblocks ? c->nblocks : 1, sizeof *c->got)))
        r = ck_err_set(err, -ENOMEM, "copy of %s: out of memory for %llu blocks' hashes",
                       c->name, (unsigned long long)c->nblocks);
    if (r < 0)
        return r;
    if ((c->rootfd = ck__root_open_engine(c->e, c->root, err)) < 0)
        return c->rootfd;
    if (c->join) {
        /* Only a directory that is there: one its committer gave up (recovery removed
         * it) is not made again. */
        char rel[PATH_MAX];
        snprintf(c->token, sizeof c->token, "%s", o->join);
        if (ck__name_save(c->name, c->token, rel, sizeof rel) < 0 ||
            snprintf(c->pending, sizeof c->pending, "%s/%s", c->root, rel) >= PATH_MAX)
            return ck_err_set(err, -ENAMETOOLONG, "%s: path too long", c->root);
        if ((c->dirfd = ck__openat(c->rootfd, rel, O_RDONLY | O_DIRECTORY, 0)) < 0)
            return ck_err_set(err, c->dirfd, "%s (the copy of %s this writer joins): %s",
                              c->pending, c->name, ck__why(c->dirfd));
        return 0;
    }
    if (o->again) {
        /* The failed attempt's lock, held all along: no other writer of NAME came
         * between the attempts, and none committed it. */
        c->lock = o->again->lock;
        o->again->lock = -1;
        r = ck__pending_fresh(c->e, c->rootfd, c->root, c->name, c->pending, err);
    } else {
        /* A copy is no job's save: its lock names none. */
        r = ck__pending_create(c->e, c->rootfd, c->root, c->name, NULL, true, NULL, c->pending,
                               &c->lock, err);
    }
    if (r < 0)
        return r;
    snprintf(c->token, sizeof c->token, "%s", strrchr(c->pending, '/') + 1 + strlen(c->name) + 1);
    if ((c->dirfd = ck__openat(c->rootfd, ck__rel(c->root, c->pending), O_RDONLY | O_DIRECTORY,
                               0)) < 0)
        return ck_err_set(err, c->dirfd, "%s: %s", c->pending, ck__why(c->dirfd));
    return c->mlast ? begin_any(c, err) : open_seq(c, err);
}

int ck__copy_in_manifest(ck__copy_in *c, uint64_t size, const uint8_t *sha256, ck_err *err)
{
    if (!c->mlast || c->mdecl)
        return ck_err_set(err, -EPROTO, "copy of %s: its manifest is declared %s", c->name,
                          c->mlast ? "twice" : "with its stream, first");
    if (size == 0 || size > CK_COPY_MANIFEST_MAX)
        return ck_err_set(err, -EBADMSG, "copy of %s: a manifest of %llu bytes (1 to %llu)",
                          c->name, (unsigned long long)size,
                          (unsigned long long)CK_COPY_MANIFEST_MAX);
    memcpy(c->mf_want, sha256, sizeof c->mf_want);
    if (!(c->mf = EVP_MD_CTX_new()) || EVP_DigestInit_ex(c->mf, EVP_sha256(), NULL) != 1)
        return ck_err_set(err, -ENOMEM, "copy of %s: out of memory", c->name);
    c->manifest_size = size;
    c->left += size;
    c->mdecl = true;
    return 0;
}

/* The hashes the checkers compare with: every block of the declared files, from the
 * manifest (no more bytes than the manifest holds for them, which CK_COPY_MANIFEST_MAX
 * bounds). */
static int load_wants(ck__copy_in *c, ck_err *err)
{
    int rc = c->at ? 0 : block_index(c, c->bs, err);
    uint64_t n = c->nblocks;
    if (rc < 0)
        return rc;
    if (!(c->want = malloc((n ? n : 1) * sizeof *c->want)))
        return ck_err_set(err, -ENOMEM, "copy of %s: out of memory", c->name);
    for (uint32_t i = 0; i < c->n; i++)
        for (uint64_t b = 0; c->at[i] + b < (i + 1 < c->n ? c->at[i + 1] : n); b++) {
            ck_err e2 = { 0 };
            int r = ck_hash_get(c->ck, c->ids[i], b, c->want[c->at[i] + b], &e2);
            if (r < 0)
                return ck_err_set(err, r == -ENOENT ? -EBADMSG : r, "copy of %s: %s", c->name,
                                  ck_err_msg(&e2));
        }
    return 0;
}

/* A joiner's: the manifest in the directory it joins is the one its own stream carries
 * (the SHA-256 declared), so the blocks it checks are checked against what is
 * committed. */
static int joined_manifest(ck__copy_in *c, ck_err *err)
{
    uint8_t *bytes = NULL, got[CK_SHA256_LEN];
    size_t len = 0;
    int r = ck__read_whole(c->dirfd, CK_MANIFEST, CK_COPY_MANIFEST_MAX, &bytes, &len);
    if (r < 0)
        return ck_err_set(err, r, "%s/%s (the copy this writer joins): %s", c->pending,
                          CK_MANIFEST, r == -EFBIG ? "larger than any manifest" : ck__why(r));
    r = ck__sha256(bytes, len, got) < 0 ? -ENOMEM : 0;
    free(bytes);
    if (r < 0)
        return ck_err_set(err, r, "copy of %s: SHA-256 failed", c->name);
    if (CRYPTO_memcmp(got, c->mf_want, sizeof got) != 0)
        return ck_err_set(err, -EBADMSG, "%s/%s: not the manifest of the copy this writer "
                          "joins (its SHA-256 is not the one declared)", c->pending, CK_MANIFEST);
    return 0;
}

/* The manifest is whole: its bytes must be those declared, and what follows its files,
 * of its sizes. */
static int manifest_done(ck__copy_in *c, ck_err *err)
{
    uint8_t got[CK_SHA256_LEN];
    unsigned n = 0;
    if (c->mf && (EVP_DigestFinal_ex(c->mf, got, &n) != 1 || n != sizeof got))
        return ck_err_set(err, -ENOMEM, "copy of %s: hashing its manifest failed", c->name);
    /* Checked before the manifest is opened: it is the truth for every block after it. */
    if (c->mf && CRYPTO_memcmp(got, c->mf_want, sizeof got) != 0)
        return ck_err_set(err, -EBADMSG, "copy of %s: its manifest's SHA-256 is not the one "
                          "declared with it (changed on the way, or by its sender)", c->name);
    int r = c->join ? joined_manifest(c, err) : 0;
    if (r == 0)
        r = ck_open_dir(c->pending, &c->ck, err);
    if (r < 0)
        return r;
    const ck_info *in = ck_get_info(c->ck);
    if (strcmp(in->name, c->name) != 0)
        return ck_err_set(err, -EBADMSG, "copy of %s: the manifest is checkpoint %s's", c->name,
                          in->name);
    if (!in->hashed)
        return ck_err_set(err, -EINVAL, "copy of %s: it has no block hashes (saved with "
                          "--no-hash), so no copy of it can be checked", c->name);
    /* The blocks hashed before it came were cut at the size declared. */
    if (c->mlast && in->block_size != c->bs)
        return ck_err_set(err, -EBADMSG, "copy of %s: its data came in blocks of %u bytes; its "
                          "manifest's are of %u", c->name, c->bs, in->block_size);
    /* A manifest that comes first says it, before any checker reads it (the writer
     * hands them the bytes after); one that comes last found it as declared, while the
     * checkers may still be at work: it is not written again. */
    if (!c->mlast)
        c->bs = in->block_size;
    c->ids = malloc((c->n + c->nj ? c->n + c->nj : 1) * sizeof *c->ids);
    uint32_t *idx = ck__files_by_name(c->ck->files, in->n_files);
    if (!c->ids || !idx) {
        free(idx);
        return ck_err_set(err, -ENOMEM, "copy of %s: out of memory", c->name);
    }
    for (uint32_t i = 0; r == 0 && i < c->n + c->nj; i++) {
        int64_t id = ck__file_find(c->ck->files, idx, in->n_files, c->files[i].name);
        if (id < 0)
            r = ck_err_set(err, -EBADMSG, "copy of %s: data file %s is not one of its manifest's",
                           c->name, c->files[i].name);
        else if (c->ck->files[id].size != c->files[i].size)
            r = ck_err_set(err, -EBADMSG, "copy of %s: data file %s comes with %llu bytes; its "
                           "manifest records %llu", c->name, c->files[i].name,
                           (unsigned long long)c->files[i].size,
                           (unsigned long long)c->ck->files[id].size);
        else
            c->ids[i] = (uint32_t)id;
    }
    free(idx);
    return r == 0 ? load_wants(c, err) : r;
}

/* Writes len bytes at offset at of fd, file NAME of the pending directory, whole. */
static int put_all(const ck__copy_in *c, int fd, const char *name, const uint8_t *p, size_t len,
                   uint64_t at, ck_err *err)
{
    for (size_t done = 0; done < len;) {
        ssize_t k = pwrite(fd, p + done, len - done, (off_t)(at + done));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return ck_err_set(err, k < 0 ? -errno : -EIO, "%s/%s: %s", c->pending, name,
                              k < 0 ? strerror(errno) : "no progress");
        done += (size_t)k;
    }
    return 0;
}

/* The same, of the item being written in stream order. */
static int write_all(ck__copy_in *c, const uint8_t *p, size_t len, uint64_t at, ck_err *err)
{
    return put_all(c, c->fd, item_name(c, c->item), p, len, at, err);
}

/* The buffer written at its file offset; at the item's end (last) padded to the
 * alignment O_DIRECT asks, and the file cut back to its size. */
static int flush(ck__copy_in *c, bool last, ck_err *err)
{
    size_t fill = c->fill, len = fill;
    if (last && len % COPY_ALIGN) {
        len += COPY_ALIGN - len % COPY_ALIGN;
        memset(c->buf + fill, 0, len - fill);
    }
    int r = len ? write_all(c, c->buf, len, c->wpos, err) : 0;
    c->wpos += fill;
    c->fill = 0;
    if (r == 0 && len != fill && ftruncate(c->fd, (off_t)c->wpos) < 0)
        r = ck_err_set(err, -errno, "%s/%s: %s", c->pending, item_name(c, c->item),
                       strerror(errno));
    return r;
}

/* Takes len bytes of the current item: into the buffer, written whenever it fills, or
 * straight to the file: always without O_DIRECT, and with it when the buffer is empty
 * and the caller's bytes are aligned as O_DIRECT wants (a peer's DATA is received so),
 * which saves a copy of every byte. */
static int emit(ck__copy_in *c, const uint8_t *p, size_t len, ck_err *err)
{
    if (!c->direct)
        return write_all(c, p, len, c->off, err);
    if (!c->fill && (uintptr_t)p % COPY_ALIGN == 0 && len % COPY_ALIGN == 0) {
        int r = write_all(c, p, len, c->wpos, err);
        c->wpos += len;
        return r;
    }
    while (len) {
        size_t take = COPY_BUF - c->fill < len ? COPY_BUF - c->fill : len;
        memcpy(c->buf + c->fill, p, take);
        c->fill += take;
        p += take;
        len -= take;
        int r = c->fill == COPY_BUF ? flush(c, false, err) : 0;
        if (r < 0)
            return r;
    }
    return 0;
}

/* Opens a data file for writing: O_DIRECT where the file system takes it, through the
 * buffer, made at the first such file. */
static int open_item(ck__copy_in *c, const char *name)
{
    c->fd = ck__engine_open_data(c->e, c->dirfd, name, O_WRONLY | O_CREAT | O_EXCL, 0644,
                                 &c->direct);
    c->made += c->fd >= 0;
    if (c->fd >= 0 && c->direct && !c->buf &&
        posix_memalign((void **)&c->buf, COPY_ALIGN, COPY_BUF) != 0) {
        c->buf = NULL;
        close(c->fd);
        c->fd = -ENOMEM;
    }
    return c->fd;
}

/* Ends the item being written (fsynced), starts the next. */
static int next_item(ck__copy_in *c, ck_err *err)
{
    const char *name = item_name(c, c->item);
    int r = 0;
    /* A joiner keeps no manifest of its own: the directory has its committer's. */
    if (c->fd >= 0) {
        r = c->direct ? flush(c, true, err) : 0;
        if (r < 0)
            return r;
        r = fsync(c->fd) < 0 ? -errno : 0;
        if (close(c->fd) < 0 && r == 0)
            r = -errno;
        c->fd = -1;
    }
    if (r < 0)
        return ck_err_set(err, r, "%s/%s: %s", c->pending, name, strerror(-r));
    if (c->item == 0 && (r = manifest_done(c, err)) < 0)
        return r;
    if (++c->seq > c->n)
        return 0;
    return open_seq(c, err);
}

static int open_seq(ck__copy_in *c, ck_err *err)
{
    c->item = item_at(c, c->seq);
    c->off = c->wpos = 0;
    c->fill = 0;
    c->direct = false;
    const char *name = item_name(c, c->item);
    if (c->item == 0) {
        /* A joiner keeps no manifest of its own: the directory has its committer's. */
        if (c->join)
            return 0;
        c->fd = ck__openat(c->dirfd, CK_MANIFEST, O_WRONLY | O_CREAT | O_EXCL, 0644);
        return c->fd < 0 ? ck_err_set(err, c->fd, "%s/%s: %s", c->pending, name,
                                      ck__why(c->fd)) : 0;
    }
    if (open_item(c, name) < 0)
        return ck_err_set(err, c->fd, "%s/%s: %s", c->pending, name, ck__why(c->fd));
    /* Room for the whole file now: a full disk fails here, not half way through. */
    uint64_t size = item_size(c, c->item);
    if (size && fallocate(c->fd, 0, 0, (off_t)size) < 0 && errno != EOPNOTSUPP)
        return ck_err_set(err, -errno, "%s/%s: fallocate %llu bytes: %s", c->pending, name,
                          (unsigned long long)size, strerror(errno));
    return 0;
}

/* Moves past every item whose bytes are all written (empty files included); a
 * manifest that comes last is waited for until its size is declared. */
static int settle(ck__copy_in *c, ck_err *err)
{
    int r = 0;
    while (r == 0 && c->seq <= c->n && (c->item || c->mdecl) &&
           c->off == item_size(c, c->item))
        r = next_item(c, err);
    return r;
}

/* The items in stream order, len bytes of them. */
static int seq_write(ck__copy_in *c, const uint8_t *p, size_t len, ck_err *err)
{
    int r = settle(c, err);
    while (r == 0 && len) {
        uint64_t room = item_size(c, c->item) - c->off;
        size_t take = len < room ? len : (size_t)room;
        if (c->item == 0 && c->mf && EVP_DigestUpdate(c->mf, p, take) != 1)
            r = ck_err_set(err, -ENOMEM, "copy of %s: hashing its manifest failed", c->name);
        else if ((c->join && c->item == 0) || (r = emit(c, p, take, err)) == 0) {
            c->off += take;
            c->left -= take;
            r = settle(c, err);
        }
        p += take;
        len -= take;
    }
    return r;
}

/* A copy whose data files come in any order: its files' places, and its empty files
 * made at once (no bytes will begin them). The manifest, last, is opened at its first
 * byte, in stream order (seq n). */
static int begin_any(ck__copy_in *c, ck_err *err)
{
    uint32_t n = c->n;
    c->base = malloc((n + 1) * sizeof *c->base);
    c->fw = malloc((n ? n : 1) * sizeof *c->fw);
    c->fck = calloc(n ? (size_t)n * c->nchk : 1, sizeof *c->fck);
    if (!c->base || !c->fw || !c->fck)
        return ck_err_set(err, -ENOMEM, "copy of %s: out of memory", c->name);
    c->base[0] = 0;
    for (uint32_t i = 0; i < n; i++) {
        c->base[i + 1] = c->base[i] + c->files[i].size;
        c->fw[i] = (ck__copy_fw){ .fd = -1 };
        if (c->files[i].size)
            continue;
        bool direct;
        int fd = ck__engine_open_data(c->e, c->dirfd, c->files[i].name,
                                      O_WRONLY | O_CREAT | O_EXCL, 0644, &direct);
        int r = fd < 0 ? fd : fsync(fd) < 0 ? -errno : 0;
        if (fd >= 0)
            close(fd);
        if (r < 0)
            return ck_err_set(err, r, "%s/%s: %s", c->pending, c->files[i].name, ck__why(r));
        c->ended++;
    }
    c->seq = n;
    c->item = 0;
    return 0;
}

uint32_t ck__copy_file_at(const uint64_t *base, uint32_t n, uint64_t at)
{
    /* The last whose base is at or before it: an empty file's base is the next one's. */
    uint32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo + 1) / 2;
        if (base[mid] <= at)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static uint32_t file_of(const ck__copy_in *c, uint64_t at)
{
    return ck__copy_file_at(c->base, c->n, at);
}

/* len bytes of data file f at off, where its writing is (the file begun at its first
 * bytes, ended at its last), straight from the caller's buffer: with O_DIRECT while
 * the buffer and the pieces are aligned (a peer's DATA are), through the page cache
 * from the first that is not (ck__direct_fit). */
static int file_write(ck__copy_in *c, uint32_t f, uint64_t off, const uint8_t *p, size_t len,
                      ck_err *err)
{
    ck__copy_fw *w = &c->fw[f];
    const ck_file *fl = &c->files[f];
    if (off != w->off)
        return ck_err_set(err, -EPROTO, "copy of %s: %zu bytes at offset %llu of data file %s, "
                          "where %llu of it were taken (each file's bytes come in order)",
                          c->name, len, (unsigned long long)off, fl->name,
                          (unsigned long long)w->off);
    if (w->fd < 0) {
        if (c->begun == CK_COPY_BEGUN_MAX)
            return ck_err_set(err, -EPROTO, "copy of %s: data file %s begun while %u others "
                              "are (at most %u at once)", c->name, fl->name, c->begun,
                              CK_COPY_BEGUN_MAX);
        w->fd = ck__engine_open_data(c->e, c->dirfd, fl->name, O_WRONLY | O_CREAT | O_EXCL,
                                     0644, &w->direct);
        if (w->fd < 0) {
            int r = w->fd;
            w->fd = -1;
            return ck_err_set(err, r, "%s/%s: %s", c->pending, fl->name, ck__why(r));
        }
        c->begun++;
        /* Room for the whole file now: a full disk fails here, not half way through. */
        if (fallocate(w->fd, 0, 0, (off_t)fl->size) < 0 && errno != EOPNOTSUPP)
            return ck_err_set(err, -errno, "%s/%s: fallocate %llu bytes: %s", c->pending,
                              fl->name, (unsigned long long)fl->size, strerror(errno));
    }
    int r = ck__direct_fit(w->fd, &w->direct, p, len, off);
    if (r < 0)
        return ck_err_set(err, r, "%s/%s: %s", c->pending, fl->name, strerror(-r));
    if ((r = put_all(c, w->fd, fl->name, p, len, off, err)) < 0)
        return r;
    w->off += len;
    c->left -= len;
    if (w->off < fl->size)
        return 0;
    r = fsync(w->fd) < 0 ? -errno : 0;
    if (close(w->fd) < 0 && r == 0)
        r = -errno;
    w->fd = -1;
    c->begun--;
    c->ended++;
    return r < 0 ? ck_err_set(err, r, "%s/%s: %s", c->pending, fl->name, strerror(-r)) : 0;
}

/* The stream's bytes taken, in stream order (data files in any order: all of them, then
 * the manifest's). */
static uint64_t taken(const ck__copy_in *c)
{
    return c->data + c->manifest_size - c->left;
}

/* A copy whose manifest comes last: len bytes at stream offset at, each data file's at
 * its own place, the manifest's once every file ended, in order. */
static int any_write(ck__copy_in *c, uint64_t at, const uint8_t *p, size_t len, ck_err *err)
{
    int r = 0;
    for (uint64_t o = at, end = at + len; r == 0 && o < end;) {
        size_t k = (size_t)(end - o);
        if (o < c->data) {
            uint32_t f = file_of(c, o);
            k = c->base[f + 1] - o < k ? (size_t)(c->base[f + 1] - o) : k;
            r = file_write(c, f, o - c->base[f], p + (o - at), k, err);
        } else if (!c->mdecl || c->ended < c->n || o != taken(c)) {
            r = ck_err_set(err, -EPROTO, "copy of %s: bytes of its manifest at stream offset "
                           "%llu, %s", c->name, (unsigned long long)o,
                           !c->mdecl ? "before it was declared"
                           : c->ended < c->n ? "before every data file ended"
                                             : "not where its bytes taken end");
        } else {
            r = c->fd < 0 ? open_seq(c, err) : 0;
            if (r == 0)
                r = seq_write(c, p + (o - at), k, err);
        }
        o += k;
    }
    return r;
}

int ck__copy_in_write_at(ck__copy_in *c, uint64_t at, const void *buf, size_t len,
                         ck_err *err)
{
    uint64_t total = c->data + c->manifest_size;
    if (len > c->left)
        return ck_err_set(err, -EPROTO, "copy of %s: %zu bytes more than declared", c->name,
                          len - (size_t)c->left);
    if (at > total || len > total - at)
        return ck_err_set(err, -EPROTO, "copy of %s: %zu bytes at stream offset %llu, past its "
                          "%llu bytes", c->name, len, (unsigned long long)at,
                          (unsigned long long)total);
    if (!c->mlast && at != taken(c))
        return ck_err_set(err, -EPROTO, "copy of %s: bytes at stream offset %llu, where %llu "
                          "were taken (they come in order)", c->name, (unsigned long long)at,
                          (unsigned long long)taken(c));
    int r = c->mlast ? any_write(c, at, buf, len, err) : seq_write(c, buf, len, err);
    /* Without the caller's checkers the writer checks what it wrote: the manifest, if
     * these bytes ended it, is open by now. */
    return r == 0 && c->own ? ck__copy_in_check_at(c, 0, at, buf, len, err) : r;
}

int ck__copy_in_write(ck__copy_in *c, const void *buf, size_t len, ck_err *err)
{
    return ck__copy_in_write_at(c, taken(c), buf, len, err);
}

int ck__copy_in_carry(ck__copy_in *c, const ck__copy_in *again, const char *name, ck_err *err)
{
    /* The joined files by name, sorted once: a drain carries up to every file of a
     * world. */
    if (!c->join && c->nj && !c->jby && !(c->jby = ck__files_by_name(c->files + c->n, c->nj)))
        return ck_err_set(err, -ENOMEM, "copy of %s: out of memory", c->name);
    if (c->join || again->dirfd < 0 || ck__file_find(c->files + c->n, c->jby, c->nj, name) < 0)
        return ck_err_set(err, -EINVAL, "copy of %s: %.64s is no file of this attempt's "
                          "that another writer makes", c->name, name);
    /* Through the engine, as every other step of the copy: the link of a regular file
     * only, never following a link planted in the old directory (-ELOOP). */
    int r = c->e->ops->link(c->e, again->dirfd, name, c->dirfd, name);
    return r < 0 ? ck_err_set(err, r, "%s/%s, carried into %s: %s", again->pending, name,
                              c->pending, ck__why(r)) : 0;
}

const char *ck__copy_in_token(const ck__copy_in *c)
{
    return c->token;
}

uint64_t ck__copy_in_left(const ck__copy_in *c)
{
    return c->left;
}

/* Block b of declared file i does not hash to the manifest's. */
static int block_bad(const ck__copy_in *c, uint32_t i, uint64_t b, ck_err *err)
{
    uint64_t end = (b + 1) * c->bs < c->files[i].size ? (b + 1) * c->bs : c->files[i].size;
    return ck_err_set(err, -EBADMSG, "copy of %s: data file %s, block %llu (bytes %llu-%llu): "
                      "its SHA-256 is not the manifest's", c->name, c->files[i].name,
                      (unsigned long long)b, (unsigned long long)(b * c->bs),
                      (unsigned long long)end);
}

/* Checker k takes len bytes of data file f at *off (len at most what is left of it),
 * hashing into md the blocks of its share (index k modulo the checkers): each block's
 * SHA-256 is compared with the manifest's as its last byte comes, or, when the manifest
 * comes last, kept for the commit. */
static int hash_file(ck__copy_in *c, unsigned k, EVP_MD_CTX *md, uint32_t f, uint64_t *off,
                     const uint8_t *p, size_t len, ck_err *err)
{
    uint32_t bs = c->bs;
    uint64_t size = c->files[f].size;
    while (len) {
        size_t take = len;
        if (take > bs - *off % bs)
            take = (size_t)(bs - *off % bs);
        uint64_t block = *off / bs;
        bool mine = block % c->nchk == k;
        if (mine && EVP_DigestUpdate(md, p, take) != 1)
            return ck_err_set(err, -ENOMEM, "copy of %s: SHA-256 failed", c->name);
        *off += take;
        c->chk[k].left -= take;
        p += take;
        len -= take;
        if (!mine || (*off % bs && *off != size))
            continue;
        uint8_t got[EVP_MAX_MD_SIZE];
        unsigned n = 0;
        if (EVP_DigestFinal_ex(md, got, &n) != 1 || n != CK_HASH_LEN ||
            EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1)
            return ck_err_set(err, -ENOMEM, "copy of %s: SHA-256 failed", c->name);
        /* Each block is one checker's: its slot is written by that checker alone. */
        if (c->mlast)
            memcpy(c->got[c->at[f] + block], got, CK_HASH_LEN);
        else if (memcmp(got, c->want[c->at[f] + block], CK_HASH_LEN) != 0)
            return block_bad(c, f, block, err);
    }
    return 0;
}

/* Checker k, in stream order: the manifest first (nothing to hash), then the files. */
static int seq_check(ck__copy_in *c, unsigned k, const uint8_t *p, size_t len, ck_err *err)
{
    ck__copy_check *h = &c->chk[k];
    while (len) {
        if (h->seq > c->n)
            return ck_err_set(err, -EPROTO, "copy of %s: %zu bytes more than declared", c->name,
                              len);
        uint32_t item = item_at(c, h->seq);
        uint64_t room = item_size(c, item) - h->off;
        if (!room) {
            h->seq++;
            h->off = 0;
            continue;
        }
        size_t take = len < room ? len : (size_t)room;
        int r = item ? hash_file(c, k, h->md, item - 1, &h->off, p, take, err) : 0;
        if (r < 0)
            return r;
        if (!item)
            h->off += take;
        p += take;
        len -= take;
    }
    return 0;
}

int ck__copy_in_check_at(ck__copy_in *c, unsigned k, uint64_t at, const void *buf, size_t len,
                         ck_err *err)
{
    ck__copy_check *h = &c->chk[k];
    const uint8_t *p = buf;
    if (!c->mlast) {
        if (at != h->pos)
            return ck_err_set(err, -EPROTO, "copy of %s: checker %u: bytes at stream offset "
                              "%llu, where it took %llu (they come in order)", c->name, k,
                              (unsigned long long)at, (unsigned long long)h->pos);
        h->pos += len;
        return seq_check(c, k, p, len, err);
    }
    h->pos += len;
    /* Data files in any order, each in order, as the writer took them; the manifest's
     * bytes are its writer's to check. */
    while (len && at < c->data) {
        uint32_t f = file_of(c, at);
        ck__copy_fck *q = &c->fck[(size_t)k * c->n + f];
        uint64_t off = at - c->base[f], room = c->files[f].size - off;
        size_t take = len < room ? len : (size_t)room;
        if (off != q->off)
            return ck_err_set(err, -EPROTO, "copy of %s: checker %u: bytes at offset %llu of "
                              "data file %s, where it took %llu", c->name, k,
                              (unsigned long long)off, c->files[f].name,
                              (unsigned long long)q->off);
        if (!q->md && (!(q->md = EVP_MD_CTX_new()) ||
                       EVP_DigestInit_ex(q->md, EVP_sha256(), NULL) != 1))
            return ck_err_set(err, -ENOMEM, "copy of %s: out of memory", c->name);
        int r = hash_file(c, k, q->md, f, &q->off, p, take, err);
        if (r < 0)
            return r;
        if (q->off == c->files[f].size) {
            EVP_MD_CTX_free(q->md);
            q->md = NULL;
        }
        at += take;
        p += take;
        len -= take;
    }
    return 0;
}

int ck__copy_in_check(ck__copy_in *c, unsigned k, const void *buf, size_t len, ck_err *err)
{
    return ck__copy_in_check_at(c, k, c->chk[k].pos, buf, len, err);
}

typedef struct first_problem {
    char msg[CK_ERR_MSG_MAX];
    uint64_t n;
} first_problem;

static void on_problem(void *arg, const char *msg)
{
    first_problem *p = arg;
    if (p->n++ == 0)
        snprintf(p->msg, sizeof p->msg, "%s", msg);
}

/* The committer's: each file its joiners wrote is there, a regular file (no link) of
 * the manifest's size, and durable. */
static int joined_here(ck__copy_in *c, ck_err *err)
{
    for (uint32_t i = c->n; i < c->n + c->nj; i++) {
        const ck_file *f = &c->files[i];
        int fd = ck__openat_reg(c->dirfd, f->name, O_RDONLY, 0);
        if (fd < 0)
            return ck_err_set(err, fd, "%s/%s (written by another writer of the copy): %s",
                              c->pending, f->name, ck__why(fd));
        struct stat st;
        int r = fstat(fd, &st) < 0 || fsync(fd) < 0 ? -errno : 0;
        close(fd);
        if (r < 0)
            return ck_err_set(err, r, "%s/%s: %s", c->pending, f->name, strerror(-r));
        if ((uint64_t)st.st_size != f->size)
            return ck_err_set(err, -EBADMSG, "%s/%s (written by another writer of the copy): "
                              "%llu bytes, not the manifest's %llu", c->pending, f->name,
                              (unsigned long long)st.st_size, (unsigned long long)f->size);
    }
    return 0;
}

int ck__copy_in_commit(ck__copy_in *c, ck_err *err)
{
    if (c->left)
        return ck_err_set(err, -EPROTO, "copy of %s: %llu bytes of it never arrived", c->name,
                          (unsigned long long)c->left);
    if (!c->mdecl)
        return ck_err_set(err, -EPROTO, "copy of %s: its manifest never came", c->name);
    int r = settle(c, err);
    if (r < 0)
        return r;
    /* Never a block unchecked: every checker saw the whole stream. */
    for (unsigned k = 0; k < c->nchk; k++)
        if (c->chk[k].left)
            return ck_err_set(err, -EPROTO, "copy of %s: checker %u of %u has %llu bytes of "
                              "it still to check", c->name, k, c->nchk,
                              (unsigned long long)c->chk[k].left);
    /* A manifest that came last: each block's hash, taken as it arrived, against it. */
    for (uint32_t i = 0; c->mlast && i < c->n; i++)
        for (uint64_t b = c->at[i]; b < (i + 1 < c->n ? c->at[i + 1] : c->nblocks); b++)
            if (CRYPTO_memcmp(c->got[b], c->want[b], CK_HASH_LEN) != 0)
                return block_bad(c, i, b - c->at[i], err);
    if (c->join) {
        /* Its files are fsynced; their names in the directory are made durable here,
         * as the committer may be on another node of a shared file system. */
        if (fsync(c->dirfd) < 0)
            return ck_err_set(err, -errno, "%s: fsync: %s", c->pending, strerror(errno));
        c->committed = true;
        return 0;
    }
    if ((r = joined_here(c, err)) < 0)
        return r;
    const ck_info *in = ck_get_info(c->ck);
    if (c->n + c->nj < in->n_files) {
        uint8_t *held = calloc(in->n_files, 1);
        if (!held)
            return ck_err_set(err, -ENOMEM, "copy of %s: out of memory", c->name);
        for (uint32_t i = 0; i < c->n + c->nj; i++)
            held[c->ids[i]] = 1;
        r = ck__copy_write(c->dirfd, c->pending, c->source, c->ck->files, held, in->n_files, err);
        free(held);
        if (r < 0)
            return r;
    }
    /* Opened again, now as the copy it is, and checked as ckpt-verify checks (the data
     * blocks were checked on arrival): a manifest whose records do not hold together is
     * never committed. */
    ck_ckpt *ck;
    if ((r = ck_open_dir(c->pending, &ck, err)) < 0)
        return r;
    first_problem fp = { .n = 0 };
    ck_verify_result res;
    ck_verify_opts vo = { .problem = on_problem, .cb_arg = &fp };
    r = ck_verify(ck, &vo, &res, err);
    ck_info info = *ck_get_info(ck);
    ck_close(ck);
    if (r == 0 && res.problems)
        r = ck_err_set(err, -EBADMSG, "copy of %s: %s%s", c->name, fp.msg,
                       res.problems > 1 ? " (and more problems)" : "");
    if (r == 0)
        r = ck__commit_dir(c->e, c->rootfd, c->root, c->pending, &info, true, &c->committed,
                           c->log, c->log_arg, err);
    if (c->committed)
        ck__pending_unlock(c->rootfd, c->name, &c->lock);
    return r;
}

void ck__copy_in_free(ck__copy_in *c)
{
    if (!c)
        return;
    if (c->fd >= 0)
        close(c->fd);
    if (!c->committed && c->join) {
        for (uint32_t i = 0; i < c->made; i++)
            unlinkat(c->dirfd, c->files[i].name, 0);
    } else if (!c->committed && c->pending[0]) {
        if (c->dirfd >= 0)
            unlinkat(c->dirfd, CK_COPY_FILE, 0);
        ck__pending_remove(c->e, c->rootfd, c->root, c->pending, c->files, c->n + c->nj);
    }
    if (c->rootfd >= 0)
        ck__pending_unlock(c->rootfd, c->name, &c->lock);
    if (c->dirfd >= 0)
        close(c->dirfd);
    if (c->rootfd >= 0)
        close(c->rootfd);
    ck_close(c->ck);
    for (unsigned k = 0; k < c->nchk; k++)
        EVP_MD_CTX_free(c->chk[k].md);
    for (size_t i = 0; c->fck && i < (size_t)c->n * c->nchk; i++)
        EVP_MD_CTX_free(c->fck[i].md);
    for (uint32_t i = 0; c->fw && i < c->n; i++)
        if (c->fw[i].fd >= 0)
            close(c->fw[i].fd);
    free(c->fck);
    free(c->fw);
    free(c->base);
    EVP_MD_CTX_free(c->mf);
    free(c->chk);
    free(c->want);
    free(c->got);
    free(c->at);
    free(c->buf);
    free(c->ids);
    free(c->jby);
    free(c->files);
    free(c);
}
