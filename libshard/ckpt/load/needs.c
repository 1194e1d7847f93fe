/* needs.c - which data files a load touches, without reading any (ck_load_files, see
 * ck/load.h).
 *
 * A rank restoring from copies spread over nodes asks its node for exactly the files
 * its boxes lie in: onto the same mesh, its own part; onto another, whatever its new
 * boxes meet. Each box is intersected with the saved shards as a load does; of a
 * shard it meets, the bytes wanted lie between the intersection's first and last
 * element in the shard's row-major storage, and the extents that overlap that range
 * are the ones a load would read: their files are marked. The range may hold bytes a
 * load skips (a narrow column of a wide shard), never miss one it reads.
 */
#include <stdlib.h>
#include <string.h>

#include "ck/load.h"
#include "format/reader_int.h"
#include "model/layout.h"

/* Row-major index, in box b's own storage, of the element at global position p. */
static uint64_t index_in(const ck_box *b, const uint64_t *p)
{
    uint64_t k = 0;
    for (int d = 0; d < b->ndim; d++)
        k = k * b->len[d] + (p[d] - b->off[d]);
    return k;
}

/* Marks the files of s's extents that overlap bytes [lo, hi) of its storage. */
static void mark(const ck_shard *s, uint64_t lo, uint64_t hi, uint8_t *need)
{
    uint64_t pos = 0;
    for (uint32_t i = 0; i < s->n_extents && pos < hi; i++) {
        if (pos + s->ext[i].len > lo && s->ext[i].len)
            need[s->ext[i].file] = 1;
        pos += s->ext[i].len;
    }
}

static int item_files(const ck_tensor *t, const ck_shard *sh, uint32_t nsh,
                      const ck_load_item *it, uint8_t *need, ck_err *err)
{
    if (it->box.ndim != t->ndim)
        return ck_err_set(err, -EINVAL, "tensor %s: a %d-D box for a %d-D tensor", t->name,
                          it->box.ndim, t->ndim);
    for (int d = 0; d < t->ndim; d++)
        if (it->box.off[d] > t->shape[d] || it->box.len[d] > t->shape[d] - it->box.off[d])
            return ck_err_set(err, -EINVAL, "tensor %s: the box asked for lies outside its shape",
                              t->name);
    size_t is = ck_dtype_size(t->dtype);
    for (uint32_t i = 0; i < nsh; i++) {
        ck_box x;
        if (!ck__box_intersect(&it->box, &sh[i].box, &x) || ck_box_numel(&x) == 0)
            continue;
        uint64_t last[CK_MAX_NDIM];
        for (int d = 0; d < x.ndim; d++)
            last[d] = x.off[d] + x.len[d] - 1;
        mark(&sh[i], index_in(&sh[i].box, x.off) * is, (index_in(&sh[i].box, last) + 1) * is,
             need);
    }
    return 0;
}

int ck_load_files(ck_ckpt *ck, const ck_load_item *items, size_t n, uint8_t *need, ck_err *err)
{
    memset(need, 0, ck->info.n_files);
    ck_tensor t = { .name = "" };
    ck_shard *sh = NULL;
    uint32_t nsh = 0;
    int r = 0;
    for (size_t i = 0; r == 0 && i < n; i++) {
        if (!sh || strcmp(t.name, items[i].tensor) != 0) {
            free(sh);
            sh = NULL;
            if ((r = ck_tensor_get(ck, items[i].tensor, &t, err)) < 0 ||
                (r = ck_shards_get(ck, &t, &sh, &nsh, err)) < 0)
                break;
        }
        r = item_files(&t, sh, nsh, &items[i], need, err);
    }
    free(sh);
    return r;
}
