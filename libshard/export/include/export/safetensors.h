/* export/safetensors.h - export to Hugging Face safetensors (the export library, not the
 * core: it needs jansson, which the core must not).
 *
 * The format, as the reference implementation writes it: an 8-byte little-endian
 * header length N; N bytes of JSON, padded with spaces to a multiple of 8; then the
 * data. The header maps each tensor name to {"dtype", "shape", "data_offsets":
 * [begin, end]} (offsets into the data, which follow each other from 0 with no
 * gap), plus "__metadata__": {"format": "pt"}. Tensors are ordered by dtype
 * alignment (element size) descending, then key, so every tensor starts aligned to
 * its element size.
 *
 * ck_consolidate streams each full tensor, in row-major order, through ck_reader
 * into the files, never holding more than the writer's ring of blocks: memory stays
 * bounded whatever the tensor size. The same checkpoint gives byte-identical output.
 */
#ifndef CK_EXPORT_SAFETENSORS_H
#define CK_EXPORT_SAFETENSORS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "ck/ckpt.h"
#include "ck/engine.h"
#include "export/names.h"

/* "F32", "BF16", ... for a dtype; NULL for none. */
const char *ck_st_dtype_name(ck_dtype dtype);
int ck_st_dtype_parse(const char *s, ck_dtype *out);

/* One tensor of a safetensors file. */
typedef struct ck_st_tensor {
    char name[CK_NAME_MAX];  /* the checkpoint's tensor name */
    char key[CK_NAME_MAX];   /* its key in the file: name with its %XX escapes undone */
    ck_dtype dtype;
    int ndim;
    uint64_t shape[CK_MAX_NDIM];
    uint64_t begin, end;     /* data_offsets: bytes relative to the data start */
} ck_st_tensor;

/* Sorts t into file order, assigns data offsets, and builds the file's first bytes:
 * the length prefix and the padded JSON header (malloc'd into *head, *head_len bytes,
 * a multiple of 8). */
int ck_st_layout(ck_st_tensor *t, size_t n, char **head, size_t *head_len, ck_err *err);

/* A parsed safetensors header. */
typedef struct ck_st_file {
    uint64_t data_start;     /* 8 + header length */
    uint64_t data_len;       /* bytes of data the header describes */
    ck_st_tensor *t;         /* in data order */
    size_t n;
    char format[16];         /* __metadata__.format, "" when absent */
} ck_st_file;

/* Reads and checks the header of the safetensors file at path: the length inside the
 * file, JSON that parses, known dtypes, shapes whose bytes equal their offsets' span,
 * offsets that tile the data from 0 with no gap or overlap, and a file exactly as
 * long as the data. -EBADMSG with a message naming the file and tensor. */
int ck_st_open(const char *path, ck_st_file *out, ck_err *err);
void ck_st_free(ck_st_file *f);

/* Which tensors go out, and under what keys: those whose checkpoint name matches
 * filter; of those, with a prefix, only the ones whose key (the decoded name) starts
 * with it, keyed by the rest; then rename's verdict. Two tensors that end with the
 * same key are refused, naming both. */
typedef struct ck_consolidate_opts {
    const char *dir;             /* output directory (created if missing) */
    uint64_t max_shard_size;     /* 0: 5 GB; above it, model-0000i-of-0000N files */
    ck_dtype dtype;              /* 0: keep; a float dtype with a safetensors name: every
                                    float tensor converted to it as torch's .to() does
                                    (ck_dtype_convert); other tensors keep theirs */
    const char *filter;          /* fnmatch glob on tensor names, or NULL */
    const char *prefix;          /* NULL: every tensor under its whole key; else a
                                    model-only export (ck_export_model_prefix) */
    ck_rename_fn rename;         /* NULL: keys as they are */
    void *rename_arg;
    const atomic_int *cancel;    /* set (by a signal handler): stop, remove the
                                    temporary files, -ECANCELED */
    uint64_t mem_limit;          /* writer buffers; 0: 64 MiB */
    ck_engine *engine;           /* NULL: the default engine */
    void (*log)(void *arg, const char *msg);
    void (*progress)(void *arg, uint64_t done, uint64_t total);
    void *cb_arg;
} ck_consolidate_opts;

typedef struct ck_consolidate_stats {
    uint64_t tensors, files;
    uint64_t bytes;              /* of the files written */
    double seconds;
    bool sharded;                /* wrote model.safetensors.index.json */
} ck_consolidate_stats;

int ck_consolidate(ck_ckpt *ck, const ck_consolidate_opts *o, ck_consolidate_stats *st,
                   ck_err *err);

#endif
