/* safetensors.c - the safetensors header: layout for writing, checks for reading
 * (see export/safetensors.h). */
#include "export/safetensors.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ck/layout.h"

/* A header larger than this is not a header (the reference reader's own limit). */
#define ST_HEADER_MAX (100u << 20)

/* Names come from the core's dtype table (ck_dtype_info), its safetensors column. */
const char *ck_st_dtype_name(ck_dtype dtype)
{
    const ck_dtype_info *i = ck_dtype_info_of(dtype);
    return i ? i->safetensors : NULL;
}

int ck_st_dtype_parse(const char *s, ck_dtype *out)
{
    for (int d = 1; d <= CK_DTYPE_MAX; d++) {
        const ck_dtype_info *i = ck_dtype_info_of(d);
        if (i && i->safetensors && !strcmp(i->safetensors, s)) {
            *out = i->code;
            return 0;
        }
    }
    return -EINVAL;
}

static uint64_t st_bytes(const ck_st_tensor *t)
{
    ck_box b;
    ck_box_full(t->ndim, t->shape, &b);
    return ck_box_numel(&b) * ck_dtype_size(t->dtype);
}

/* By element size, then by the key a reader sees (unique in a file). */
static int file_order(const void *a, const void *b)
{
    const ck_st_tensor *x = a, *y = b;
    size_t sx = ck_dtype_size(x->dtype), sy = ck_dtype_size(y->dtype);
    if (sx != sy)
        return sx > sy ? -1 : 1;
    return strcmp(x->key, y->key);
}

int ck_st_layout(ck_st_tensor *t, size_t n, char **head, size_t *head_len, ck_err *err)
{
    qsort(t, n, sizeof *t, file_order);
    json_t *h = json_object();
    json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "pt"));
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < t[i].ndim; d++)
            json_array_append_new(shape, json_integer((json_int_t)t[i].shape[d]));
        t[i].begin = off;
        t[i].end = off += st_bytes(&t[i]);
        /* jansson refuses a key that is not UTF-8: a decoded name may not be. */
        if (json_object_set_new(h, t[i].key, json_pack("{s:s, s:o, s:[I, I]}", "dtype",
                                ck_st_dtype_name(t[i].dtype), "shape", shape, "data_offsets",
                                (json_int_t)t[i].begin, (json_int_t)t[i].end)) < 0) {
            json_decref(h);
            return ck_err_set(err, -EINVAL, "tensor %s: its key is not UTF-8, which a "
                              "safetensors header must be", t[i].name);
        }
    }
    /* Sorted keys: the same tensors always give the same bytes. */
    char *js = json_dumps(h, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(h);
    if (!js)
        return ck_err_set(err, -ENOMEM, "safetensors: out of memory for the header");
    size_t jl = strlen(js), padded = (jl + 7) & ~(size_t)7;
    char *buf = malloc(8 + padded);
    if (!buf) {
        free(js);
        return ck_err_set(err, -ENOMEM, "safetensors: out of memory for the header");
    }
    for (int i = 0; i < 8; i++)
        buf[i] = (char)(uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, js, jl);
    memset(buf + 8 + jl, ' ', padded - jl);
    free(js);
    *head = buf;
    *head_len = 8 + padded;
    return 0;
}

void ck_st_free(ck_st_file *f)
{
    free(f->t);
    memset(f, 0, sizeof *f);
}

static int by_begin(const void *a, const void *b)
{
    const ck_st_tensor *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Fills one tensor entry from its JSON value; names what is wrong. */
static const char *parse_entry(json_t *v, ck_st_tensor *t)
{
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
           *off = json_object_get(v, "data_offsets");
    if (!json_is_object(v) || !json_is_string(dt) || !json_is_array(sh) || !json_is_array(off) ||
        json_array_size(off) != 2)
        return "is not {dtype, shape, data_offsets}";
    if (ck_st_dtype_parse(json_string_value(dt), &t->dtype) < 0)
        return "has an unknown dtype";
    if (json_array_size(sh) > CK_MAX_NDIM)
        return "has too many dims";
    t->ndim = (int)json_array_size(sh);
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        json_t *x = json_array_get(sh, (size_t)d);
        if (!json_is_integer(x) || json_integer_value(x) < 0)
            return "has a shape that is not a list of sizes";
        t->shape[d] = (uint64_t)json_integer_value(x);
        if (t->shape[d] && numel > (UINT64_C(1) << 62) / t->shape[d])
            return "has an absurd shape";
        numel *= t->shape[d];
    }
    json_t *b = json_array_get(off, 0), *e = json_array_get(off, 1);
    if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
        json_integer_value(e) < json_integer_value(b))
        return "has bad data_offsets";
    t->begin = (uint64_t)json_integer_value(b);
    t->end = (uint64_t)json_integer_value(e);
    if (t->end - t->begin != numel * ck_dtype_size(t->dtype))
        return "has data_offsets whose span is not its shape's bytes";
    return NULL;
}

int ck_st_open(const char *path, ck_st_file *out, ck_err *err)
{
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ck_err_set(err, -errno, "%s: %s", path, strerror(errno));
    struct stat sb;
    uint8_t lenb[8];
    char *js = NULL;
    json_t *h = NULL;
    int r = 0;
    uint64_t hl = 0;
    if (fstat(fd, &sb) < 0 || pread(fd, lenb, 8, 0) != 8) {
        r = ck_err_set(err, -EBADMSG, "%s: shorter than the 8-byte header length", path);
        goto out;
    }
    for (int i = 0; i < 8; i++)
        hl |= (uint64_t)lenb[i] << (8 * i);
    if (hl > ST_HEADER_MAX || hl > (uint64_t)sb.st_size - 8) {
        r = ck_err_set(err, -EBADMSG, "%s: header length %llu does not fit the %lld-byte file",
                       path, (unsigned long long)hl, (long long)sb.st_size);
        goto out;
    }
    if (!(js = malloc(hl + 1)) || pread(fd, js, hl, 8) != (ssize_t)hl) {
        r = ck_err_set(err, js ? -EIO : -ENOMEM, "%s: reading the header failed", path);
        goto out;
    }
    json_error_t je;
    if (!(h = json_loadb(js, hl, 0, &je)) || !json_is_object(h)) {
        r = ck_err_set(err, -EBADMSG, "%s: the header is not a JSON object: %s", path,
                       h ? "" : je.text);
        goto out;
    }
    out->data_start = 8 + hl;
    out->t = calloc(json_object_size(h) + 1, sizeof *out->t);
    if (!out->t) {
        r = -ENOMEM;
        goto out;
    }
    const char *key;
    json_t *v;
    json_object_foreach(h, key, v) {
        if (!strcmp(key, "__metadata__")) {
            json_t *f = json_object_get(v, "format");
            if (!json_is_object(v)) {
                r = ck_err_set(err, -EBADMSG, "%s: __metadata__ is not an object", path);
                goto out;
            }
            if (json_is_string(f))
                snprintf(out->format, sizeof out->format, "%s", json_string_value(f));
            continue;
        }
        ck_st_tensor *t = &out->t[out->n];
        const char *why = strlen(key) >= CK_NAME_MAX ? "has a name too long" : parse_entry(v, t);
        if (why) {
            r = ck_err_set(err, -EBADMSG, "%s: tensor %.200s %s", path, key, why);
            goto out;
        }
        snprintf(t->name, sizeof t->name, "%s", key);
        snprintf(t->key, sizeof t->key, "%s", key);
        out->n++;
    }
    qsort(out->t, out->n, sizeof *out->t, by_begin);
    for (size_t i = 0; i < out->n; i++) {
        if (out->t[i].begin != out->data_len) {
            r = ck_err_set(err, -EBADMSG, "%s: tensor %s starts at %llu, not at %llu: the "
                           "offsets leave a gap or overlap", path, out->t[i].name,
                           (unsigned long long)out->t[i].begin,
                           (unsigned long long)out->data_len);
            goto out;
        }
        out->data_len = out->t[i].end;
    }
    if (out->data_start + out->data_len != (uint64_t)sb.st_size)
        r = ck_err_set(err, -EBADMSG, "%s: the header describes %llu data bytes, the file "
                       "holds %llu", path, (unsigned long long)out->data_len,
                       (unsigned long long)((uint64_t)sb.st_size - out->data_start));
out:
    if (r < 0)
        ck_st_free(out);
    json_decref(h);
    free(js);
    close(fd);
    return r;
}
