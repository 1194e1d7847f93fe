/* The shard boxes must partition the tensor: ranks that differ only along R mesh
 * dims hold the same box, and one rank per such replica group tiles every element
 * exactly once, for all meshes of 1..3 dims with sizes 1..5, placements R/S(0)/S(1)
 * (nested same-dim sharding included), 0-D, 1-element and 0-length shapes. */
#include <stdlib.h>

#include "layout_testlib.h"
#include "model/layout.h"

#define MAX_NUMEL 4096

static int check_case(const ck_mesh *m, const ck_placement *pl, int ndim,
                      const uint64_t *shape, uint32_t *counts, uint32_t *reps)
{
    char what[256];
    lt_describe(what, sizeof what, m, pl, ndim, shape);
    ck_err err = {0};
    int rc = ck__layout_check("t", ndim, shape, 4, m, pl, &err);
    LT_CHECK(rc == 0, "%s: ck__layout_check failed: %s", what, ck_err_msg(&err));

    uint64_t numel = 1, replicas = 1;
    for (int d = 0; d < ndim; d++)
        numel *= shape[d];
    for (int k = 0; k < m->ndim; k++)
        if (pl[k].kind == CK_REPLICATE)
            replicas *= m->size[k];
    memset(counts, 0, numel * sizeof *counts);
    memset(reps, 0, numel * sizeof *reps);

    uint64_t world = ck_mesh_world(m);
    for (uint64_t r = 0; r < world; r++) {
        uint32_t c[CK_MAX_MESH_DIMS], rep[CK_MAX_MESH_DIMS];
        ck_mesh_coord(m, r, c);
        bool representative = true;
        for (int k = 0; k < m->ndim; k++) {
            rep[k] = pl[k].kind == CK_REPLICATE ? 0 : c[k];
            representative &= rep[k] == c[k];
        }
        ck_box b, rb;
        ck_shard_box(ndim, shape, m, pl, c, &b);
        ck_shard_box(ndim, shape, m, pl, rep, &rb);
        LT_CHECK(b.ndim == ndim, "%s: rank %llu box has %d dims", what,
                 (unsigned long long)r, b.ndim);
        LT_CHECK(ck_box_equal(&b, &rb), "%s: rank %llu holds a different box from its "
                 "replica with the R coords at 0", what, (unsigned long long)r);
        for (int d = 0; d < ndim; d++)
            LT_CHECK(b.off[d] <= shape[d] && b.len[d] <= shape[d] - b.off[d],
                     "%s: rank %llu box [%llu,+%llu) leaves dim %d", what,
                     (unsigned long long)r, (unsigned long long)b.off[d],
                     (unsigned long long)b.len[d], d);
        uint64_t g[CK_MAX_NDIM];
        if (!lt_box_first(&b, g))
            continue;
        do {
            uint64_t i = lt_linear(ndim, shape, g);
            counts[i]++;
            reps[i] += representative;
        } while (lt_box_step(&b, g));
    }
    for (uint64_t i = 0; i < numel; i++) {
        LT_CHECK(reps[i] == 1, "%s: element %llu is held by %u replica groups, want 1",
                 what, (unsigned long long)i, reps[i]);
        LT_CHECK(counts[i] == replicas, "%s: element %llu is held by %u ranks, want %llu",
                 what, (unsigned long long)i, counts[i], (unsigned long long)replicas);
    }
    return 0;
}

static const struct {
    int ndim;
    uint64_t shape[3];
} shapes[] = {
    {0, {0}}, {1, {0}}, {1, {1}}, {1, {7}}, {1, {12}}, {2, {0, 3}}, {2, {3, 0}},
    {2, {1, 1}}, {2, {5, 4}}, {2, {9, 2}}, {2, {2, 11}}, {3, {4, 3, 2}},
    {3, {13, 1, 3}}, {3, {6, 0, 2}},
};

static int exhaustive(uint32_t *counts, uint32_t *reps)
{
    ck_mesh m = {0};
    while (lt_next_mesh(&m, 3, 5)) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int ndim = shapes[s].ndim;
            /* R, then S(0) and S(1) where the tensor has those dims. */
            int nchoice = 1 + (ndim < 2 ? ndim : 2);
            int choice[CK_MAX_MESH_DIMS];
            ck_placement pl[CK_MAX_MESH_DIMS];
            lt_placements_reset(choice);
            while (lt_next_placements(choice, m.ndim, nchoice, pl))
                if (check_case(&m, pl, ndim, shapes[s].shape, counts, reps))
                    return 1;
        }
    }
    return 0;
}

static int randomized(uint32_t *counts, uint32_t *reps)
{
    uint64_t seed = 0x5eed0001;
    for (int iter = 0; iter < 5000; iter++) {
        ck_mesh m = {0};
        m.ndim = (int)lt_range(&seed, 1, 3);
        for (int k = 0; k < m.ndim; k++)
            m.size[k] = (uint32_t)lt_range(&seed, 1, 5);
        int ndim = (int)lt_range(&seed, 0, 4);
        uint64_t shape[CK_MAX_NDIM], numel = 1;
        for (int d = 0; d < ndim; d++) {
            shape[d] = lt_range(&seed, 0, 13);
            numel *= shape[d];
        }
        if (numel > MAX_NUMEL)
            continue;
        ck_placement pl[CK_MAX_MESH_DIMS];
        for (int k = 0; k < m.ndim; k++)
            pl[k] = lt_placement((int)lt_range(&seed, 0, (uint64_t)ndim));
        if (check_case(&m, pl, ndim, shape, counts, reps))
            return 1;
    }
    return 0;
}

int main(void)
{
    uint32_t *counts = malloc(MAX_NUMEL * sizeof *counts);
    uint32_t *reps = malloc(MAX_NUMEL * sizeof *reps);
    if (!counts || !reps) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    int rc = exhaustive(counts, reps) || randomized(counts, reps);
    free(counts);
    free(reps);
    return rc;
}
