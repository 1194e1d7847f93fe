/* mf-corrupt - applies one named mutation to a checkpoint manifest, for the bad-input
 * tests (tests/ckpt/bad/). A test helper: never installed, never run on a checkpoint
 * anyone wants to keep (the tests corrupt a copy).
 *
 *   mf-corrupt MANIFEST MUTATION [TENSOR [OTHER]]
 *
 * TENSOR defaults to t1, OTHER (dup-id) to t2. Mutations:
 *   version          meta/checkpoint's major version := 2
 *   dtype            tensors/TENSOR's dtype code := 238
 *   extent-past-eof  first extent of TENSOR's first non-empty shard starts past its file
 *   extent-overflow  the same extent's length := 2^64 - off (off + len wraps to 0)
 *   file-size-absurd files/F's size := 2^64 - 4096, F the file of that same extent
 *   file-size-huge   files/F's size := 2^62, the largest size a reader accepts: the file
 *                    on disk is then far shorter than recorded
 *   box-outside      dim-0 offset of TENSOR's first non-empty shard := the tensor's dim 0
 *   dup-id           tensors/OTHER's id := tensors/TENSOR's id
 *   overlap-box      TENSOR's shard 1 moved to start half-way into shard 0 (dim 0)
 *   overlap-extent   an extent of one shard moved onto an extent of another shard in
 *                    the same data file (still inside the file)
 *   box-dup          (a box list) the record of TENSOR's second non-empty box := its
 *                    first's, extents and all: two boxes overlap, one part is a gap
 *   box-gap          (a box list) the last row of TENSOR's first box of two or more
 *                    rows dropped, with its bytes: the boxes leave a gap
 *   box-count        tensors/TENSOR's shard count := 2^31 - 1
 *
 * On a catalog (MANIFEST is then ROOT/catalog.mdb):
 *   catalog-key      a copy of the first entry's record under the key TENSOR (any
 *                    bytes: "../../etc/passwd", a newline), as a planted catalog holds
 *
 * On any LMDB file, raw (no LMDB call):
 *   meta-last-pg     the newest meta page's last page in use := TENSOR (a number):
 *                    the file then claims that many pages, whatever it holds
 *
 * On success it prints, on stdout, one line of key=value facts about what it changed
 * (tensor=, shard=, record=, file=, ...) so the test can check that the tools' messages
 * name those things, and exits 0. On any failure it exits 2 with a message.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lmdb.h>

#include "format/manifest.h"

static const char *mpath;
static MDB_env *env;
static MDB_txn *txn;
static MDB_dbi db_meta, db_tensors, db_shards, db_files;

__attribute__((noreturn, format(printf, 1, 2)))
static void die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "mf-corrupt: %s: ", mpath ? mpath : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (txn)
        mdb_txn_abort(txn);
    if (env)
        mdb_env_close(env);
    exit(2);
}

static void wr_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t rd_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* A copy of a value, to patch and put back. */
typedef struct rec {
    uint8_t *p;
    size_t len;
} rec;

static rec get(MDB_dbi dbi, const void *key, size_t klen, const char *what)
{
    MDB_val k = { .mv_size = klen, .mv_data = (void *)key }, v;
    int rc = mdb_get(txn, dbi, &k, &v);
    if (rc != MDB_SUCCESS)
        die("record %s: %s", what, mdb_strerror(rc));
    rec r = { .p = malloc(v.mv_size ? v.mv_size : 1), .len = v.mv_size };
    if (!r.p)
        die("out of memory");
    memcpy(r.p, v.mv_data, v.mv_size);
    return r;
}

static void put(MDB_dbi dbi, const void *key, size_t klen, rec *r, const char *what)
{
    MDB_val k = { .mv_size = klen, .mv_data = (void *)key };
    MDB_val v = { .mv_size = r->len, .mv_data = r->p };
    int rc = mdb_put(txn, dbi, &k, &v, 0);
    if (rc != MDB_SUCCESS)
        die("writing record %s: %s", what, mdb_strerror(rc));
    free(r->p);
    r->p = NULL;
}

/* ---- tensors ---- */

typedef struct tinfo {
    char name[CK_NAME_MAX];
    uint32_t id;
    int ndim;
    uint64_t shape[CK_MAX_NDIM];
    uint32_t n_shards;
    int dtype;
    size_t id_pos;          /* byte offsets in the value */
    size_t dtype_pos;
    size_t n_shards_pos;
} tinfo;

static tinfo tensor_info(const char *name)
{
    tinfo t = { 0 };
    snprintf(t.name, sizeof t.name, "%s", name);
    rec r = get(db_tensors, name, strlen(name), name);
    ck__rbuf b = ck__rbuf_make(r.p, r.len);
    ck__get_u16(&b), ck__get_u16(&b);
    t.id_pos = b.pos;
    t.id = ck__get_u32(&b);
    t.dtype_pos = b.pos;
    t.dtype = ck__get_u8(&b);
    t.ndim = ck__get_u8(&b);
    if (t.ndim > CK_MAX_NDIM)
        die("tensors/%s: ndim %d", name, t.ndim);
    for (int d = 0; d < t.ndim; d++)
        t.shape[d] = ck__get_u64(&b);
    int mnd = ck__get_u8(&b);
    for (int d = 0; d < mnd; d++)
        ck__get_u8(&b), ck__get_u8(&b);
    t.n_shards_pos = b.pos;
    t.n_shards = ck__get_u32(&b);
    if (!ck__rbuf_done(&b))
        die("tensors/%s does not decode (already corrupt?)", name);
    free(r.p);
    return t;
}

static const char *tensor_name_of(uint32_t id, char *buf, size_t len)
{
    MDB_cursor *cur;
    MDB_val k, v;
    if (mdb_cursor_open(txn, db_tensors, &cur) != MDB_SUCCESS)
        die("cursor on tensors");
    snprintf(buf, len, "#%u", id);
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == MDB_SUCCESS;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (v.mv_size >= 8 && rd_le((const uint8_t *)v.mv_data + 4, 4) == id) {
            snprintf(buf, len, "%.*s", (int)k.mv_size, (const char *)k.mv_data);
            break;
        }
    }
    mdb_cursor_close(cur);
    return buf;
}

/* ---- files ---- */

typedef struct finfo {
    char name[CK_FILE_NAME_MAX];
    uint64_t size;
    size_t size_pos;
} finfo;

static finfo file_info(uint32_t id)
{
    finfo f = { 0 };
    uint8_t key[4];
    char what[32];
    ck__be32(key, id);
    snprintf(what, sizeof what, "files/%u", id);
    rec r = get(db_files, key, 4, what);
    ck__rbuf b = ck__rbuf_make(r.p, r.len);
    ck__get_u16(&b), ck__get_u16(&b);
    ck__get_str(&b, f.name, sizeof f.name);
    f.size_pos = b.pos;
    f.size = ck__get_u64(&b);
    ck__get_u32(&b);
    if (!ck__rbuf_done(&b))
        die("%s does not decode (already corrupt?)", what);
    free(r.p);
    return f;
}

/* ---- shards ---- */

typedef struct sinfo {
    uint32_t tensor, idx;
    int ndim;
    uint64_t off[CK_MAX_NDIM], len[CK_MAX_NDIM];
    size_t box_pos;             /* of off[0]; len[d] at box_pos + 16 d + 8 */
    uint32_t n_ext;
    size_t ext_pos;             /* of the first extent: file u32, off u64, len u64 */
    rec r;
} sinfo;

static void shard_key(uint8_t key[8], uint32_t tensor, uint32_t idx)
{
    ck__be32(key, tensor);
    ck__be32(key + 4, idx);
}

static sinfo shard_info(uint32_t tensor, uint32_t idx)
{
    sinfo s = { .tensor = tensor, .idx = idx };
    uint8_t key[8];
    char what[48];
    shard_key(key, tensor, idx);
    snprintf(what, sizeof what, "shards/%u#%u", tensor, idx);
    s.r = get(db_shards, key, 8, what);
    ck__rbuf b = ck__rbuf_make(s.r.p, s.r.len);
    ck__get_u16(&b), ck__get_u16(&b);
    int mnd = ck__get_u8(&b);
    for (int d = 0; d < mnd; d++)
        ck__get_u32(&b);
    s.ndim = ck__get_u8(&b);
    if (s.ndim > CK_MAX_NDIM)
        die("%s: box ndim %d", what, s.ndim);
    s.box_pos = b.pos;
    for (int d = 0; d < s.ndim; d++) {
        s.off[d] = ck__get_u64(&b);
        s.len[d] = ck__get_u64(&b);
    }
    s.n_ext = ck__get_u32(&b);
    s.ext_pos = b.pos;
    for (uint32_t i = 0; i < s.n_ext && !b.bad; i++)
        ck__get_u32(&b), ck__get_u64(&b), ck__get_u64(&b);
    if (!ck__rbuf_done(&b))
        die("%s does not decode (already corrupt?)", what);
    return s;
}

static void shard_put(sinfo *s)
{
    uint8_t key[8];
    shard_key(key, s->tensor, s->idx);
    put(db_shards, key, 8, &s->r, "shard");
}

static uint32_t ext_file(const sinfo *s, uint32_t i) { return (uint32_t)rd_le(s->r.p + s->ext_pos + 20 * i, 4); }
static uint64_t ext_off(const sinfo *s, uint32_t i) { return rd_le(s->r.p + s->ext_pos + 20 * i + 4, 8); }
static uint64_t ext_len(const sinfo *s, uint32_t i) { return rd_le(s->r.p + s->ext_pos + 20 * i + 12, 8); }
static void set_ext_off(sinfo *s, uint32_t i, uint64_t v) { wr_le(s->r.p + s->ext_pos + 20 * i + 4, v, 8); }
static void set_ext_len(sinfo *s, uint32_t i, uint64_t v) { wr_le(s->r.p + s->ext_pos + 20 * i + 12, v, 8); }

/* The first shard of t that has bytes. */
static sinfo first_nonempty(const tinfo *t)
{
    for (uint32_t i = 0; i < t->n_shards; i++) {
        sinfo s = shard_info(t->id, i);
        if (s.n_ext > 0 && s.ndim > 0 && s.len[0] > 0)
            return s;
        free(s.r.p);
    }
    die("tensor %s has no non-empty shard", t->name);
}

/* ---- mutations ---- */

static void m_version(void)
{
    rec r = get(db_meta, CK_META_KEY, strlen(CK_META_KEY), "meta/" CK_META_KEY);
    if (r.len < 4)
        die("meta/" CK_META_KEY " is too short");
    unsigned minor = (unsigned)rd_le(r.p + 2, 2);
    wr_le(r.p, 2, 2);
    put(db_meta, CK_META_KEY, strlen(CK_META_KEY), &r, "meta/" CK_META_KEY);
    printf("record=meta/%s found=2.%u readable=%u.x\n", CK_META_KEY, minor, CK_FORMAT_MAJOR);
}

static void m_dtype(const char *tensor)
{
    tinfo t = tensor_info(tensor);
    rec r = get(db_tensors, tensor, strlen(tensor), tensor);
    r.p[t.dtype_pos] = 238;
    put(db_tensors, tensor, strlen(tensor), &r, tensor);
    printf("tensor=%s record=tensors/%s dtype=238\n", tensor, tensor);
}

static void m_extent(const char *tensor, const char *how)
{
    tinfo t = tensor_info(tensor);
    sinfo s = first_nonempty(&t);
    uint32_t fid = ext_file(&s, 0);
    finfo f = file_info(fid);
    uint64_t off = ext_off(&s, 0);
    if (!strcmp(how, "extent-past-eof")) {
        set_ext_off(&s, 0, f.size + CK_ALIGN);
    } else if (!strcmp(how, "extent-overflow")) {
        if (off == 0) {
            off = CK_ALIGN;   /* inside the file: every written file holds >= 4 KiB */
            set_ext_off(&s, 0, off);
        }
        set_ext_len(&s, 0, (uint64_t)0 - off);   /* off + len == 2^64 == 0 */
    } else {   /* file-size-absurd, file-size-huge */
        free(s.r.p);
        uint8_t key[4];
        ck__be32(key, fid);
        rec r = get(db_files, key, 4, "files");
        wr_le(r.p + f.size_pos, !strcmp(how, "file-size-huge") ? UINT64_C(1) << 62
                                                               : UINT64_MAX - (CK_ALIGN - 1), 8);
        put(db_files, key, 4, &r, "files");
        printf("record=files/%u file=%s tensor=%s\n", fid, f.name, tensor);
        return;
    }
    shard_put(&s);
    printf("tensor=%s shard=%u record=shards/%s#%u file=%s\n", tensor, s.idx, tensor, s.idx,
           f.name);
}

static void m_box_outside(const char *tensor)
{
    tinfo t = tensor_info(tensor);
    sinfo s = first_nonempty(&t);
    wr_le(s.r.p + s.box_pos, t.shape[0], 8);   /* off[0] = shape[0], len[0] > 0 */
    uint32_t idx = s.idx;
    shard_put(&s);
    printf("tensor=%s shard=%u record=shards/%s#%u\n", tensor, idx, tensor, idx);
}

static void m_dup_id(const char *tensor, const char *other)
{
    tinfo a = tensor_info(tensor), b = tensor_info(other);
    rec r = get(db_tensors, other, strlen(other), other);
    wr_le(r.p + b.id_pos, a.id, 4);
    put(db_tensors, other, strlen(other), &r, other);
    printf("tensor=%s other=%s id=%u\n", tensor, other, a.id);
}

static void m_overlap_box(const char *tensor)
{
    tinfo t = tensor_info(tensor);
    if (t.n_shards < 2)
        die("tensor %s has %u shards; overlap-box needs 2", tensor, t.n_shards);
    sinfo s0 = shard_info(t.id, 0), s1 = shard_info(t.id, 1);
    if (s0.ndim < 1 || s0.len[0] < 2 || s1.len[0] == 0)
        die("tensor %s: shards 0 and 1 are too small to overlap (use an even checkpoint)",
            tensor);
    uint64_t to = s0.off[0] + s0.len[0] / 2;
    if (to + s1.len[0] > t.shape[0])
        die("tensor %s: moving shard 1 to %llu would leave the tensor", tensor,
            (unsigned long long)to);
    wr_le(s1.r.p + s1.box_pos, to, 8);
    shard_put(&s1);
    free(s0.r.p);
    printf("tensor=%s shard_a=0 shard_b=1 record=shards/%s#1 moved_to=%llu\n", tensor, tensor,
           (unsigned long long)to);
}

static void m_box_dup(const char *tensor)
{
    tinfo t = tensor_info(tensor);
    uint32_t a = UINT32_MAX;
    for (uint32_t i = 0; i < t.n_shards; i++) {
        sinfo s = shard_info(t.id, i);
        bool full = s.n_ext > 0;
        if (full && a == UINT32_MAX) {
            a = i;
        } else if (full) {
            sinfo sa = shard_info(t.id, a);
            free(s.r.p);
            s.r = sa.r;                       /* b's key, a's value */
            shard_put(&s);
            printf("tensor=%s shard_a=%u shard_b=%u\n", tensor, a, i);
            return;
        }
        free(s.r.p);
    }
    die("tensor %s has fewer than two non-empty boxes", tensor);
}

static void m_box_gap(const char *tensor)
{
    tinfo t = tensor_info(tensor);
    for (uint32_t i = 0; i < t.n_shards; i++) {
        sinfo s = shard_info(t.id, i);
        if (s.n_ext == 1 && s.ndim > 0 && s.len[0] >= 2) {
            uint64_t row = ck_dtype_size(t.dtype);
            for (int d = 1; d < s.ndim; d++)
                row *= s.len[d];
            wr_le(s.r.p + s.box_pos + 8, s.len[0] - 1, 8);
            set_ext_len(&s, 0, ext_len(&s, 0) - row);
            shard_put(&s);
            printf("tensor=%s shard=%u\n", tensor, i);
            return;
        }
        free(s.r.p);
    }
    die("tensor %s has no box of one extent and two rows", tensor);
}

static void m_box_count(const char *tensor)
{
    tinfo t = tensor_info(tensor);
    rec r = get(db_tensors, tensor, strlen(tensor), tensor);
    wr_le(r.p + t.n_shards_pos, 0x7fffffff, 4);
    put(db_tensors, tensor, strlen(tensor), &r, tensor);
    printf("tensor=%s count=2147483647\n", tensor);
}

/* Every extent of every shard, to find two in one file. */
typedef struct xref {
    uint32_t tensor, idx, ext, file;
    uint64_t off, len;
} xref;

static void m_overlap_extent(void)
{
    MDB_cursor *cur;
    MDB_val k, v;
    xref *xs = NULL;
    size_t n = 0, cap = 0;
    if (mdb_cursor_open(txn, db_shards, &cur) != MDB_SUCCESS)
        die("cursor on shards");
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == MDB_SUCCESS;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size != 8)
            die("a shard key is not 8 bytes");
        sinfo s = shard_info(ck__rd_be32(k.mv_data), ck__rd_be32((const uint8_t *)k.mv_data + 4));
        for (uint32_t i = 0; i < s.n_ext; i++) {
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                xs = realloc(xs, cap * sizeof *xs);
                if (!xs)
                    die("out of memory");
            }
            xs[n++] = (xref){ .tensor = s.tensor, .idx = s.idx, .ext = i,
                              .file = ext_file(&s, i), .off = ext_off(&s, i),
                              .len = ext_len(&s, i) };
        }
        free(s.r.p);
    }
    mdb_cursor_close(cur);
    for (size_t a = 0; a < n; a++) {
        for (size_t b = 0; b < n; b++) {
            if (a == b || xs[a].file != xs[b].file || !xs[a].len || !xs[b].len ||
                (xs[a].tensor == xs[b].tensor && xs[a].idx == xs[b].idx))
                continue;
            finfo f = file_info(xs[a].file);
            if (xs[a].off + xs[b].len > f.size)
                continue;
            sinfo s = shard_info(xs[b].tensor, xs[b].idx);
            set_ext_off(&s, xs[b].ext, xs[a].off);
            shard_put(&s);
            char ta[CK_NAME_MAX], tb[CK_NAME_MAX];
            tensor_name_of(xs[a].tensor, ta, sizeof ta);
            tensor_name_of(xs[b].tensor, tb, sizeof tb);
            printf("file=%s tensor_a=%s shard_a=%u tensor_b=%s shard_b=%u offset=%llu\n",
                   f.name, ta, xs[a].idx, tb, xs[b].idx, (unsigned long long)xs[a].off);
            free(xs);
            return;
        }
    }
    die("no two shards share a data file (use a mesh with replicas, e.g. 2x4)");
}

static MDB_dbi open_db(const char *name)
{
    MDB_dbi d;
    int rc = mdb_dbi_open(txn, name, 0, &d);
    if (rc != MDB_SUCCESS)
        die("table %s: %s", name, mdb_strerror(rc));
    return d;
}

/* ---- a planted catalog ---- */

static void m_catalog_key(const char *key)
{
    MDB_dbi dbi;
    MDB_cursor *cur;
    MDB_val k, v;
    int rc = mdb_dbi_open(txn, "checkpoints", 0, &dbi);
    if (rc == MDB_SUCCESS)
        rc = mdb_cursor_open(txn, dbi, &cur);
    if (rc == MDB_SUCCESS)
        rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    if (rc != MDB_SUCCESS)
        die("no catalog entry to copy: %s", mdb_strerror(rc));
    rec r = { .p = malloc(v.mv_size ? v.mv_size : 1), .len = v.mv_size };
    if (!r.p)
        die("out of memory");
    memcpy(r.p, v.mv_data, v.mv_size);
    mdb_cursor_close(cur);
    put(dbi, key, strlen(key), &r, "checkpoints/(planted)");
    printf("key_bytes=%zu\n", strlen(key));
}

/* ---- the meta pages, raw ---- */

/* LMDB 0.9's meta page (lmdb/mdb.c): a 16-byte page header, then mm_magic at 0,
 * mm_dbs[0].md_pad (the page size) at 24, mm_last_pg at 120, mm_txnid at 128. */
static int m_meta_last_pg(const char *pages)
{
    FILE *f = fopen(mpath, "r+b");
    uint8_t m0[160], m1[160];
    if (!f || fread(m0, 1, sizeof m0, f) != sizeof m0)
        die("cannot read the first meta page");
    uint64_t psize = rd_le(m0 + 16 + 24, 4);
    if (rd_le(m0 + 16, 4) != 0xBEEFC0DEu || psize < 512 || psize > 65536 ||
        fseek(f, (long)psize, SEEK_SET) != 0 || fread(m1, 1, sizeof m1, f) != sizeof m1)
        die("not an LMDB file");
    long at = rd_le(m1 + 16 + 128, 8) > rd_le(m0 + 16 + 128, 8) ? (long)psize : 0;
    uint8_t last[8];
    uint64_t n = strtoull(pages, NULL, 0);
    wr_le(last, n, 8);
    if (fseek(f, at + 16 + 120, SEEK_SET) != 0 || fwrite(last, 1, 8, f) != 8 || fclose(f) != 0)
        die("cannot write the meta page");
    printf("psize=%llu last_pg=%llu\n", (unsigned long long)psize, (unsigned long long)n);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 5) {
        fprintf(stderr, "usage: mf-corrupt MANIFEST version|dtype|extent-past-eof|"
                "extent-overflow|file-size-absurd|file-size-huge|box-outside|dup-id|overlap-box|"
                "overlap-extent|box-dup|box-gap|box-count|catalog-key|meta-last-pg [TENSOR [OTHER]]\n");
        return 2;
    }
    mpath = argv[1];
    const char *how = argv[2];
    const char *tensor = argc > 3 ? argv[3] : "t1", *other = argc > 4 ? argv[4] : "t2";
    if (!strcmp(how, "meta-last-pg"))
        return m_meta_last_pg(tensor);
    bool catalog = !strcmp(how, "catalog-key");
    int rc = mdb_env_create(&env);
    if (rc == MDB_SUCCESS)
        rc = mdb_env_set_maxdbs(env, 8);
    if (rc == MDB_SUCCESS)
        rc = mdb_env_open(env, mpath, MDB_NOSUBDIR | MDB_NOLOCK, 0644);
    if (rc == MDB_SUCCESS)
        rc = mdb_txn_begin(env, NULL, 0, &txn);
    if (rc != MDB_SUCCESS)
        die("%s", mdb_strerror(rc));
    if (!catalog) {
        db_meta = open_db(CK_DB_META);
        db_tensors = open_db(CK_DB_TENSORS);
        db_shards = open_db(CK_DB_SHARDS);
        db_files = open_db(CK_DB_FILES);
    }

    if (catalog)
        m_catalog_key(tensor);
    else if (!strcmp(how, "version"))
        m_version();
    else if (!strcmp(how, "dtype"))
        m_dtype(tensor);
    else if (!strcmp(how, "extent-past-eof") || !strcmp(how, "extent-overflow") ||
             !strcmp(how, "file-size-absurd") || !strcmp(how, "file-size-huge"))
        m_extent(tensor, how);
    else if (!strcmp(how, "box-outside"))
        m_box_outside(tensor);
    else if (!strcmp(how, "dup-id"))
        m_dup_id(tensor, other);
    else if (!strcmp(how, "overlap-box"))
        m_overlap_box(tensor);
    else if (!strcmp(how, "overlap-extent"))
        m_overlap_extent();
    else if (!strcmp(how, "box-dup"))
        m_box_dup(tensor);
    else if (!strcmp(how, "box-gap"))
        m_box_gap(tensor);
    else if (!strcmp(how, "box-count"))
        m_box_count(tensor);
    else
        die("unknown mutation '%s'", how);

    rc = mdb_txn_commit(txn);
    txn = NULL;
    if (rc != MDB_SUCCESS)
        die("commit: %s", mdb_strerror(rc));
    rc = mdb_env_sync(env, 1);
    mdb_env_close(env);
    env = NULL;
    if (rc != MDB_SUCCESS)
        die("sync: %s", mdb_strerror(rc));
    fflush(stdout);
    return 0;
}
