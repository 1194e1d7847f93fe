/* ck/types.h - dtypes, device meshes and placements.
 *
 * These are the nouns of the checkpoint model (docs/FORMAT.md): a tensor has a dtype,
 * a global shape, and one placement per dimension of the mesh it was saved on.
 */
#ifndef CK_TYPES_H
#define CK_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ck/error.h"

#define CK_MAX_NDIM      8    /* tensor dims */
#define CK_MAX_MESH_DIMS 4    /* mesh dims */
#define CK_MESH_NAME_MAX 32   /* bytes of a mesh dim name, with the NUL */
#define CK_MAX_WORLD     (1u << 20)

/* The on-disk codes are part of the format: never renumber. Codes 11-17 came with
 * format 1.1 (the dtypes a DCP state dict may carry); a 1.0 reader refuses them by
 * code. F8 types are the OCP formats torch calls float8_e4m3fn and float8_e5m2; a
 * complex element is its real part then its imaginary part, each an f32 (C64) or an
 * f64 (C128). Everything else about a dtype is its row of the dtype table
 * (ck_dtype_info): a new dtype is a code here, a row in types.c and a line in
 * docs/FORMAT.md. */
typedef enum ck_dtype {
    CK_F32 = 1, CK_BF16 = 2, CK_F16 = 3, CK_F64 = 4, CK_I64 = 5,
    CK_I32 = 6, CK_I16 = 7, CK_I8 = 8, CK_U8 = 9, CK_BOOL = 10,
    CK_U16 = 11, CK_U32 = 12, CK_U64 = 13, CK_F8E4M3 = 14, CK_F8E5M2 = 15,
    CK_C64 = 16, CK_C128 = 17,
} ck_dtype;
#define CK_DTYPE_MAX CK_C128

/* What an element is: how compare prints one, and how its bits read. */
typedef enum ck_dtype_kind {
    CK_KIND_FLOAT = 1,   /* sign, exp_bits of biased exponent, man_bits of mantissa */
    CK_KIND_INT,         /* two's complement */
    CK_KIND_UINT,
    CK_KIND_BOOL,        /* one byte, 0 false */
    CK_KIND_COMPLEX,     /* a real then an imaginary float, each half the element */
} ck_dtype_kind;

/* One row of the dtype table. */
typedef struct ck_dtype_info {
    ck_dtype code;
    const char *name;          /* the format's name: "f32" */
    size_t size;               /* bytes per element */
    const char *torch;         /* torch's name ("float32"), the attribute of torch */
    const char *safetensors;   /* safetensors' dtype ("F32"); NULL: it has none */
    ck_dtype_kind kind;
    /* A float's layout (of each part, for a complex): the bias is 2^(exp_bits-1)-1.
     * finite: no infinities, the top exponent holds numbers and only all ones is NaN
     * (float8_e4m3fn). */
    uint8_t exp_bits, man_bits;
    bool finite;
} ck_dtype_info;

/* The row of a code, or NULL for a code that is not a dtype. Codes 1..CK_DTYPE_MAX
 * all have rows. */
CK_API const ck_dtype_info *ck_dtype_info_of(int dtype);

/* Bytes per element, or 0 for a code that is not a dtype. */
CK_API size_t ck_dtype_size(int dtype);
/* "f32", "bf16", ... or NULL for an unknown code. */
CK_API const char *ck_dtype_name(int dtype);
/* Parses a name ("f32", ...) or torch's name ("float32", "bfloat16", "uint16",
 * "float8_e4m3fn", "float8_e5m2", "complex64", ...). */
CK_API int ck_dtype_parse(const char *s, ck_dtype *out, ck_err *err);

/* Converts n elements of dtype from at src into dtype to at dst (which must not
 * overlap src unless the dtypes are equal), by value, never by bits: floats round to
 * nearest even (a narrow float through an f32 first, as torch's c10 types), integers
 * take floats truncated toward zero, nonzero is true, and a real value becomes a
 * complex one's real part; the rules are convert.c's header. A value the target cannot
 * hold as an integer (NaN, infinity, out of range) fails with -ERANGE naming the
 * element, and complex to real with -EINVAL (ck_dtype_convertible); dst may then be
 * partly written. Callers add the tensor's name to err. */
CK_API int ck_dtype_convert(void *dst, ck_dtype to, const void *src, ck_dtype from, size_t n,
                            ck_err *err);
/* 0 if ck_dtype_convert can convert from into to at all, else -EINVAL saying why
 * (an unknown code; complex into a real dtype). */
CK_API int ck_dtype_convertible(ck_dtype from, ck_dtype to, ck_err *err);

typedef struct ck_mesh {
    int ndim;                                          /* 1..CK_MAX_MESH_DIMS */
    uint32_t size[CK_MAX_MESH_DIMS];                   /* each >= 1 */
    char name[CK_MAX_MESH_DIMS][CK_MESH_NAME_MAX];     /* "" when unnamed */
} ck_mesh;

/* Parses "2x8", "4", "2x2x2". names is NULL or a comma list with one name per dim
 * ("replicate,shard"); names are [A-Za-z0-9_-]+. Errors name the bad spec. */
CK_API int ck_mesh_parse(const char *shape, const char *names, ck_mesh *out, ck_err *err);
/* Writes "2x8" into buf. Returns the length that snprintf would. */
CK_API int ck_mesh_format(const ck_mesh *m, char *buf, size_t len);
/* Number of ranks: the product of the sizes. */
CK_API uint64_t ck_mesh_world(const ck_mesh *m);
/* Row-major rank <-> coordinate, as torch's DeviceMesh(arange(world).view(shape)). */
CK_API void ck_mesh_coord(const ck_mesh *m, uint64_t rank, uint32_t *coord);
CK_API uint64_t ck_mesh_rank(const ck_mesh *m, const uint32_t *coord);
CK_API bool ck_mesh_equal(const ck_mesh *a, const ck_mesh *b);

/* CK_BOXES is not a placement: a tensor stored as an explicit list of boxes (format
 * 1.1, ck_decl_tensor_boxes) carries it on every mesh dim in place of placements, so
 * that nothing reads placements it does not have and a 1.0 reader refuses the
 * tensor by its placement code. */
typedef enum ck_place_kind { CK_REPLICATE = 0, CK_SHARD = 1, CK_BOXES = 2 } ck_place_kind;

typedef struct ck_placement {
    uint8_t kind;   /* ck_place_kind */
    uint8_t dim;    /* tensor dim, for CK_SHARD */
} ck_placement;

/* Parses "R,S(0)" (one entry per mesh dim; spaces allowed). An S(d) is checked
 * against tensor_ndim when tensor_ndim >= 0. */
CK_API int ck_placements_parse(const char *s, int mesh_ndim, int tensor_ndim,
                               ck_placement *out, ck_err *err);
/* Writes "R,S(0)" into buf ("boxes" for a box list's CK_BOXES). */
CK_API int ck_placements_format(const ck_placement *p, int mesh_ndim, char *buf, size_t len);
/* The default placement of ckpt-synth and of FSDP: S(0) on the last mesh dim, R
 * on the others. */
CK_API void ck_placements_default(int mesh_ndim, ck_placement *out);

/* Parses a byte size: "4096", "64K", "64KiB", "1MiB", "1MB", "2G", "2GiB", "1GB"
 * (K/M/G/T alone and KiB/MiB/GiB/TiB are powers of 1024; KB/MB/GB/TB of 1000).
 * Rejects negative, fractional, overflowing or empty input. */
CK_API int ck_size_parse(const char *s, uint64_t *out, ck_err *err);

/* Produces bytes on demand: fills dst with len bytes starting at byte off of a
 * source (a shard, a file). 0 or -errno. Saves take one instead of memory when the
 * bytes are generated or streamed (ckpt-synth, copy reshards, consolidation). */
typedef int (*ck_fill_fn)(void *arg, uint64_t off, void *dst, size_t len);

/* Extents and data file sizes are multiples of this, so that files can be written
 * and read with O_DIRECT. */
#define CK_ALIGN 4096u

/* The data path's defaults: the hash block of data files (docs/FORMAT.md) and the
 * size of one write or read. */
#define CK_BLOCK_SIZE_DEFAULT (4u << 20)
#define CK_IO_SIZE_DEFAULT    (1u << 20)

#endif
