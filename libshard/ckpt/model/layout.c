/* layout.c - torch.chunk sharding, boxes and contiguous runs (see ck/layout.h). */
#include "ck/layout.h"
#include "model/layout.h"

#include <assert.h>
#include <string.h>

/* min(i * c, n) without wrapping when n is close to 2^64. */
static uint64_t mul_clamp(uint64_t i, uint64_t c, uint64_t n)
{
    if (c != 0 && i > n / c)
        return n;
    return i * c < n ? i * c : n;
}

void ck_chunk(uint64_t n, uint64_t parts, uint64_t idx, uint64_t *off, uint64_t *len)
{
    assert(parts > 0);  /* a mesh dim has at least one rank */
    uint64_t c = n / parts + (n % parts != 0);  /* ceil without n + parts - 1 wrapping */
    uint64_t lo = mul_clamp(idx, c, n);
    uint64_t hi = mul_clamp(idx + 1, c, n);
    *off = lo;
    *len = hi - lo;
}

int ck__layout_check(const char *tensor, int ndim, const uint64_t *shape, size_t itemsize,
                     const ck_mesh *mesh, const ck_placement *pl, ck_err *err)
{
    const uint64_t limit = INT64_MAX;
    if (!tensor)
        tensor = "(unnamed)";
    if (ndim < 0 || ndim > CK_MAX_NDIM)
        return ck_err_set(err, -EINVAL, "tensor \"%s\": %d dims (0..%d)", tensor, ndim,
                          CK_MAX_NDIM);
    if (itemsize == 0)
        return ck_err_set(err, -EINVAL, "tensor \"%s\": element size 0", tensor);
    if (mesh->ndim < 1 || mesh->ndim > CK_MAX_MESH_DIMS)
        return ck_err_set(err, -EINVAL, "tensor \"%s\": mesh with %d dims (1..%d)", tensor,
                          mesh->ndim, CK_MAX_MESH_DIMS);
    for (int m = 0; m < mesh->ndim; m++) {
        if (mesh->size[m] == 0)
            return ck_err_set(err, -EINVAL, "tensor \"%s\": mesh dim %d has size 0",
                              tensor, m);
        if (pl[m].kind != CK_REPLICATE && pl[m].kind != CK_SHARD)
            return ck_err_set(err, -EINVAL, "tensor \"%s\": mesh dim %d has placement "
                              "kind %u", tensor, m, (unsigned)pl[m].kind);
        if (pl[m].kind == CK_SHARD && pl[m].dim >= ndim)
            return ck_err_set(err, -EINVAL, "tensor \"%s\": placement S(%u) on mesh dim "
                              "%d but the tensor has %d dims", tensor, (unsigned)pl[m].dim,
                              m, ndim);
    }
    /* Each dim must fit in an int64 (torch's shapes and the metadata are signed), and
     * so must the byte count; an empty dim makes the byte count 0 whatever the rest. */
    bool empty = false;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] > limit)
            return ck_err_set(err, -EINVAL, "tensor \"%s\": dim %d of size %llu does not "
                              "fit in 63 bits", tensor, d, (unsigned long long)shape[d]);
        empty |= shape[d] == 0;
    }
    if (empty)
        return 0;
    uint64_t bytes = itemsize;
    if (bytes > limit)
        return ck_err_set(err, -EINVAL, "tensor \"%s\": element size %zu too large", tensor,
                          itemsize);
    for (int d = 0; d < ndim; d++) {
        if (bytes > limit / shape[d])
            return ck_err_set(err, -EINVAL, "tensor \"%s\": size in bytes does not fit in "
                              "63 bits", tensor);
        bytes *= shape[d];
    }
    return 0;
}

void ck_shard_box(int ndim, const uint64_t *shape, const ck_mesh *mesh,
                  const ck_placement *pl, const uint32_t *coord, ck_box *out)
{
    ck_box_full(ndim, shape, out);
    /* In mesh-dim order, each S(d) cuts what the earlier mesh dims left of dim d. */
    for (int m = 0; m < mesh->ndim; m++) {
        if (pl[m].kind != CK_SHARD)
            continue;
        int d = pl[m].dim;
        uint64_t off, len;
        ck_chunk(out->len[d], mesh->size[m], coord[m], &off, &len);
        out->off[d] += off;
        out->len[d] = len;
    }
}

void ck_box_full(int ndim, const uint64_t *shape, ck_box *out)
{
    memset(out, 0, sizeof *out);
    out->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        out->len[d] = shape[d];
}

uint64_t ck_box_numel(const ck_box *b)
{
    uint64_t n = 1;
    for (int d = 0; d < b->ndim; d++)
        n *= b->len[d];
    return n;
}

bool ck_box_equal(const ck_box *a, const ck_box *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->off[d] != b->off[d] || a->len[d] != b->len[d])
            return false;
    return true;
}

bool ck__box_intersect(const ck_box *a, const ck_box *b, ck_box *out)
{
    if (a->ndim != b->ndim)
        return false;
    ck_box r;
    memset(&r, 0, sizeof r);
    r.ndim = a->ndim;
    for (int d = 0; d < a->ndim; d++) {
        uint64_t lo = a->off[d] > b->off[d] ? a->off[d] : b->off[d];
        uint64_t ea = a->off[d] + a->len[d], eb = b->off[d] + b->len[d];
        uint64_t hi = ea < eb ? ea : eb;
        if (hi <= lo)
            return false;
        r.off[d] = lo;
        r.len[d] = hi - lo;
    }
    *out = r;  /* through a copy so that out may alias a or b */
    return true;
}

void ck__runs_init(ck__runs *it, const ck_box *sub, const ck_box *src, const ck_box *dst)
{
    assert(sub->ndim == src->ndim && sub->ndim == dst->ndim);
    memset(it, 0, sizeof *it);
    int nd = sub->ndim;
    it->done = ck_box_numel(sub) == 0;

    /* Row-major strides of each box's own storage, and where sub starts in it. */
    uint64_t ss = 1, ds = 1;
    for (int d = nd - 1; d >= 0; d--) {
        it->src_stride[d] = ss;
        it->dst_stride[d] = ds;
        it->src_base += (sub->off[d] - src->off[d]) * ss;
        it->dst_base += (sub->off[d] - dst->off[d]) * ds;
        ss *= src->len[d];
        ds *= dst->len[d];
    }

    /* The run dim k is the outermost one whose inner dims sub, src and dst all cover
     * in full: stepping along k then moves through both storages contiguously. */
    int k = nd - 1;
    while (k > 0 && sub->len[k] == src->len[k] && sub->len[k] == dst->len[k])
        k--;
    it->run = 1;
    for (int d = k < 0 ? 0 : k; d < nd; d++)
        it->run *= sub->len[d];
    for (int d = 0; d < k; d++)
        it->count[d] = sub->len[d];
    /* A 0-D tensor is one run of one element along a run dim of its own. */
    it->ndim = k < 0 ? 1 : k + 1;
}

bool ck__runs_next(ck__runs *it, uint64_t *src_off, uint64_t *dst_off, uint64_t *n)
{
    if (it->done)
        return false;
    uint64_t s = it->src_base, d = it->dst_base;
    for (int i = 0; i < it->ndim - 1; i++) {
        s += it->idx[i] * it->src_stride[i];
        d += it->idx[i] * it->dst_stride[i];
    }
    *src_off = s;
    *dst_off = d;
    *n = it->run;

    /* Odometer over the outer dims, innermost fastest, to keep row-major order. */
    int i = it->ndim - 2;
    for (; i >= 0; i--) {
        if (++it->idx[i] < it->count[i])
            break;
        it->idx[i] = 0;
    }
    if (i < 0)
        it->done = true;
    return true;
}
