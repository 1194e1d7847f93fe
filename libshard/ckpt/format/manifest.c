/* manifest.c - writes a checkpoint's manifest (the LMDB schema of docs/FORMAT.md). */
#include "format/manifest.h"
#include "model/grow.h"
#include "io/rootfs.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void ck__put_version(ck__wbuf *w)
{
    ck__put_u16(w, CK_FORMAT_MAJOR);
    ck__put_u16(w, CK_FORMAT_MINOR);
}

int ck__get_version(ck__rbuf *r, const char *file, const char *what, ck_err *err)
{
    uint16_t major = ck__get_u16(r), minor = ck__get_u16(r);
    if (r->bad)
        return ck_err_set(err, -EBADMSG, "%s: record %s is truncated", file, what);
    if (major != CK_FORMAT_MAJOR)
        return ck_err_set(err, -EPROTONOSUPPORT,
                          "%s: record %s has format version %u.%u; this build reads %u.x",
                          file, what, major, minor, CK_FORMAT_MAJOR);
    return 0;
}

int ck__mdb_err(int rc)
{
    switch (rc) {
    case MDB_SUCCESS:
        return 0;
    case MDB_NOTFOUND:
        return -ENOENT;
    case MDB_MAP_FULL:
    case MDB_TXN_FULL:
        return -ENOSPC;
    case MDB_INVALID:
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_VERSION_MISMATCH:
    case MDB_INCOMPATIBLE:
    case MDB_BAD_VALSIZE:
        return -EBADMSG;
    default:
        return rc < 0 ? -EIO : -rc;   /* LMDB passes errno values through */
    }
}

/* Offsets in LMDB 0.9's on-disk meta page (lmdb/mdb.c: MDB_page header, MDB_meta). */
enum {
    MDB_PAGEHDR = 16,
    META_MAGIC = MDB_PAGEHDR + 0,       /* u32 0xBEEFC0DE */
    META_VERSION = MDB_PAGEHDR + 4,     /* u32 MDB_DATA_VERSION, 1 */
    META_PSIZE = MDB_PAGEHDR + 24,      /* mm_dbs[FREE_DBI].md_pad holds the page size */
    META_LAST_PG = MDB_PAGEHDR + 120,   /* size_t mm_last_pg */
    META_TXNID = MDB_PAGEHDR + 128,     /* size_t mm_txnid */
    META_END = MDB_PAGEHDR + 136,
};

static uint64_t rd_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* The bytes in use of the LMDB file open as fd, size bytes long, as its newest meta
 * page says ((mm_last_pg + 1) pages): both meta pages read with pread and checked
 * (magic, version, a page size LMDB can have, the same in both), nothing else read.
 * -EBADMSG, naming path, for anything else. */
static int mdb_used(int fd, uint64_t size, const char *path, uint64_t *used, ck_err *err)
{
    uint8_t meta[2][META_END];
    if (size < 2 * 512 || pread(fd, meta[0], META_END, 0) != META_END ||
        rd_le(meta[0] + META_MAGIC, 4) != 0xBEEFC0DEu)
        return ck_err_set(err, -EBADMSG, "%s: not an LMDB file (%llu bytes, no LMDB meta page)",
                          path, (unsigned long long)size);
    uint64_t psize = rd_le(meta[0] + META_PSIZE, 4);
    if (psize < 512 || psize > 65536 || (psize & (psize - 1)) || size < 2 * psize ||
        pread(fd, meta[1], META_END, (off_t)psize) != META_END ||
        rd_le(meta[1] + META_MAGIC, 4) != 0xBEEFC0DEu || rd_le(meta[1] + META_PSIZE, 4) != psize)
        return ck_err_set(err, -EBADMSG, "%s: truncated or corrupt LMDB file (page size %llu, "
                          "%llu bytes)", path, (unsigned long long)psize,
                          (unsigned long long)size);
    for (int m = 0; m < 2; m++)
        if (rd_le(meta[m] + META_VERSION, 4) != 1)
            return ck_err_set(err, -EBADMSG, "%s: LMDB data version %llu in meta page %d; this "
                              "build reads version 1", path,
                              (unsigned long long)rd_le(meta[m] + META_VERSION, 4), m);
    int m = rd_le(meta[1] + META_TXNID, 8) > rd_le(meta[0] + META_TXNID, 8) ? 1 : 0;
    uint64_t last = rd_le(meta[m] + META_LAST_PG, 8);
    /* Pages 0 and 1 are the meta pages themselves; 2^48 pages is beyond any file. */
    if (last < 1 || last >= (UINT64_C(1) << 48))
        return ck_err_set(err, -EBADMSG, "%s: corrupt LMDB meta page (last page %llu)", path,
                          (unsigned long long)last);
    *used = (last + 1) * psize;
    return 0;
}

/* That the LMDB file open as fd holds all the pages its newest meta page says it uses. */
static int mdb_precheck(int fd, const char *path, ck_err *err)
{
    struct stat st;
    uint64_t used;
    if (fstat(fd, &st) < 0)
        return ck_err_set(err, -errno, "%s: %s", path, strerror(errno));
    int r = mdb_used(fd, (uint64_t)st.st_size, path, &used, err);
    if (r == 0 && used > (uint64_t)st.st_size)
        r = ck_err_set(err, -EBADMSG, "%s: truncated: its meta page uses %llu bytes, the file has "
                       "%lld", path, (unsigned long long)used, (long long)st.st_size);
    return r;
}

/* Reads [off, end) of fd into p + off: the bytes read (fewer when the file was cut
 * meanwhile: a short read, never a fault), or -errno. */
static ssize_t read_range(int fd, uint8_t *p, off_t off, off_t end)
{
    off_t at = off;
    while (at < end) {
        ssize_t n = pread(fd, p + at, (size_t)(end - at), at);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        at += n;
    }
    return (ssize_t)(at - off);
}

/* Copies the first len bytes of fd into the map p, only where fd holds data: a hole
 * (SEEK_HOLE) stays a hole in the copy and costs no memory, so a file made sparse
 * costs what it holds, not what it claims. The bytes of fd there were (fewer when the
 * file was cut meanwhile), or -errno. */
static ssize_t copy_data(int fd, uint8_t *p, size_t len)
{
    off_t at = 0, end = (off_t)len;
    while (at < end) {
        off_t d = lseek(fd, at, SEEK_DATA), h;
        if (d < 0 && errno == ENXIO)
            break;                      /* a hole to the end, or the end itself */
        if (d < 0) {                    /* a file system without SEEK_DATA: all data */
            d = at;
            h = end;
        } else if ((h = lseek(fd, d, SEEK_HOLE)) < 0) {
            h = end;
        }
        if (d >= end)
            break;
        h = h > end ? end : h;
        ssize_t got = read_range(fd, p, d, h);
        if (got < 0 || got < h - d)
            return got < 0 ? got : (ssize_t)(d + got);
        at = h;
    }
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    return (ssize_t)(st.st_size < end ? st.st_size : end);
}

int ck__mdb_copy(int fd, const char *path, const char *what, uint64_t max, bool seal, int *mem,
                 ck_err *err)
{
    *mem = -1;
    struct stat st;
    if (fstat(fd, &st) < 0)
        return ck_err_set(err, -errno, "%s: %s", path, strerror(errno));
    uint64_t size = (uint64_t)st.st_size, used = 0;
    /* The header first, from the file: nothing is copied or mapped that its meta pages
     * do not account for. */
    int r = size ? mdb_used(fd, size, path, &used, err) : 0;
    if (r < 0)
        return r;
    if (used > max)
        return ck_err_set(err, -EBADMSG, "%s: its LMDB meta page says it uses %llu bytes, more "
                          "than %s may (%llu; docs/FORMAT.md)", path, (unsigned long long)used,
                          what, (unsigned long long)max);
    if (size > used && size - used > (used > (1u << 20) ? used : (1u << 20)))
        return ck_err_set(err, -EBADMSG, "%s: %llu bytes, but its LMDB meta page says it uses "
                          "%llu: a file grown far beyond its content is refused", path,
                          (unsigned long long)size, (unsigned long long)used);
    /* A file cut short is copied as it is, for mdb_precheck to refuse. */
    size_t len = (size_t)(used < size ? used : size);
    int m = memfd_create("ck-lmdb", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (m < 0)
        return ck_err_set(err, -errno, "%s: a private copy: memfd_create: %s", path,
                          strerror(errno));
    ssize_t got = 0;
    r = ftruncate(m, (off_t)len) < 0 ? -errno : 0;
    if (r == 0 && len) {
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, m, 0);
        if (p == MAP_FAILED) {
            r = -errno;
        } else {
            got = copy_data(fd, p, len);
            munmap(p, len);
            if (got < 0)
                r = (int)got;
            else if ((size_t)got < len && ftruncate(m, got) < 0)
                r = -errno;
        }
    }
    if (r < 0) {
        close(m);
        return ck_err_set(err, r, "%s: copying it to memory: %s", path, strerror(-r));
    }
    int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL;
    if (seal && fcntl(m, F_ADD_SEALS, seals) < 0) {
        r = -errno;
        close(m);
        return ck_err_set(err, r, "%s: sealing its copy: %s", path, strerror(-r));
    }
    /* Checked again on the copy: the file may have been cut or changed meanwhile. */
    if (got > 0 && (r = mdb_precheck(m, path, err)) < 0) {
        close(m);
        return r;
    }
    *mem = m;
    return 0;
}

int ck__blob_append(ck__blob_rec **blobs, uint32_t *n, size_t *cap, const char *name,
                   const void *data, size_t len)
{
    if (ck__grow(blobs, cap, (size_t)*n + 1, sizeof **blobs) < 0)
        return -ENOMEM;
    void *copy = malloc(len ? len : 1);
    if (!copy)
        return -ENOMEM;
    memcpy(copy, data, len);
    ck__blob_rec *b = &(*blobs)[(*n)++];
    snprintf(b->name, sizeof b->name, "%s", name);
    b->data = copy;
    b->len = len;
    return 0;
}

void ck__put_mesh(ck__wbuf *w, const ck_mesh *m)
{
    ck__put_u8(w, (uint8_t)m->ndim);
    for (int d = 0; d < m->ndim; d++) {
        ck__put_u32(w, m->size[d]);
        ck__put_str(w, m->name[d]);
    }
}

bool ck__get_mesh(ck__rbuf *r, ck_mesh *m)
{
    memset(m, 0, sizeof *m);
    m->ndim = ck__get_u8(r);
    if (m->ndim < 1 || m->ndim > CK_MAX_MESH_DIMS)
        return false;
    uint64_t world = 1;
    for (int d = 0; d < m->ndim; d++) {
        m->size[d] = ck__get_u32(r);
        ck__get_str(r, m->name[d], sizeof m->name[d]);
        if (m->size[d] == 0)
            return false;
        world *= m->size[d];
        if (world > CK_MAX_WORLD)
            return false;
    }
    return !r->bad;
}

static void put_info(ck__wbuf *w, const ck_info *in)
{
    ck__put_version(w);
    ck__put_bytes(w, CK_MAGIC, 8);
    ck__put_str(w, in->name);
    ck__put_u64(w, in->step);
    ck__put_u64(w, in->time_ns);
    ck__put_mesh(w, &in->mesh);
    ck__put_u32(w, in->block_size);
    ck__put_u8(w, in->hashed);
    ck__put_u64(w, in->n_tensors);
    ck__put_u64(w, in->n_shards);
    ck__put_u32(w, in->n_files);
    ck__put_u32(w, in->n_blobs);
    ck__put_u64(w, in->data_bytes);
    ck__put_u64(w, in->tensor_bytes);
}

static void put_tensor(ck__wbuf *w, const ck_tensor *t, int mesh_ndim)
{
    ck__put_version(w);
    ck__put_u32(w, t->id);
    ck__put_u8(w, (uint8_t)t->dtype);
    ck__put_u8(w, (uint8_t)t->ndim);
    for (int d = 0; d < t->ndim; d++)
        ck__put_u64(w, t->shape[d]);
    ck__put_u8(w, (uint8_t)mesh_ndim);
    for (int d = 0; d < mesh_ndim; d++) {
        ck__put_u8(w, t->pl[d].kind);
        ck__put_u8(w, t->pl[d].dim);
    }
    ck__put_u32(w, t->n_shards);
}

static void put_shard(ck__wbuf *w, const ck_shard *s, int mesh_ndim)
{
    ck__put_version(w);
    ck__put_u8(w, (uint8_t)mesh_ndim);
    for (int d = 0; d < mesh_ndim; d++)
        ck__put_u32(w, s->coord[d]);
    ck__put_u8(w, (uint8_t)s->box.ndim);
    for (int d = 0; d < s->box.ndim; d++) {
        ck__put_u64(w, s->box.off[d]);
        ck__put_u64(w, s->box.len[d]);
    }
    ck__put_u32(w, s->n_extents);
    for (uint32_t i = 0; i < s->n_extents; i++) {
        ck__put_u32(w, s->ext[i].file);
        ck__put_u64(w, s->ext[i].off);
        ck__put_u64(w, s->ext[i].len);
    }
}

static void put_file(ck__wbuf *w, const ck_file *f)
{
    ck__put_version(w);
    ck__put_str(w, f->name);
    ck__put_u64(w, f->size);
    ck__put_u32(w, f->rank);
}

typedef struct mwriter {
    MDB_txn *txn;
    ck__wbuf val;
    const char *path;
    ck_err *err;
} mwriter;

/* Puts w's value under key in dbi and resets the buffer. */
static int mput(mwriter *mw, MDB_dbi dbi, const void *key, size_t klen)
{
    if (mw->val.oom)
        return ck_err_set(mw->err, -ENOMEM, "%s: out of memory encoding a record", mw->path);
    MDB_val k = { .mv_size = klen, .mv_data = (void *)key };
    MDB_val v = { .mv_size = mw->val.len, .mv_data = mw->val.p };
    int rc = mdb_put(mw->txn, dbi, &k, &v, MDB_NOOVERWRITE);
    mw->val.len = 0;
    if (rc == MDB_KEYEXIST)
        return ck_err_set(mw->err, -EEXIST, "%s: duplicate key %.*s", mw->path, (int)klen,
                          (const char *)key);
    if (rc != MDB_SUCCESS)
        return ck_err_set(mw->err, ck__mdb_err(rc), "%s: %s", mw->path, mdb_strerror(rc));
    return 0;
}

static int write_records(mwriter *mw, const ck__manifest *m, MDB_dbi *dbi)
{
    const ck_info *in = &m->info;
    int r;
    put_info(&mw->val, in);
    if ((r = mput(mw, dbi[0], CK_META_KEY, strlen(CK_META_KEY))) < 0)
        return r;
    for (uint64_t i = 0; i < in->n_tensors; i++) {
        put_tensor(&mw->val, &m->tensors[i], in->mesh.ndim);
        if ((r = mput(mw, dbi[1], m->tensors[i].name, strlen(m->tensors[i].name))) < 0)
            return r;
    }
    for (uint64_t i = 0; i < in->n_shards; i++) {
        const ck_shard *s = &m->shards[i];
        uint8_t key[8];
        ck__be32(key, s->tensor);
        ck__be32(key + 4, s->idx);
        put_shard(&mw->val, s, in->mesh.ndim);
        if ((r = mput(mw, dbi[2], key, sizeof key)) < 0)
            return r;
    }
    for (uint32_t f = 0; f < in->n_files; f++) {
        uint8_t key[12];
        ck__be32(key, f);
        put_file(&mw->val, &m->files[f]);
        if ((r = mput(mw, dbi[3], key, 4)) < 0)
            return r;
        if (!in->hashed || !m->hashes[f])
            continue;
        uint64_t nblocks = (m->files[f].size + in->block_size - 1) / in->block_size;
        for (uint64_t b = 0; b < nblocks; b++) {
            ck__be64(key + 4, b);
            ck__put_version(&mw->val);
            ck__put_bytes(&mw->val, m->hashes[f] + b * CK_HASH_LEN, CK_HASH_LEN);
            if ((r = mput(mw, dbi[4], key, sizeof key)) < 0)
                return r;
        }
    }
    for (uint32_t i = 0; i < in->n_blobs; i++) {
        ck__put_version(&mw->val);
        ck__put_u64(&mw->val, m->blobs[i].len);
        ck__put_bytes(&mw->val, m->blobs[i].data, m->blobs[i].len);
        if ((r = mput(mw, dbi[5], m->blobs[i].name, strlen(m->blobs[i].name))) < 0)
            return r;
    }
    return 0;
}

/* A generous upper bound of the pages the records need: LMDB's map must be at least
 * that large, and it costs only address space. */
static size_t map_size(const ck__manifest *m)
{
    const ck_info *in = &m->info;
    uint64_t bytes = 1u << 20;
    bytes += in->n_tensors * (CK_NAME_MAX + 256);
    bytes += in->n_shards * 512;
    for (uint32_t i = 0; i < in->n_shards; i++)
        bytes += (uint64_t)m->shards[i].n_extents * 24;
    for (uint32_t f = 0; f < in->n_files; f++)
        bytes += 256 + (m->files[f].size / in->block_size + 1) * 128;
    for (uint32_t i = 0; i < in->n_blobs; i++)
        bytes += m->blobs[i].len + 4096 + CK_NAME_MAX;
    return (size_t)(bytes * 4 + (64u << 20));
}

/* The manifest is created here, exclusive and never through a link, and LMDB writes
 * into that very file through /proc/self/fd (it opens by path only). Not through the
 * engine: LMDB's writes are its own, as before; the engine fsyncs it. */
static int manifest_create(int dir, const char *rel, const char *path, char *mpath,
                           struct stat *st, ck_err *err)
{
    int fd = ck__openat(dir, rel, O_RDWR | O_CREAT | O_EXCL, 0644);
    if (fd < 0)
        return ck_err_set(err, fd, "%s: %s", path,
                          fd == -EEXIST ? "something is there already (the save made no "
                                          "manifest yet): refusing to write through it"
                                        : ck__why(fd));
    int r = ck__fd_path(fd, mpath, err);
    if (r == 0 && fstat(fd, st) < 0)
        r = ck_err_set(err, -errno, "%s: %s", path, strerror(errno));
    if (r < 0) {
        close(fd);
        ck__unlinkat(dir, rel, 0);
        return r;
    }
    return fd;
}

int ck__manifest_write(ck_engine *e, int dir, const char *rel, const char *path,
                       const ck__manifest *m, ck_err *err)
{
    static const char *const names[] = { CK_DB_META, CK_DB_TENSORS, CK_DB_SHARDS,
                                         CK_DB_FILES, CK_DB_HASHES, CK_DB_BLOBS };
    int r = e->ops->step(e, "manifest");
    if (r < 0)
        return ck_err_set(err, r, "%s: writing the manifest: %s", path, strerror(-r));
    char mpath[CK_FD_PATH_MAX];
    struct stat made;
    int fd = manifest_create(dir, rel, path, mpath, &made, err);
    if (fd < 0)
        return fd;
    MDB_env *env = NULL;
    mwriter mw = { .path = path, .err = err };
    int rc = mdb_env_create(&env);
    if (rc == MDB_SUCCESS)
        rc = mdb_env_set_maxdbs(env, 8);
    if (rc == MDB_SUCCESS)
        rc = mdb_env_set_mapsize(env, map_size(m));
    /* NOLOCK: one writer and no readers until the rename publishes it; NOSYNC: the
     * fsync below, through the engine, is the durability point. */
    if (rc == MDB_SUCCESS)
        rc = mdb_env_open(env, mpath, MDB_NOSUBDIR | MDB_NOLOCK | MDB_NOSYNC, 0644);
    if (rc == MDB_SUCCESS)
        rc = mdb_txn_begin(env, NULL, 0, &mw.txn);
    if (rc != MDB_SUCCESS) {
        r = ck_err_set(err, ck__mdb_err(rc), "%s: %s", path, mdb_strerror(rc));
        goto out;
    }
    MDB_dbi dbi[6];
    for (int i = 0; i < 6; i++) {
        rc = mdb_dbi_open(mw.txn, names[i], MDB_CREATE, &dbi[i]);
        if (rc != MDB_SUCCESS) {
            r = ck_err_set(err, ck__mdb_err(rc), "%s: %s", path, mdb_strerror(rc));
            goto out;
        }
    }
    r = write_records(&mw, m, dbi);
    if (r == 0) {
        rc = mdb_txn_commit(mw.txn);
        mw.txn = NULL;
        if (rc != MDB_SUCCESS)
            r = ck_err_set(err, ck__mdb_err(rc), "%s: commit: %s", path, mdb_strerror(rc));
    }
    /* Never a checkpoint no reader would open (ck__mdb_copy's bound). */
    struct stat st;
    if (r == 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_size > CK__MANIFEST_MAX)
        r = ck_err_set(err, -EFBIG, "%s: the manifest is %lld bytes, more than readers take "
                       "(%llu): too many blocks or shards for one checkpoint (a larger "
                       "--block-size makes fewer)", path, (long long)st.st_size,
                       (unsigned long long)CK__MANIFEST_MAX);
out:
    if (mw.txn)
        mdb_txn_abort(mw.txn);
    if (env)
        mdb_env_close(env);
    close(fd);
    ck__wbuf_free(&mw.val);
    if (r == 0) {
        /* Reopened by name through the engine (which records what LMDB wrote): it must
         * still be the file made above. */
        int f = e->ops->open(e, dir, rel, O_RDONLY, 0);
        struct stat now;
        r = f < 0 ? f : fstat(f, &now) < 0 ? -errno : 0;
        if (r == 0 && (now.st_dev != made.st_dev || now.st_ino != made.st_ino))
            r = -ESTALE;
        if (r == 0)
            r = e->ops->fsync(e, f);
        if (f >= 0) {
            int c = e->ops->close(e, f);
            r = r < 0 ? r : c;
        }
        if (r < 0)
            ck_err_set(err, r, "%s: fsync: %s", path,
                       r == -ESTALE ? "it was replaced while it was written" : ck__why(r));
    }
    return r;
}
