/* types.c - dtypes, device meshes, placements and byte sizes (see ck/types.h). */
#include "ck/types.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The dtype table: one row per dtype, indexed by code, so that nothing about a dtype
 * is written twice (docs/FORMAT.md, "dtypes"). Row 0 is the "not a dtype" hole left
 * by the on-disk codes starting at 1. */
#define FLT(e, m) CK_KIND_FLOAT, e, m, false
static const ck_dtype_info dtypes[CK_DTYPE_MAX + 1] = {
    [CK_F32]    = {CK_F32,    "f32",    4,  "float32",       "F32",     FLT(8, 23)},
    [CK_BF16]   = {CK_BF16,   "bf16",   2,  "bfloat16",      "BF16",    FLT(8, 7)},
    [CK_F16]    = {CK_F16,    "f16",    2,  "float16",       "F16",     FLT(5, 10)},
    [CK_F64]    = {CK_F64,    "f64",    8,  "float64",       "F64",     FLT(11, 52)},
    [CK_I64]    = {CK_I64,    "i64",    8,  "int64",         "I64",     CK_KIND_INT, 0, 0, false},
    [CK_I32]    = {CK_I32,    "i32",    4,  "int32",         "I32",     CK_KIND_INT, 0, 0, false},
    [CK_I16]    = {CK_I16,    "i16",    2,  "int16",         "I16",     CK_KIND_INT, 0, 0, false},
    [CK_I8]     = {CK_I8,     "i8",     1,  "int8",          "I8",      CK_KIND_INT, 0, 0, false},
    [CK_U8]     = {CK_U8,     "u8",     1,  "uint8",         "U8",      CK_KIND_UINT, 0, 0, false},
    [CK_BOOL]   = {CK_BOOL,   "bool",   1,  "bool",          "BOOL",    CK_KIND_BOOL, 0, 0, false},
    [CK_U16]    = {CK_U16,    "u16",    2,  "uint16",        "U16",     CK_KIND_UINT, 0, 0, false},
    [CK_U32]    = {CK_U32,    "u32",    4,  "uint32",        "U32",     CK_KIND_UINT, 0, 0, false},
    [CK_U64]    = {CK_U64,    "u64",    8,  "uint64",        "U64",     CK_KIND_UINT, 0, 0, false},
    [CK_F8E4M3] = {CK_F8E4M3, "f8e4m3", 1,  "float8_e4m3fn", "F8_E4M3", CK_KIND_FLOAT, 4, 3, true},
    [CK_F8E5M2] = {CK_F8E5M2, "f8e5m2", 1,  "float8_e5m2",   "F8_E5M2", FLT(5, 2)},
    [CK_C64]    = {CK_C64,    "c64",    8,  "complex64",     NULL,      CK_KIND_COMPLEX, 8, 23, false},
    [CK_C128]   = {CK_C128,   "c128",   16, "complex128",    NULL,      CK_KIND_COMPLEX, 11, 52, false},
};
#undef FLT

const ck_dtype_info *ck_dtype_info_of(int dtype)
{
    if (dtype < 1 || dtype > CK_DTYPE_MAX || !dtypes[dtype].name)
        return NULL;
    return &dtypes[dtype];
}

size_t ck_dtype_size(int dtype)
{
    const ck_dtype_info *i = ck_dtype_info_of(dtype);
    return i ? i->size : 0;
}

const char *ck_dtype_name(int dtype)
{
    const ck_dtype_info *i = ck_dtype_info_of(dtype);
    return i ? i->name : NULL;
}

int ck_dtype_parse(const char *s, ck_dtype *out, ck_err *err)
{
    if (!s)
        s = "";
    char names[CK_DTYPE_MAX * 8];
    size_t n = 0;
    for (int d = 1; d <= CK_DTYPE_MAX; d++) {
        const ck_dtype_info *i = ck_dtype_info_of(d);
        if (!i)
            continue;
        if (strcmp(s, i->name) == 0 || strcmp(s, i->torch) == 0) {
            *out = i->code;
            return 0;
        }
        n += (size_t)snprintf(names + n, n < sizeof names ? sizeof names - n : 0, "%s%s",
                              n ? ", " : "", i->name);
    }
    return ck_err_set(err, -EINVAL, "unknown dtype \"%s\" (expected one of %s)", s, names);
}

/* Appends like snprintf but keeps counting once buf is full, so the formatters can
 * return the length snprintf would have and callers can size a buffer with them. */
static void fmt_append(char *buf, size_t len, size_t *pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void fmt_append(char *buf, size_t len, size_t *pos, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool room = *pos < len;
    int n = vsnprintf(room ? buf + *pos : NULL, room ? len - *pos : 0, fmt, ap);
    va_end(ap);
    if (n > 0)
        *pos += (size_t)n;
}

/* Reads a run of decimal digits at *p as an unsigned value no larger than max.
 * Returns 1 on success, 0 when there are no digits, -1 when the value exceeds max. */
static int parse_digits(const char **p, uint64_t max, uint64_t *out)
{
    const char *s = *p;
    uint64_t v = 0;
    bool big = false;
    while (*s >= '0' && *s <= '9') {
        unsigned dig = (unsigned)(*s - '0');
        if (dig > max || v > (max - dig) / 10)
            big = true;
        else
            v = v * 10 + dig;
        s++;
    }
    if (s == *p)
        return 0;
    *p = s;
    *out = v;
    return big ? -1 : 1;
}

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
}

static int parse_mesh_names(const char *names, ck_mesh *m, ck_err *err)
{
    const char *p = names;
    for (int d = 0;; d++) {
        size_t n = 0;
        while (is_name_char(p[n]))
            n++;
        if (p[n] != ',' && p[n] != '\0')
            return ck_err_set(err, -EINVAL, "mesh dim names \"%s\": bad character '%c' "
                              "(names are [A-Za-z0-9_-]+)", names, p[n]);
        if (n == 0)
            return ck_err_set(err, -EINVAL, "mesh dim names \"%s\": name %d is empty",
                              names, d);
        if (n >= CK_MESH_NAME_MAX)
            return ck_err_set(err, -EINVAL, "mesh dim names \"%s\": name %d is longer "
                              "than %d bytes", names, d, CK_MESH_NAME_MAX - 1);
        if (d >= m->ndim)
            return ck_err_set(err, -EINVAL, "mesh dim names \"%s\": more names than the "
                              "%d dims of the mesh", names, m->ndim);
        memcpy(m->name[d], p, n);
        m->name[d][n] = '\0';
        /* DeviceMesh requires unique names: a duplicate makes "the dp dim" ambiguous. */
        for (int e = 0; e < d; e++)
            if (strcmp(m->name[e], m->name[d]) == 0)
                return ck_err_set(err, -EINVAL, "mesh dim names \"%s\": \"%s\" appears "
                                  "twice", names, m->name[d]);
        p += n;
        if (*p == '\0') {
            if (d + 1 != m->ndim)
                return ck_err_set(err, -EINVAL, "mesh dim names \"%s\": %d names for "
                                  "the %d dims of the mesh", names, d + 1, m->ndim);
            return 0;
        }
        p++;
    }
}

int ck_mesh_parse(const char *shape, const char *names, ck_mesh *out, ck_err *err)
{
    if (!shape)
        shape = "";
    ck_mesh m;
    memset(&m, 0, sizeof m);
    uint64_t world = 1;
    const char *p = shape;
    for (;;) {
        if (m.ndim == CK_MAX_MESH_DIMS)
            return ck_err_set(err, -EINVAL, "mesh \"%s\": more than %d dims", shape,
                              CK_MAX_MESH_DIMS);
        uint64_t v;
        int r = parse_digits(&p, CK_MAX_WORLD, &v);
        if (r == 0)
            return ck_err_set(err, -EINVAL, "mesh \"%s\": expected sizes like \"2x8\"",
                              shape);
        /* world and v are both <= 2^20 here, so the product cannot wrap. */
        if (r < 0 || world * v > CK_MAX_WORLD)
            return ck_err_set(err, -EINVAL, "mesh \"%s\": more than %u ranks", shape,
                              CK_MAX_WORLD);
        if (v == 0)
            return ck_err_set(err, -EINVAL, "mesh \"%s\": dim %d has size 0", shape,
                              m.ndim);
        world *= v;
        m.size[m.ndim++] = (uint32_t)v;
        if (*p == '\0')
            break;
        if (*p != 'x')
            return ck_err_set(err, -EINVAL, "mesh \"%s\": expected sizes like \"2x8\"",
                              shape);
        p++;
    }
    if (names) {
        int rc = parse_mesh_names(names, &m, err);
        if (rc < 0)
            return rc;
    }
    *out = m;
    return 0;
}

int ck_mesh_format(const ck_mesh *m, char *buf, size_t len)
{
    size_t pos = 0;
    if (len > 0)
        buf[0] = '\0';
    for (int d = 0; d < m->ndim; d++)
        fmt_append(buf, len, &pos, d ? "x%u" : "%u", (unsigned)m->size[d]);
    return (int)pos;
}

uint64_t ck_mesh_world(const ck_mesh *m)
{
    uint64_t w = 1;
    for (int d = 0; d < m->ndim; d++)
        w *= m->size[d];
    return w;
}

void ck_mesh_coord(const ck_mesh *m, uint64_t rank, uint32_t *coord)
{
    for (int d = m->ndim - 1; d >= 0; d--) {
        coord[d] = (uint32_t)(rank % m->size[d]);
        rank /= m->size[d];
    }
}

uint64_t ck_mesh_rank(const ck_mesh *m, const uint32_t *coord)
{
    uint64_t r = 0;
    for (int d = 0; d < m->ndim; d++)
        r = r * m->size[d] + coord[d];
    return r;
}

/* Names count: tools address mesh dims by name, so "dp,tp" and "tp,dp" over the
 * same sizes are different meshes to them. */
bool ck_mesh_equal(const ck_mesh *a, const ck_mesh *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->size[d] != b->size[d] ||
            strncmp(a->name[d], b->name[d], CK_MESH_NAME_MAX) != 0)
            return false;
    return true;
}

static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/* Parses one entry ("R", "S(1)") at *p; the caller names the entry in errors. */
static bool parse_placement(const char **p, ck_placement *out)
{
    const char *s = skip_ws(*p);
    if (*s == 'R') {
        out->kind = CK_REPLICATE;
        out->dim = 0;
        s++;
    } else if (*s == 'S') {
        s = skip_ws(s + 1);
        if (*s != '(')
            return false;
        s = skip_ws(s + 1);
        uint64_t d;
        if (parse_digits(&s, CK_MAX_NDIM - 1, &d) != 1)
            return false;
        s = skip_ws(s);
        if (*s != ')')
            return false;
        out->kind = CK_SHARD;
        out->dim = (uint8_t)d;
        s++;
    } else {
        return false;
    }
    *p = skip_ws(s);
    return true;
}

int ck_placements_parse(const char *s, int mesh_ndim, int tensor_ndim,
                        ck_placement *out, ck_err *err)
{
    if (!s)
        s = "";
    if (mesh_ndim < 1 || mesh_ndim > CK_MAX_MESH_DIMS)
        return ck_err_set(err, -EINVAL, "placements \"%s\": mesh has %d dims (1..%d)", s,
                          mesh_ndim, CK_MAX_MESH_DIMS);
    if (tensor_ndim > CK_MAX_NDIM)
        return ck_err_set(err, -EINVAL, "placements \"%s\": tensor has %d dims (max %d)",
                          s, tensor_ndim, CK_MAX_NDIM);
    ck_placement pl[CK_MAX_MESH_DIMS];
    const char *p = s;
    int n = 0;
    for (;;) {
        const char *entry = p;
        size_t elen = strcspn(entry, ",");
        ck_placement one;
        if (!parse_placement(&p, &one) || (*p != ',' && *p != '\0'))
            return ck_err_set(err, -EINVAL, "placements \"%s\": bad entry \"%.*s\" "
                              "(expected R or S(<dim>))", s, (int)elen, entry);
        if (one.kind == CK_SHARD && tensor_ndim >= 0 && one.dim >= tensor_ndim)
            return ck_err_set(err, -EINVAL, "placements \"%s\": \"%.*s\" shards dim %d "
                              "of a %d-D tensor", s, (int)elen, entry, one.dim,
                              tensor_ndim);
        if (n == mesh_ndim)
            return ck_err_set(err, -EINVAL, "placements \"%s\": more entries than the %d "
                              "dims of the mesh", s, mesh_ndim);
        pl[n++] = one;
        if (*p == '\0')
            break;
        p++;
    }
    if (n != mesh_ndim)
        return ck_err_set(err, -EINVAL, "placements \"%s\": %d entries for a %d-D mesh",
                          s, n, mesh_ndim);
    memcpy(out, pl, (size_t)n * sizeof *pl);
    return 0;
}

int ck_placements_format(const ck_placement *p, int mesh_ndim, char *buf, size_t len)
{
    size_t pos = 0;
    if (len > 0)
        buf[0] = '\0';
    if (mesh_ndim > 0 && p[0].kind == CK_BOXES)   /* a box list has no placements */
        fmt_append(buf, len, &pos, "boxes");
    for (int d = 0; d < mesh_ndim && p[0].kind != CK_BOXES; d++) {
        const char *sep = d ? "," : "";
        if (p[d].kind == CK_SHARD)
            fmt_append(buf, len, &pos, "%sS(%u)", sep, (unsigned)p[d].dim);
        else
            fmt_append(buf, len, &pos, "%sR", sep);
    }
    return (int)pos;
}

void ck_placements_default(int mesh_ndim, ck_placement *out)
{
    for (int d = 0; d < mesh_ndim; d++) {
        out[d].kind = d == mesh_ndim - 1 ? CK_SHARD : CK_REPLICATE;
        out[d].dim = 0;
    }
}

int ck_size_parse(const char *s, uint64_t *out, ck_err *err)
{
    static const struct {
        const char *suffix;
        uint64_t mult;
    } units[] = {
        {"", 1},
        {"K", 1ull << 10}, {"M", 1ull << 20}, {"G", 1ull << 30}, {"T", 1ull << 40},
        {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30}, {"TiB", 1ull << 40},
        {"KB", 1000ull}, {"MB", 1000000ull}, {"GB", 1000000000ull},
        {"TB", 1000000000000ull},
    };
    if (!s)
        s = "";
    if (*s == '-')
        return ck_err_set(err, -EINVAL, "size \"%s\": negative", s);
    const char *p = s;
    uint64_t v;
    int r = parse_digits(&p, UINT64_MAX, &v);
    if (r == 0)
        return ck_err_set(err, -EINVAL, "size \"%s\": expected a whole number of bytes "
                          "like 4096, 64K or 1GiB", s);
    if (*p == '.' || *p == ',')
        return ck_err_set(err, -EINVAL, "size \"%s\": fractional sizes are not accepted",
                          s);
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(p, units[i].suffix) != 0)
            continue;
        if (r < 0 || v > UINT64_MAX / units[i].mult)
            return ck_err_set(err, -EINVAL, "size \"%s\": does not fit in 64 bits", s);
        *out = v * units[i].mult;
        return 0;
    }
    return ck_err_set(err, -EINVAL, "size \"%s\": unknown unit \"%s\" (K, M, G, T, KiB, "
                      "MiB, GiB, TiB, KB, MB, GB, TB)", s, p);
}
