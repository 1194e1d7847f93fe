/* consolidate.c - a checkpoint's full tensors as safetensors files (see
 * export/safetensors.h).
 *
 * Each output file is one run of bytes produced on demand: the header, then each
 * tensor's row-major bytes read through ck_reader (converted to another dtype on the
 * way when asked, by ck_dtype_convert). The core's writer (ck_files_write) pulls it
 * block by block into its bounded ring and writes it with io_uring, under a temporary
 * name, cut to its exact length and durable; it is then renamed into place, so a reader
 * never sees half a file. Which tensors go out, and
 * under what keys, is decided first, on the caller's thread (select_tensor).
 */
#include "export/safetensors.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ck/engine.h"
#include "ck/load.h"

#define SCRATCH (8u << 20)   /* conversion buffer: source bytes per read */

typedef struct cctx {
    ck_ckpt *ck;
    const ck_consolidate_opts *o;
    ck_st_tensor *all;       /* selected tensors, output dtypes */
    ck_dtype *src_dtype;     /* each one's dtype in the checkpoint */
    size_t nall, capall;
    ck_readers *readers;     /* fills run on the writer's workers, each with its own */
    pthread_mutex_t err_mu;
    ck_err fill_err;         /* the first fill error, under err_mu */
    ck_err *err;             /* the caller's, for select_tensor's refusals */
} cctx;

typedef struct out_file {
    cctx *c;
    ck_st_tensor *t;         /* its tensors, in file order */
    size_t n;
    char *head;
    size_t head_len;
    uint64_t size;           /* exact bytes */
    char tmp[PATH_MAX], final[PATH_MAX], name[64];
} out_file;

static bool is_float(ck_dtype dt)
{
    const ck_dtype_info *i = ck_dtype_info_of(dt);
    return i && i->kind == CK_KIND_FLOAT;
}

static ck_dtype out_dtype(const ck_consolidate_opts *o, ck_dtype dt)
{
    return o->dtype && is_float(dt) ? o->dtype : dt;
}

static bool cancelled(const ck_consolidate_opts *o)
{
    return o->cancel && atomic_load(o->cancel);
}

/* The tensor's key in the export, into key: 1, or 0 when it stays out. */
static int export_key(cctx *c, const ck_tensor *t, char *key, size_t len)
{
    const ck_consolidate_opts *o = c->o;
    if (o->filter && fnmatch(o->filter, t->name, 0) != 0)
        return 0;
    char raw[CK_NAME_MAX];
    size_t klen;
    if (ck_key_decode(t->name, raw, sizeof raw, &klen) < 0 || strlen(raw) != klen)
        return ck_err_set(c->err, -EINVAL, "tensor %s: its name has a malformed escape or "
                          "decodes to a NUL byte, which a safetensors key cannot hold", t->name);
    const char *k = raw;
    if (o->prefix) {
        size_t pl = strlen(o->prefix);
        if (strncmp(raw, o->prefix, pl) != 0)
            return 0;
        if (!raw[pl])
            return ck_err_set(c->err, -EINVAL, "tensor %s: its key is the prefix '%s' itself, "
                              "which leaves no key", t->name, o->prefix);
        k += pl;
    }
    if (!o->rename) {
        snprintf(key, len, "%s", k);
        return 1;
    }
    int r = o->rename(o->rename_arg, k, key, len, c->err);
    if (r < 0)
        ck_err_set(c->err, r, "tensor %s", t->name);
    return r;
}

static int select_tensor(const ck_tensor *t, void *arg)
{
    cctx *c = arg;
    char key[CK_NAME_MAX];
    int r = export_key(c, t, key, sizeof key);
    if (r <= 0)
        return r;
    if (c->nall == c->capall) {
        size_t cap = c->capall ? 2 * c->capall : 64;
        ck_st_tensor *all = realloc(c->all, cap * sizeof *all);
        if (!all)
            return -ENOMEM;
        c->all = all;
        c->capall = cap;
    }
    if (!ck_st_dtype_name(t->dtype))
        return ck_err_set(c->err, -EINVAL, "tensor %s: dtype %s has no safetensors name; "
                          "leave it out with --filter", t->name, ck_dtype_name(t->dtype));
    ck_st_tensor *s = &c->all[c->nall++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", t->name);
    snprintf(s->key, sizeof s->key, "%s", key);
    s->dtype = out_dtype(c->o, t->dtype);
    s->ndim = t->ndim;
    memcpy(s->shape, t->shape, sizeof s->shape);
    return 0;
}

/* Bytes [o, o+n) of tensor T's output, which has another dtype than the checkpoint's,
 * read in SCRATCH-sized pieces and converted. */
static int read_converted(cctx *c, const ck_box *full, const ck_st_tensor *T, ck_dtype from,
                          uint64_t o, uint64_t n, uint8_t *dst, ck_err *err)
{
    size_t si = ck_dtype_size(from), di = ck_dtype_size(T->dtype);
    uint64_t e0 = o / di, cnt = n / di, step = SCRATCH / si;
    uint8_t *scratch = malloc((cnt < step ? cnt : step) * si + 1);
    if (!scratch)
        return ck_err_set(err, -ENOMEM, "tensor %s: out of memory converting", T->name);
    int r = 0;
    for (uint64_t e = 0; e < cnt && r == 0; e += step) {
        uint64_t k = cnt - e < step ? cnt - e : step;
        r = ck_readers_read(c->readers, T->name, full, (e0 + e) * si, k * si, scratch, err);
        if (r == 0 && (r = ck_dtype_convert(dst + e * di, T->dtype, scratch, from, k, err)) < 0)
            ck_err_set(err, r, "tensor %s", T->name);
    }
    free(scratch);
    return r;
}

/* Bytes [d, d+len) of the file's data part (after the header), which may span
 * several tensors. */
static int fill_data(out_file *f, uint64_t d, uint8_t *dst, size_t len, ck_err *err)
{
    cctx *c = f->c;
    /* The first tensor that ends after d: tensors lie in file order. */
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (f->t[mid].end <= d)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; len > 0; i++) {
        if (i == f->n)
            return ck_err_set(err, -EIO, "%s: asked for bytes past the data", f->name);
        const ck_st_tensor *T = &f->t[i];
        ck_dtype from = c->src_dtype[T - c->all];
        ck_box full;
        ck_box_full(T->ndim, T->shape, &full);
        uint64_t n = T->end - d < len ? T->end - d : len;
        int r = T->dtype == from
              ? ck_readers_read(c->readers, T->name, &full, d - T->begin, n, dst, err)
              : read_converted(c, &full, T, from, d - T->begin, n, dst, err);
        if (r < 0)
            return r;
        d += n;
        dst += n;
        len -= n;
    }
    return 0;
}

/* ck_fill_fn: bytes [off, off+len) of the output file; runs on the writer's worker
 * threads, several at once. */
static int fill(void *arg, uint64_t off, void *dstv, size_t len)
{
    out_file *f = arg;
    uint8_t *dst = dstv;
    ck_err e = { 0 };
    int r = 0;
    if (cancelled(f->c->o)) {
        r = ck_err_set(&e, -ECANCELED, "interrupted");
    } else if (off < f->head_len) {
        uint64_t n = f->head_len - off < len ? f->head_len - off : len;
        memcpy(dst, f->head + off, n);
        off += n;
        dst += n;
        len -= n;
    }
    if (r == 0 && len > 0)
        r = fill_data(f, off - f->head_len, dst, len, &e);
    if (r < 0) {
        pthread_mutex_lock(&f->c->err_mu);
        if (!f->c->fill_err.code)
            f->c->fill_err = e;
        pthread_mutex_unlock(&f->c->err_mu);
    }
    return r;
}

static int write_index(const ck_consolidate_opts *o, out_file *F, size_t nf, uint64_t total,
                       ck_err *err)
{
    json_t *map = json_object();
    for (size_t i = 0; i < nf; i++)
        for (size_t k = 0; k < F[i].n; k++)
            json_object_set_new(map, F[i].t[k].key, json_string(F[i].name));
    json_t *j = json_pack("{s:{s:I}, s:o}", "metadata", "total_size", (json_int_t)total,
                          "weight_map", map);
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", o->dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int r = json_dump_file(j, tmp, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(j);
    int fd = r == 0 ? open(tmp, O_WRONLY | O_APPEND | O_CLOEXEC) : -1;
    if (fd < 0 || write(fd, "\n", 1) != 1 || fsync(fd) < 0 || rename(tmp, path) < 0) {
        int e = errno ? errno : EIO;
        if (fd >= 0)
            close(fd);
        unlink(tmp);
        return ck_err_set(err, -e, "%s: %s", path, strerror(e));
    }
    close(fd);
    return 0;
}

/* Cuts file f's bytes to its exact length, makes it durable and gives it its name. */
static int finish_file(const out_file *f, ck_err *err)
{
    if (rename(f->tmp, f->final) < 0)
        return ck_err_set(err, -errno, "%s: %s", f->final, strerror(errno));
    return 0;
}

static int by_key(const void *a, const void *b)
{
    return strcmp(((const ck_st_tensor *)a)->key, ((const ck_st_tensor *)b)->key);
}

/* A safetensors header holds each key once: two tensors under one key are refused. */
static int unique_keys(cctx *c, ck_err *err)
{
    qsort(c->all, c->nall, sizeof *c->all, by_key);
    for (size_t i = 1; i < c->nall; i++)
        if (!strcmp(c->all[i - 1].key, c->all[i].key))
            return ck_err_set(err, -EINVAL, "tensors %s and %s would both be exported as %s",
                              c->all[i - 1].name, c->all[i].name, c->all[i].key);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int ck_consolidate(ck_ckpt *ck, const ck_consolidate_opts *o, ck_consolidate_stats *st,
                   ck_err *err)
{
    double t0 = now_s();
    ck_consolidate_stats local;
    if (!st)
        st = &local;
    *st = (ck_consolidate_stats){ 0 };
    if (o->dtype && (!is_float(o->dtype) || !ck_st_dtype_name(o->dtype)))
        return ck_err_set(err, -EINVAL, "consolidate: dtype %s: an export converts its float "
                          "tensors to a float dtype that safetensors has (f32, bf16, f16, f64, "
                          "f8e4m3, f8e5m2)", ck_dtype_name(o->dtype) ? ck_dtype_name(o->dtype)
                                                                      : "unknown");
    if (mkdir(o->dir, 0755) < 0 && errno != EEXIST)
        return ck_err_set(err, -errno, "%s: mkdir: %s", o->dir, strerror(errno));
    cctx c = { .ck = ck, .o = o, .err_mu = PTHREAD_MUTEX_INITIALIZER, .err = err };
    out_file *F = NULL;
    ck_file_out *fo = NULL;
    size_t nf = 0;
    int r = ck_tensors_each(ck, select_tensor, &c, err);
    if (r == 0 && c.nall == 0)
        r = ck_err_set(err, -ENOENT, "checkpoint %s: no tensor matches '%s'%s%s%s",
                       ck_get_info(ck)->name, o->filter ? o->filter : "*",
                       o->prefix ? " under the prefix '" : "", o->prefix ? o->prefix : "",
                       o->prefix ? "'" : "");
    if (r == 0)
        r = unique_keys(&c, err);
    if (r < 0)
        goto out;
    /* Lay out in file order and cut into files of at most max bytes of data (a tensor
     * larger than that gets a file to itself), as Hugging Face's save_pretrained. */
    char *head;
    size_t head_len;
    if ((r = ck_st_layout(c.all, c.nall, &head, &head_len, err)) < 0)
        goto out;
    free(head);
    /* The layout put the tensors in file order; note each one's checkpoint dtype. */
    if (!(c.src_dtype = calloc(c.nall, sizeof *c.src_dtype))) {
        r = ck_err_set(err, -ENOMEM, "consolidate: out of memory");
        goto out;
    }
    for (size_t i = 0; i < c.nall && r == 0; i++) {
        ck_tensor t;
        if ((r = ck_tensor_get(ck, c.all[i].name, &t, err)) == 0)
            c.src_dtype[i] = t.dtype;
    }
    if (r < 0)
        goto out;
    uint64_t max = o->max_shard_size ? o->max_shard_size : 5000000000ull, total = 0;
    F = calloc(c.nall, sizeof *F);
    if (!F) {
        r = ck_err_set(err, -ENOMEM, "consolidate: out of memory");
        goto out;
    }
    for (size_t i = 0; i < c.nall; i++) {
        uint64_t b = c.all[i].end - c.all[i].begin;
        if (nf == 0 || (F[nf - 1].size + b > max && F[nf - 1].size > 0)) {
            F[nf].t = &c.all[i];
            F[nf++].c = &c;
        }
        F[nf - 1].n++;
        F[nf - 1].size += b;
        total += b;
    }
    if (!(fo = calloc(nf, sizeof *fo))) {
        r = ck_err_set(err, -ENOMEM, "consolidate: out of memory");
        goto out;
    }
    for (size_t i = 0; i < nf && r == 0; i++) {
        out_file *f = &F[i];
        if (nf == 1)
            snprintf(f->name, sizeof f->name, "model.safetensors");
        else
            snprintf(f->name, sizeof f->name, "model-%05zu-of-%05zu.safetensors", i + 1, nf);
        snprintf(f->final, sizeof f->final, "%s/%s", o->dir, f->name);
        snprintf(f->tmp, sizeof f->tmp, "%s/.%s.tmp", o->dir, f->name);
        unlink(f->tmp);   /* debris of a run that died */
        if ((r = ck_st_layout(f->t, f->n, &f->head, &f->head_len, err)) < 0)
            break;
        f->size += f->head_len;
        fo[i] = (ck_file_out){ .path = f->tmp, .len = f->size, .fill = fill, .arg = f };
    }
    if (r < 0)
        goto out;
    /* Blocks are filled on a worker pool, so reads of different blocks overlap. */
    if ((r = ck_readers_open_ckpt(ck, &c.readers, err)) < 0) {
        ck_err_set(err, r, "consolidate: starting workers: %s", strerror(-r));
        goto out;
    }
    ck_write_opts wo = { .engine = o->engine, .mem_limit = o->mem_limit, .log = o->log,
                         .progress = o->progress, .cb_arg = o->cb_arg };
    r = ck_files_write(&wo, fo, (uint32_t)nf, err);
    if (r < 0 && c.fill_err.code)
        ck_err_set(err, r, "%s", ck_err_msg(&c.fill_err));
    /* Interrupted once every byte is written: no file gets its name either. */
    if (r == 0 && cancelled(o))
        r = ck_err_set(err, -ECANCELED, "consolidate: interrupted");
    for (size_t i = 0; i < nf && r == 0; i++) {
        r = finish_file(&F[i], err);
        st->bytes += F[i].size;
    }
    /* What a loader finds in the directory must describe this export only. */
    char stale[PATH_MAX + 40];
    snprintf(stale, sizeof stale, "%s/%s", o->dir,
             nf == 1 ? "model.safetensors.index.json" : "model.safetensors");
    if (r == 0 && unlink(stale) < 0 && errno != ENOENT)
        r = ck_err_set(err, -errno, "%s: %s", stale, strerror(errno));
    if (r == 0 && nf > 1)
        r = write_index(o, F, nf, total, err);
    st->tensors = c.nall;
    st->files = nf;
    st->sharded = nf > 1;
out:
    for (size_t i = 0; i < nf; i++) {
        if (r < 0)
            unlink(F[i].tmp);
        free(F[i].head);
    }
    ck_readers_close(c.readers);
    free(F);
    free(fo);
    free(c.all);
    free(c.src_dtype);
    st->seconds = now_s() - t0;
    return r;
}
