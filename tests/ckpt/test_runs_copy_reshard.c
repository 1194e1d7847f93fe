/* Resharding by runs: a tensor of global indices is cut into shards on mesh A, and
 * every shard of mesh B is assembled by copying, run by run, the intersections with
 * A's shards. Every target element must end up equal to its global index; runs must
 * stay inside both storages, be maximal, and be exactly one per intersection when
 * both sides shard only dim 0. */
#include <stdlib.h>

#include "layout_testlib.h"
#include "model/layout.h"

#define MAX_NUMEL 2048
#define UNSET UINT64_MAX
#define MAX_SHARDS 125  /* the largest mesh here is 5x5x5 */

typedef struct shard {
    ck_box box;
    uint64_t *data;
} shard;

/* The distinct boxes of a mesh: one rank per replica group (R coords at 0), each
 * with its storage filled with the global indices it holds. */
static int make_sources(int ndim, const uint64_t *shape, const ck_mesh *m,
                        const ck_placement *pl, shard *out, int *n)
{
    *n = 0;
    for (uint64_t r = 0; r < ck_mesh_world(m); r++) {
        uint32_t c[CK_MAX_MESH_DIMS];
        ck_mesh_coord(m, r, c);
        bool representative = true;
        for (int k = 0; k < m->ndim; k++)
            representative &= pl[k].kind == CK_SHARD || c[k] == 0;
        if (!representative)
            continue;
        shard *s = &out[(*n)++];
        ck_shard_box(ndim, shape, m, pl, c, &s->box);
        s->data = malloc((ck_box_numel(&s->box) + 1) * sizeof *s->data);
        LT_CHECK(s->data, "out of memory");
        uint64_t g[CK_MAX_NDIM], i = 0;
        if (lt_box_first(&s->box, g))
            do
                s->data[i++] = lt_linear(ndim, shape, g);
            while (lt_box_step(&s->box, g));
    }
    return 0;
}

static int copy_by_runs(const char *what, const shard *src, const ck_box *dst_box,
                        uint64_t *dst, bool want_one_run)
{
    ck_box sub;
    if (!ck__box_intersect(&src->box, dst_box, &sub))
        return 0;
    uint64_t sn = ck_box_numel(&src->box), dn = ck_box_numel(dst_box);
    uint64_t total = 0, runs = 0, ps = 0, pd = 0;
    ck__runs it;
    ck__runs_init(&it, &sub, &src->box, dst_box);
    uint64_t s, d, n;
    while (ck__runs_next(&it, &s, &d, &n)) {
        LT_CHECK(n > 0 && s < sn && n <= sn - s && d < dn && n <= dn - d,
                 "%s: run src %llu dst %llu n %llu leaves storages of %llu and %llu", what,
                 (unsigned long long)s, (unsigned long long)d, (unsigned long long)n,
                 (unsigned long long)sn, (unsigned long long)dn);
        LT_CHECK(runs == 0 || ps != s || pd != d,
                 "%s: run at src %llu dst %llu continues the previous one in both "
                 "storages (runs not maximal)", what, (unsigned long long)s,
                 (unsigned long long)d);
        memcpy(dst + d, src->data + s, n * sizeof *dst);
        ps = s + n;
        pd = d + n;
        total += n;
        runs++;
    }
    LT_CHECK(total == ck_box_numel(&sub), "%s: runs cover %llu elements of a %llu-element "
             "intersection", what, (unsigned long long)total,
             (unsigned long long)ck_box_numel(&sub));
    LT_CHECK(!want_one_run || runs == 1, "%s: dim-0 sharding took %llu runs for one "
             "intersection, want 1", what, (unsigned long long)runs);
    return 0;
}

static bool only_dim0(const ck_mesh *m, const ck_placement *pl)
{
    for (int k = 0; k < m->ndim; k++)
        if (pl[k].kind == CK_SHARD && pl[k].dim != 0)
            return false;
    return true;
}

static int reshard_case(int ndim, const uint64_t *shape, const ck_mesh *ma,
                        const ck_placement *pa, const ck_mesh *mb, const ck_placement *pb)
{
    char da[256], db[256], what[600];
    lt_describe(da, sizeof da, ma, pa, ndim, shape);
    lt_describe(db, sizeof db, mb, pb, ndim, shape);
    shard src[MAX_SHARDS];
    int nsrc = 0, rc = 0;
    bool want_one_run = only_dim0(ma, pa) && only_dim0(mb, pb);
    uint64_t *dst = NULL;
    if (make_sources(ndim, shape, ma, pa, src, &nsrc)) {
        rc = 1;
        goto out;
    }
    dst = malloc((MAX_NUMEL + 1) * sizeof *dst);
    if (!dst) {
        fprintf(stderr, "out of memory\n");
        rc = 1;
        goto out;
    }
    for (uint64_t r = 0; r < ck_mesh_world(mb) && rc == 0; r++) {
        uint32_t c[CK_MAX_MESH_DIMS];
        ck_mesh_coord(mb, r, c);
        ck_box box;
        ck_shard_box(ndim, shape, mb, pb, c, &box);
        snprintf(what, sizeof what, "from %s to %s, target rank %llu", da, db,
                 (unsigned long long)r);
        uint64_t dn = ck_box_numel(&box);
        for (uint64_t i = 0; i < dn; i++)
            dst[i] = UNSET;
        for (int i = 0; i < nsrc && rc == 0; i++)
            rc = copy_by_runs(what, &src[i], &box, dst, want_one_run);
        uint64_t g[CK_MAX_NDIM], i = 0;
        if (rc == 0 && lt_box_first(&box, g)) {
            do {
                uint64_t want = lt_linear(ndim, shape, g);
                if (dst[i] != want) {
                    fprintf(stderr, "FAIL %s: element %llu of the shard is %llu, want "
                            "global index %llu\n", what, (unsigned long long)i,
                            (unsigned long long)dst[i], (unsigned long long)want);
                    rc = 1;
                    break;
                }
                i++;
            } while (lt_box_step(&box, g));
        }
    }
out:
    for (int i = 0; i < nsrc; i++)
        free(src[i].data);
    free(dst);
    return rc;
}

static const struct {
    int ndim;
    uint64_t shape[3];
} shapes[] = {
    {0, {0}}, {1, {0}}, {1, {1}}, {1, {7}}, {2, {5, 4}}, {2, {0, 3}}, {2, {4, 1}},
    {3, {3, 5, 2}},
};

/* Every pair of meshes of 1..2 dims with sizes 1..3 and every R/S(0)/S(1) choice. */
static int exhaustive(void)
{
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int ndim = shapes[s].ndim;
        int nchoice = 1 + (ndim < 2 ? ndim : 2);
        ck_mesh ma = {0};
        while (lt_next_mesh(&ma, 2, 3)) {
            int ca[CK_MAX_MESH_DIMS];
            ck_placement pa[CK_MAX_MESH_DIMS];
            lt_placements_reset(ca);
            while (lt_next_placements(ca, ma.ndim, nchoice, pa)) {
                ck_mesh mb = {0};
                while (lt_next_mesh(&mb, 2, 3)) {
                    int cb[CK_MAX_MESH_DIMS];
                    ck_placement pb[CK_MAX_MESH_DIMS];
                    lt_placements_reset(cb);
                    while (lt_next_placements(cb, mb.ndim, nchoice, pb))
                        if (reshard_case(ndim, shapes[s].shape, &ma, pa, &mb, pb))
                            return 1;
                }
            }
        }
    }
    return 0;
}

static void random_side(uint64_t *seed, int ndim, bool dim0, ck_mesh *m, ck_placement *pl)
{
    memset(m, 0, sizeof *m);
    m->ndim = (int)lt_range(seed, 1, 3);
    for (int k = 0; k < m->ndim; k++) {
        m->size[k] = (uint32_t)lt_range(seed, 1, 5);
        pl[k] = lt_placement((int)lt_range(seed, 0, dim0 ? 1 : (uint64_t)ndim));
    }
}

/* Meshes up to 3-D with sizes up to 5, tensors up to 4-D, any S(d); every fourth
 * case shards only dim 0 on both sides to exercise the one-run guarantee. */
static int randomized(void)
{
    uint64_t seed = 0x5eed0003;
    for (int iter = 0; iter < 3000; iter++) {
        int ndim = (int)lt_range(&seed, 1, 4);
        uint64_t shape[CK_MAX_NDIM], numel = 1;
        for (int d = 0; d < ndim; d++) {
            shape[d] = lt_range(&seed, 0, 11);
            numel *= shape[d];
        }
        if (numel > MAX_NUMEL)
            continue;
        bool dim0 = iter % 4 == 0;
        ck_mesh ma, mb;
        ck_placement pa[CK_MAX_MESH_DIMS], pb[CK_MAX_MESH_DIMS];
        random_side(&seed, ndim, dim0, &ma, pa);
        random_side(&seed, ndim, dim0, &mb, pb);
        if (reshard_case(ndim, shape, &ma, pa, &mb, pb))
            return 1;
    }
    return 0;
}

int main(void)
{
    if (exhaustive() || randomized())
        return 1;
    return 0;
}
