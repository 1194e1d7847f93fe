/* reader.c - opens a checkpoint and decodes its manifest, validating every record. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/copy.h"
#include "format/reader_int.h"
#include "io/rootfs.h"
#include "format/layout.h"
#include "model/layout.h"
#include "io/engine.h"


static bool plain(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Names of both kinds; escapes says whether %XX is allowed (tensor and blob names); max
 * is the longest allowed, in bytes. */
static int check_name(const char *what, const char *name, bool escapes, size_t max,
                      ck_err *err)
{
    size_t n = strlen(name);
    if (n == 0 || n > max)
        return ck_err_set(err, -EINVAL, "%s name '%.64s%s' must be 1 to %zu bytes%s", what, name,
                          n > 64 ? "..." : "", max,
                          max < CK_NAME_MAX - 1 ? " (the files of a save add up to 21 bytes "
                                                  "to it, and a file name holds 255)" : "");
    if (name[0] == '.')
        return ck_err_set(err, -EINVAL, "%s name '%s' must not start with '.'", what, name);
    for (size_t i = 0; i < n; i++) {
        if (plain(name[i]))
            continue;
        if (escapes && name[i] == '%') {
            if (hexval(name[i + 1]) >= 0 && hexval(name[i + 2]) >= 0) {
                i += 2;
                continue;
            }
            return ck_err_set(err, -EINVAL, "%s name '%s' has a malformed escape at byte %zu "
                              "('%%' takes two uppercase hex digits)", what, name, i);
        }
        return ck_err_set(err, -EINVAL, "%s name '%s' has a character outside %s at byte %zu",
                          what, name, escapes ? "[A-Za-z0-9._-] and its escapes" :
                          "[A-Za-z0-9._-]", i);
    }
    return 0;
}

int ck_name_check(const char *what, const char *name, ck_err *err)
{
    return check_name(what, name, false, CK_CKPT_NAME_LEN, err);
}

int ck__name_check_read(const char *what, const char *name, ck_err *err)
{
    return check_name(what, name, false, CK_NAME_MAX - 1, err);
}

int ck_key_check(const char *what, const char *name, ck_err *err)
{
    return check_name(what, name, true, CK_NAME_MAX - 1, err);
}

int ck_key_encode(const char *raw, size_t raw_len, char *out, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    if (raw_len == 0)
        return -EINVAL;
    size_t at = 0;
    for (size_t i = 0; i < raw_len; i++) {
        unsigned char c = (unsigned char)raw[i];
        bool keep = plain((char)c) && !(i == 0 && c == '.');
        size_t need = keep ? 1 : 3;
        if (at + need >= len || at + need >= CK_NAME_MAX)
            return -ENAMETOOLONG;
        if (keep) {
            out[at++] = (char)c;
        } else {
            out[at++] = '%';
            out[at++] = hex[c >> 4];
            out[at++] = hex[c & 15];
        }
    }
    out[at] = '\0';
    return 0;
}

int ck_key_decode(const char *name, char *out, size_t len, size_t *out_len)
{
    size_t n = strlen(name), at = 0;
    for (size_t i = 0; i < n; i++) {
        if (at + 1 >= len)
            return -ENAMETOOLONG;
        if (name[i] != '%') {
            out[at++] = name[i];
            continue;
        }
        int hi = hexval(name[i + 1]);   /* the NUL stops a short escape */
        int lo = hi >= 0 ? hexval(name[i + 2]) : -1;
        if (lo < 0)
            return -EINVAL;
        out[at++] = (char)(hi << 4 | lo);
        i += 2;
    }
    out[at] = '\0';
    if (out_len)
        *out_len = at;
    return 0;
}

static int bad(ck_ckpt *ck, ck_err *err, const char *fmt, const char *what)
{
    return ck_err_set(err, -EBADMSG, fmt, ck->mpath, what);
}

static int decode_info(ck_ckpt *ck, const MDB_val *v, ck_err *err)
{
    ck__rbuf r = ck__rbuf_make(v->mv_data, v->mv_size);
    ck_info *in = &ck->info;
    int rc = ck__get_version(&r, ck->mpath, "meta/" CK_META_KEY, err);
    if (rc < 0)
        return rc;
    const void *magic = ck__get_bytes(&r, 8);
    if (!magic || memcmp(magic, CK_MAGIC, 8) != 0)
        return bad(ck, err, "%s: record %s lacks the magic " CK_MAGIC, "meta/" CK_META_KEY);
    in->major = CK_FORMAT_MAJOR;
    in->minor = (uint16_t)(((const uint8_t *)v->mv_data)[2] | ((const uint8_t *)v->mv_data)[3] << 8);
    ck__get_str(&r, in->name, sizeof in->name);
    in->step = ck__get_u64(&r);
    in->time_ns = ck__get_u64(&r);
    bool mesh_ok = ck__get_mesh(&r, &in->mesh);
    in->block_size = ck__get_u32(&r);
    in->hashed = ck__get_u8(&r) != 0;
    in->n_tensors = ck__get_u64(&r);
    in->n_shards = ck__get_u64(&r);
    in->n_files = ck__get_u32(&r);
    in->n_blobs = ck__get_u32(&r);
    in->data_bytes = ck__get_u64(&r);
    in->tensor_bytes = ck__get_u64(&r);
    if (!ck__rbuf_done(&r) || !mesh_ok)
        return bad(ck, err, "%s: record %s is malformed", "meta/" CK_META_KEY);
    if (in->block_size < CK_ALIGN || (in->block_size & (in->block_size - 1)))
        return bad(ck, err, "%s: record %s has a block size that is not a power of two >= 4096",
                   "meta/" CK_META_KEY);
    if (in->n_files > CK_MAX_WORLD)
        return bad(ck, err, "%s: record %s claims more data files than ranks can write",
                   "meta/" CK_META_KEY);
    return 0;
}

static int decode_file(ck_ckpt *ck, uint32_t id, const MDB_val *v, ck_file *f, ck_err *err)
{
    char what[32];
    snprintf(what, sizeof what, "files/%u", id);
    ck__rbuf r = ck__rbuf_make(v->mv_data, v->mv_size);
    int rc = ck__get_version(&r, ck->mpath, what, err);
    if (rc < 0)
        return rc;
    ck__get_str(&r, f->name, sizeof f->name);
    f->size = ck__get_u64(&r);
    f->rank = ck__get_u32(&r);
    if (!ck__rbuf_done(&r))
        return bad(ck, err, "%s: record %s is malformed", what);
    if (ck_name_check("data file", f->name, NULL) < 0)
        return ck_err_set(err, -EBADMSG, "%s: record %s names file '%s', which is not a plain "
                          "file name", ck->mpath, what, f->name);
    if (f->size % CK_ALIGN || f->size > (UINT64_C(1) << 62))
        return bad(ck, err, "%s: record %s has a size that is unaligned or absurd", what);
    return 0;
}

static int open_db(ck_ckpt *ck, const char *name, MDB_dbi *dbi, ck_err *err)
{
    int rc = mdb_dbi_open(ck->txn, name, 0, dbi);
    if (rc != MDB_SUCCESS)
        return ck_err_set(err, -EBADMSG, "%s: table '%s' is missing (%s)", ck->mpath, name,
                          mdb_strerror(rc));
    return 0;
}

static int load_files(ck_ckpt *ck, ck_err *err)
{
    uint32_t n = ck->info.n_files;
    ck->files = calloc(n ? n : 1, sizeof *ck->files);
    ck->fds = malloc((n ? n : 1) * sizeof *ck->fds);
    ck->dfds = malloc((n ? n : 1) * sizeof *ck->dfds);
    if (!ck->files || !ck->fds || !ck->dfds)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        ck->fds[i] = ck->dfds[i] = -1;
    for (uint32_t i = 0; i < n; i++) {
        uint8_t key[4];
        ck__be32(key, i);
        MDB_val k = { .mv_size = 4, .mv_data = key }, v;
        int rc = mdb_get(ck->txn, ck->db_files, &k, &v);
        if (rc != MDB_SUCCESS)
            return ck_err_set(err, -EBADMSG, "%s: record files/%u is missing", ck->mpath, i);
        int r = decode_file(ck, i, &v, &ck->files[i], err);
        if (r < 0)
            return r;
    }
    return 0;
}

/* Opens the checkpoint whose directory is dirfd and whose manifest's copy is mem (both
 * taken over, closed on failure too); dir names it. The manifest is never mapped
 * where it lies (format/manifest.h, ck__mdb_copy): a file cut short meanwhile cannot
 * fault the reader. */
static int open_at(int dirfd, int mem, const char *dir, ck_ckpt **out, ck_err *err)
{
    ck_ckpt *ck = calloc(1, sizeof *ck);
    if (!ck) {
        close(dirfd);
        close(mem);
        return -ENOMEM;
    }
    ck->dirfd = dirfd;
    ck->mem = mem;
    ck->engine = ck_engine_default();
    char mpath[CK_FD_PATH_MAX];
    int r = 0;
    if (snprintf(ck->dir, sizeof ck->dir, "%s", dir) >= (int)sizeof ck->dir ||
        snprintf(ck->mpath, sizeof ck->mpath, "%s/%s", dir, CK_MANIFEST) >= (int)sizeof ck->mpath) {
        r = ck_err_set(err, -ENAMETOOLONG, "%s: path too long", dir);
        goto fail;
    }
    if ((r = ck__fd_path(mem, mpath, err)) < 0)
        goto fail;
    int rc = mdb_env_create(&ck->env);
    if (rc == MDB_SUCCESS)
        rc = mdb_env_set_maxdbs(ck->env, 8);
    /* RDONLY + NOLOCK: reading never writes to the checkpoint, not even a lock file. */
    if (rc == MDB_SUCCESS)
        rc = mdb_env_open(ck->env, mpath, MDB_RDONLY | MDB_NOSUBDIR | MDB_NOLOCK | MDB_NOTLS,
                          0);
    if (rc == MDB_SUCCESS)
        rc = mdb_txn_begin(ck->env, NULL, MDB_RDONLY, &ck->txn);
    if (rc != MDB_SUCCESS) {
        if (rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH || rc == MDB_CORRUPTED)
            r = ck_err_set(err, -EBADMSG, "%s: not a readable LMDB manifest (%s)", ck->mpath,
                           mdb_strerror(rc));
        else
            r = ck_err_set(err, ck__mdb_err(rc), "%s: %s", ck->mpath, mdb_strerror(rc));
        goto fail;
    }
    MDB_dbi meta;
    if ((r = open_db(ck, CK_DB_META, &meta, err)) < 0 ||
        (r = open_db(ck, CK_DB_TENSORS, &ck->db_tensors, err)) < 0 ||
        (r = open_db(ck, CK_DB_SHARDS, &ck->db_shards, err)) < 0 ||
        (r = open_db(ck, CK_DB_FILES, &ck->db_files, err)) < 0 ||
        (r = open_db(ck, CK_DB_HASHES, &ck->db_hashes, err)) < 0 ||
        (r = open_db(ck, CK_DB_BLOBS, &ck->db_blobs, err)) < 0)
        goto fail;
    MDB_val k = { .mv_size = strlen(CK_META_KEY), .mv_data = CK_META_KEY }, v;
    rc = mdb_get(ck->txn, meta, &k, &v);
    if (rc != MDB_SUCCESS) {
        r = ck_err_set(err, -EBADMSG, "%s: record meta/" CK_META_KEY " is missing", ck->mpath);
        goto fail;
    }
    if ((r = decode_info(ck, &v, err)) < 0 || (r = load_files(ck, err)) < 0 ||
        (r = ck__copy_read(dirfd, dir, ck->files, ck->info.n_files, &ck->copy, &ck->held,
                           err)) < 0)
        goto fail;
    *out = ck;
    return 0;
fail:
    ck_close(ck);
    return r;
}

/* The checkpoint in the directory dirfd (taken over); dir names it. */
static int open_dirfd(int dirfd, const char *dir, ck_ckpt **out, ck_err *err)
{
    char mpath[PATH_MAX + 16];
    snprintf(mpath, sizeof mpath, "%s/%s", dir, CK_MANIFEST);
    int mem = -1, fd = ck__openat_reg(dirfd, CK_MANIFEST, O_RDONLY, 0);
    int r = fd >= 0 ? 0
            : ck_err_set(err, fd == -ENOENT || fd == -ELOOP || fd == CK_ENOTREG ? -EBADMSG : fd,
                         "%s: %s", mpath, fd == -ENOENT ? "the manifest is missing" : ck__why(fd));
    if (r == 0) {
        r = ck__mdb_copy(fd, mpath, "a manifest", CK__MANIFEST_MAX, true, &mem, err);
        close(fd);
    }
    if (r == 0 && mem >= 0) {
        struct stat st;
        if (fstat(mem, &st) == 0 && st.st_size == 0)
            r = ck_err_set(err, -EBADMSG, "%s: not an LMDB file (0 bytes)", mpath);
    }
    if (r < 0) {
        close(dirfd);
        if (mem >= 0)
            close(mem);
        return r;
    }
    return open_at(dirfd, mem, dir, out, err);
}

int ck_open_dir(const char *dir, ck_ckpt **out, ck_err *err)
{
    int fd = ck__openat(AT_FDCWD, dir, O_RDONLY | O_DIRECTORY, 0);
    if (fd < 0)
        return ck_err_set(err, fd == -ENOENT || fd == -ENOTDIR ? -EBADMSG : fd, "%s: %s", dir,
                          fd == -ENOENT ? "no such directory" : strerror(-fd));
    return open_dirfd(fd, dir, out, err);
}

int ck_open(const char *root, const char *name, ck_ckpt **out, ck_err *err)
{
    int r = ck__name_check_read("checkpoint", name, err);
    if (r < 0)
        return r;
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s/%s", root, name) >= (int)sizeof dir)
        return ck_err_set(err, -ENAMETOOLONG, "%s/%s: path too long", root, name);
    int rootfd = ck__root_open(root, err);
    if (rootfd < 0)
        return rootfd == -ENOTDIR ? -ENOENT : rootfd;
    int fd = ck__openat(rootfd, name, O_RDONLY | O_DIRECTORY, 0);
    close(rootfd);
    if (fd == -ELOOP)
        return ck_err_set(err, -EBADMSG, "%s: %s", dir, ck__why(fd));
    if (fd < 0)
        return ck_err_set(err, -ENOENT, "%s: no checkpoint named '%s'", root, name);
    return open_dirfd(fd, dir, out, err);
}

int ck__open_dup(const ck_ckpt *ck, ck_ckpt **out, ck_err *err)
{
    int dirfd = fcntl(ck->dirfd, F_DUPFD_CLOEXEC, 0);
    int mem = dirfd >= 0 ? fcntl(ck->mem, F_DUPFD_CLOEXEC, 0) : -1;
    if (mem < 0) {
        int r = -errno;
        if (dirfd >= 0)
            close(dirfd);
        return ck_err_set(err, r, "%s: %s", ck->dir, strerror(-r));
    }
    int r = open_at(dirfd, mem, ck->dir, out, err);
    if (r == 0 && ck->copies && (r = ck__copies_dup(ck, *out, err)) < 0)
        ck_close(*out);
    return r;
}

void ck_close(ck_ckpt *ck)
{
    if (!ck)
        return;
    for (uint32_t i = 0; ck->fds && ck->dfds && i < ck->info.n_files; i++) {
        if (ck->fds[i] >= 0)
            ck->engine->ops->close(ck->engine, ck->fds[i]);
        if (ck->dfds[i] >= 0)
            ck->engine->ops->close(ck->engine, ck->dfds[i]);
    }
    if (ck->vs_free)
        ck->vs_free(ck->vs);
    if (ck->txn)
        mdb_txn_abort(ck->txn);
    if (ck->env)
        mdb_env_close(ck->env);
    ck__copies_free(ck);
    close(ck->dirfd);
    close(ck->mem);
    free(ck->files);
    free(ck->held);
    free(ck->fds);
    free(ck->dfds);
    free(ck);
}

const ck_info *ck_get_info(const ck_ckpt *ck)
{
    return &ck->info;
}

const char *ck_dir(const ck_ckpt *ck)
{
    return ck->dir;
}

int ck__decode_tensor(ck_ckpt *ck, const MDB_val *k, const MDB_val *v, ck_tensor *t,
                         ck_err *err)
{
    memset(t, 0, sizeof *t);
    char what[CK_NAME_MAX + 16];
    if (k->mv_size == 0 || k->mv_size >= CK_NAME_MAX || memchr(k->mv_data, '\0', k->mv_size))
        return ck_err_set(err, -EBADMSG, "%s: a tensor key is empty, too long or holds a NUL",
                          ck->mpath);
    memcpy(t->name, k->mv_data, k->mv_size);
    snprintf(what, sizeof what, "tensors/%s", t->name);
    ck__rbuf r = ck__rbuf_make(v->mv_data, v->mv_size);
    int rc = ck__get_version(&r, ck->mpath, what, err);
    if (rc < 0)
        return rc;
    t->id = ck__get_u32(&r);
    int dtype = ck__get_u8(&r);
    t->ndim = ck__get_u8(&r);
    if (r.bad || t->ndim > CK_MAX_NDIM)
        return bad(ck, err, "%s: record %s is malformed (ndim)", what);
    for (int d = 0; d < t->ndim; d++)
        t->shape[d] = ck__get_u64(&r);
    int mesh_ndim = ck__get_u8(&r);
    if (r.bad || mesh_ndim != ck->info.mesh.ndim)
        return bad(ck, err, "%s: record %s has placements for another mesh", what);
    for (int d = 0; d < mesh_ndim; d++) {
        t->pl[d].kind = ck__get_u8(&r);
        t->pl[d].dim = ck__get_u8(&r);
    }
    t->n_shards = ck__get_u32(&r);
    if (!ck__rbuf_done(&r))
        return bad(ck, err, "%s: record %s is malformed", what);
    if (ck_dtype_size(dtype) == 0)
        return ck_err_set(err, -EBADMSG, "%s: tensor %s has unknown dtype code %d", ck->mpath,
                          t->name, dtype);
    t->dtype = (ck_dtype)dtype;
    /* A box list (1.1) says so on every mesh dim; its shape is checked as a replicated
     * tensor's, its boxes when its shards are read. */
    bool boxes = ck_tensor_is_boxes(t);
    ck_placement pl[CK_MAX_MESH_DIMS] = { { 0 } };
    for (int d = 0; d < mesh_ndim; d++) {
        if (boxes ? t->pl[d].kind != CK_BOXES || t->pl[d].dim : t->pl[d].kind > CK_SHARD)
            return ck_err_set(err, -EBADMSG, "%s: tensor %s has %s placement code %u on mesh "
                              "dim %d", ck->mpath, t->name, boxes ? "a box list and the" :
                              "unknown", t->pl[d].kind, d);
        if (!boxes)
            pl[d] = t->pl[d];
    }
    if (boxes && t->n_shards > CK_MAX_BOXES)
        return ck_err_set(err, -EBADMSG, "%s: tensor %s says it has %u boxes (at most %u)",
                          ck->mpath, t->name, t->n_shards, CK_MAX_BOXES);
    ck_err e2 = { 0 };
    if (ck__layout_check(t->name, t->ndim, t->shape, ck_dtype_size(t->dtype), &ck->info.mesh,
                         pl, &e2) < 0)
        return ck_err_set(err, -EBADMSG, "%s: %s", ck->mpath, ck_err_msg(&e2));
    return 0;
}

/* Calls rec for each record of dbi in key order; a non-zero return stops the walk. */
static int db_each(ck_ckpt *ck, MDB_dbi dbi,
                   int (*rec)(ck_ckpt *ck, const MDB_val *k, const MDB_val *v, void *arg,
                              ck_err *err),
                   void *arg, ck_err *err)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(ck->txn, dbi, &cur);
    if (rc != MDB_SUCCESS)
        return ck_err_set(err, ck__mdb_err(rc), "%s: %s", ck->mpath, mdb_strerror(rc));
    MDB_val k, v;
    int r = 0;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == MDB_SUCCESS;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
        if ((r = rec(ck, &k, &v, arg, err)) != 0)
            break;
    if (r == 0 && rc != MDB_NOTFOUND)
        r = ck_err_set(err, ck__mdb_err(rc), "%s: %s", ck->mpath, mdb_strerror(rc));
    mdb_cursor_close(cur);
    return r;
}

typedef struct tensor_walk {
    int (*fn)(const ck_tensor *t, void *arg);
    void *arg;
} tensor_walk;

static int tensor_rec(ck_ckpt *ck, const MDB_val *k, const MDB_val *v, void *arg, ck_err *err)
{
    tensor_walk *w = arg;
    ck_tensor t;
    int r = ck__decode_tensor(ck, k, v, &t, err);
    return r < 0 ? r : w->fn(&t, w->arg);
}

int ck_tensors_each(ck_ckpt *ck, int (*fn)(const ck_tensor *t, void *arg), void *arg,
                    ck_err *err)
{
    return db_each(ck, ck->db_tensors, tensor_rec, &(tensor_walk){ fn, arg }, err);
}

int ck_tensor_get(ck_ckpt *ck, const char *name, ck_tensor *out, ck_err *err)
{
    MDB_val k = { .mv_size = strlen(name), .mv_data = (void *)name }, v;
    if (k.mv_size == 0 || k.mv_size >= CK_NAME_MAX)
        return ck_err_set(err, -ENOENT, "%s: no tensor named '%.64s'", ck->dir, name);
    int rc = mdb_get(ck->txn, ck->db_tensors, &k, &v);
    if (rc == MDB_NOTFOUND)
        return ck_err_set(err, -ENOENT, "%s: no tensor named '%s'", ck->dir, name);
    if (rc != MDB_SUCCESS)
        return ck_err_set(err, ck__mdb_err(rc), "%s: %s", ck->mpath, mdb_strerror(rc));
    return ck__decode_tensor(ck, &k, &v, out, err);
}

int ck__decode_shard(ck_ckpt *ck, const ck_tensor *t, uint32_t idx, const MDB_val *v,
                        ck_shard *s, ck_err *err)
{
    char what[CK_NAME_MAX + 40];
    snprintf(what, sizeof what, "shards/%s#%u", t->name, idx);
    ck__rbuf r = ck__rbuf_make(v->mv_data, v->mv_size);
    int rc = ck__get_version(&r, ck->mpath, what, err);
    if (rc < 0)
        return rc;
    const ck_mesh *m = &ck->info.mesh;
    s->tensor = t->id;
    s->idx = idx;
    int mesh_ndim = ck__get_u8(&r);
    if (r.bad || mesh_ndim != m->ndim)
        return bad(ck, err, "%s: record %s has a coordinate for another mesh", what);
    for (int d = 0; d < m->ndim; d++) {
        s->coord[d] = ck__get_u32(&r);
        if (!r.bad && s->coord[d] >= m->size[d])
            return bad(ck, err, "%s: record %s has a mesh coordinate outside the mesh", what);
    }
    s->box.ndim = ck__get_u8(&r);
    if (r.bad || s->box.ndim != t->ndim)
        return bad(ck, err, "%s: record %s has a box of the wrong rank", what);
    for (int d = 0; d < t->ndim; d++) {
        s->box.off[d] = ck__get_u64(&r);
        s->box.len[d] = ck__get_u64(&r);
        if (s->box.off[d] > t->shape[d] || s->box.len[d] > t->shape[d] - s->box.off[d])
            return bad(ck, err, "%s: record %s has a box outside the tensor's shape", what);
    }
    s->n_extents = ck__get_u32(&r);
    /* Each extent takes 20 bytes: a count beyond what the value holds is a lie. */
    if (r.bad || s->n_extents > (r.len - r.pos) / 20)
        return bad(ck, err, "%s: record %s is truncated (extents)", what);
    uint64_t total = 0;
    for (uint32_t i = 0; i < s->n_extents; i++) {
        ck_extent *e = &s->ext[i];
        e->file = ck__get_u32(&r);
        e->off = ck__get_u64(&r);
        e->len = ck__get_u64(&r);
        if (e->file >= ck->info.n_files)
            return bad(ck, err, "%s: record %s points to a data file that does not exist", what);
        const ck_file *f = &ck->files[e->file];
        if (e->off % CK_ALIGN || e->off > f->size || e->len > f->size - e->off)
            return ck_err_set(err, -EBADMSG, "%s: record %s has an extent [%llu, +%llu) outside "
                              "%s (%llu bytes) or unaligned", ck->mpath, what,
                              (unsigned long long)e->off, (unsigned long long)e->len, f->name,
                              (unsigned long long)f->size);
        total += e->len;
    }
    if (!ck__rbuf_done(&r))
        return bad(ck, err, "%s: record %s is malformed", what);
    if (total != ck_box_numel(&s->box) * ck_dtype_size(t->dtype))
        return bad(ck, err, "%s: record %s: its extents do not hold exactly its box's bytes", what);
    return 0;
}

/* A box list's boxes must tile its tensor: anything else would leave bytes of a load
 * unwritten or let two ranks' bytes disagree. */
static int boxes_tile(ck_ckpt *ck, const ck_tensor *t, const ck_shard *sh, size_t n,
                      ck_err *err)
{
    ck_box *b = malloc((n ? n : 1) * sizeof *b);
    if (!b)
        return ck_err_set(err, -ENOMEM, "%s: out of memory", ck->mpath);
    for (size_t i = 0; i < n; i++)
        b[i] = sh[i].box;
    ck_err e2 = { 0 };
    int r = ck_boxes_check(t->name, t->ndim, t->shape, (uint32_t)n, b, &e2);
    free(b);
    if (r == -ENOMEM)
        return ck_err_set(err, r, "%s", ck_err_msg(&e2));
    return r < 0 ? ck_err_set(err, -EBADMSG, "%s: %s", ck->mpath, ck_err_msg(&e2)) : 0;
}

int ck_shards_get(ck_ckpt *ck, const ck_tensor *t, ck_shard **out, uint32_t *n, ck_err *err)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(ck->txn, ck->db_shards, &cur);
    if (rc != MDB_SUCCESS)
        return ck_err_set(err, ck__mdb_err(rc), "%s: %s", ck->mpath, mdb_strerror(rc));
    /* Pass 1 sizes the allocation (shards and all their extents), pass 2 decodes. */
    uint8_t key[8];
    ck__be32(key, t->id);
    ck__be32(key + 4, 0);
    size_t count = 0, ext_room = 0;
    MDB_val k = { .mv_size = 8, .mv_data = key }, v;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == MDB_SUCCESS;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size != 8 || ck__rd_be32(k.mv_data) != t->id)
            break;
        count++;
        ext_room += v.mv_size / 20;
    }
    ck_shard *arr = NULL;
    int r = 0;
    if (count != t->n_shards) {
        r = ck_err_set(err, -EBADMSG, "%s: tensor %s says %u shards but %zu records exist",
                       ck->mpath, t->name, t->n_shards, count);
        goto out;
    }
    arr = malloc(count * sizeof *arr + ext_room * sizeof(ck_extent) + 1);
    if (!arr) {
        r = -ENOMEM;
        goto out;
    }
    ck_extent *ext = (ck_extent *)(arr + count);
    size_t i = 0;
    k = (MDB_val){ .mv_size = 8, .mv_data = key };
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == MDB_SUCCESS && i < count;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT), i++) {
        uint32_t idx = ck__rd_be32((const uint8_t *)k.mv_data + 4);
        if (idx != i) {
            r = ck_err_set(err, -EBADMSG, "%s: tensor %s: shard %zu is missing", ck->mpath,
                           t->name, i);
            goto out;
        }
        arr[i].ext = ext;
        if ((r = ck__decode_shard(ck, t, idx, &v, &arr[i], err)) < 0)
            goto out;
        ext += arr[i].n_extents;
    }
    if (ck_tensor_is_boxes(t))
        r = boxes_tile(ck, t, arr, count, err);
out:
    mdb_cursor_close(cur);
    if (r < 0) {
        free(arr);
        return r;
    }
    *out = arr;
    *n = (uint32_t)count;
    return 0;
}

const ck_file *ck_file_get(const ck_ckpt *ck, uint32_t id)
{
    return id < ck->info.n_files ? &ck->files[id] : NULL;
}

int ck_file_path(const ck_ckpt *ck, uint32_t id, char *buf, size_t len)
{
    if (id >= ck->info.n_files)
        return -ENOENT;
    if (snprintf(buf, len, "%s/%s", ck__file_dir(ck, id), ck->files[id].name) >= (int)len)
        return -ENAMETOOLONG;
    return 0;
}

int ck_hash_get(ck_ckpt *ck, uint32_t file, uint64_t block, uint8_t out[CK_HASH_LEN],
                ck_err *err)
{
    uint8_t key[12];
    ck__be32(key, file);
    ck__be64(key + 4, block);
    MDB_val k = { .mv_size = sizeof key, .mv_data = key }, v;
    int rc = mdb_get(ck->txn, ck->db_hashes, &k, &v);
    if (rc == MDB_NOTFOUND)
        return ck_err_set(err, -ENOENT, "%s: no hash recorded for block %llu of file %u",
                          ck->mpath, (unsigned long long)block, file);
    if (rc != MDB_SUCCESS)
        return ck_err_set(err, ck__mdb_err(rc), "%s: %s", ck->mpath, mdb_strerror(rc));
    char what[48];
    snprintf(what, sizeof what, "hashes/%u/%llu", file, (unsigned long long)block);
    ck__rbuf r = ck__rbuf_make(v.mv_data, v.mv_size);
    int e = ck__get_version(&r, ck->mpath, what, err);
    if (e < 0)
        return e;
    const void *h = ck__get_bytes(&r, CK_HASH_LEN);
    if (!h || !ck__rbuf_done(&r))
        return bad(ck, err, "%s: record %s is malformed", what);
    memcpy(out, h, CK_HASH_LEN);
    return 0;
}

static int decode_blob(ck_ckpt *ck, const MDB_val *k, const MDB_val *v, char *name,
                       const void **data, size_t *len, ck_err *err)
{
    if (k->mv_size == 0 || k->mv_size >= CK_NAME_MAX || memchr(k->mv_data, '\0', k->mv_size))
        return ck_err_set(err, -EBADMSG, "%s: a blob key is empty, too long or holds a NUL",
                          ck->mpath);
    memcpy(name, k->mv_data, k->mv_size);
    name[k->mv_size] = '\0';
    char what[CK_NAME_MAX + 8];
    snprintf(what, sizeof what, "blobs/%s", name);
    ck__rbuf r = ck__rbuf_make(v->mv_data, v->mv_size);
    int rc = ck__get_version(&r, ck->mpath, what, err);
    if (rc < 0)
        return rc;
    uint64_t n = ck__get_u64(&r);
    *data = r.bad || n > CK_BLOB_MAX ? NULL : ck__get_bytes(&r, (size_t)n);
    if (!*data || !ck__rbuf_done(&r))
        return bad(ck, err, "%s: record %s is malformed", what);
    *len = (size_t)n;
    return 0;
}

typedef struct blob_walk {
    int (*fn)(const char *name, const void *data, size_t len, void *arg);
    void *arg;
} blob_walk;

static int blob_rec(ck_ckpt *ck, const MDB_val *k, const MDB_val *v, void *arg, ck_err *err)
{
    blob_walk *w = arg;
    char name[CK_NAME_MAX];
    const void *data;
    size_t len;
    int r = decode_blob(ck, k, v, name, &data, &len, err);
    return r < 0 ? r : w->fn(name, data, len, w->arg);
}

int ck_blobs_each(ck_ckpt *ck, int (*fn)(const char *name, const void *data, size_t len,
                                         void *arg), void *arg, ck_err *err)
{
    return db_each(ck, ck->db_blobs, blob_rec, &(blob_walk){ fn, arg }, err);
}

int ck_blob_get(ck_ckpt *ck, const char *name, void **data, size_t *len, ck_err *err)
{
    MDB_val k = { .mv_size = strlen(name), .mv_data = (void *)name }, v;
    if (k.mv_size == 0 || k.mv_size >= CK_NAME_MAX)
        return ck_err_set(err, -ENOENT, "%s: no blob named '%.64s'", ck->dir, name);
    int rc = mdb_get(ck->txn, ck->db_blobs, &k, &v);
    if (rc == MDB_NOTFOUND)
        return ck_err_set(err, -ENOENT, "%s: no blob named '%s'", ck->dir, name);
    if (rc != MDB_SUCCESS)
        return ck_err_set(err, ck__mdb_err(rc), "%s: %s", ck->mpath, mdb_strerror(rc));
    char nm[CK_NAME_MAX];
    const void *p;
    int r = decode_blob(ck, &k, &v, nm, &p, len, err);
    if (r < 0)
        return r;
    *data = malloc(*len ? *len : 1);
    if (!*data)
        return -ENOMEM;
    memcpy(*data, p, *len);
    return 0;
}

/* The descriptor to read file id with: O_DIRECT for aligned transfers when the file
 * system allows it (the bulk of a load, without polluting the page cache), buffered
 * for the unaligned rest. */
int ck__data_fd(ck_ckpt *ck, uint32_t id, bool direct, ck_err *err)
{
    int *slot = direct ? &ck->dfds[id] : &ck->fds[id];
    if (*slot >= 0 || *slot == NO_DIRECT)
        return *slot;
    char path[PATH_MAX];
    if (ck_file_path(ck, id, path, sizeof path) < 0)
        return ck_err_set(err, -ENAMETOOLONG, "%s: path too long", ck->dir);
    bool is_direct = false;
    const char *name = ck->files[id].name;
    if (ck->held && !ck->held[id] && ck->copies)
        return ck__copies_lack(ck, id, err);
    if (ck->held && !ck->held[id])
        return ck_err_set(err, -ENODATA, "%s: data file is not in this partial copy (from "
                          "ckptd %s; it holds %u of %u data files)", path, ck->copy.source,
                          ck->copy.files_held, ck->info.n_files);
    int dirfd = ck__file_dirfd(ck, id);
    int fd = direct ? ck__engine_open_data(ck->engine, dirfd, name, O_RDONLY, 0, &is_direct)
                    : ck__engine_open_file(ck->engine, dirfd, name, O_RDONLY, 0);
    if (fd < 0)
        return ck_err_set(err, fd == -ENOENT || fd == -ELOOP || fd == CK_ENOTREG ? -EBADMSG : fd,
                          "%s: %s", path, fd == -ENOENT ? "data file is missing" : ck__why(fd));
    if (direct && !is_direct) {
        ck->engine->ops->close(ck->engine, fd);
        return *slot = NO_DIRECT;
    }
    return *slot = fd;
}
