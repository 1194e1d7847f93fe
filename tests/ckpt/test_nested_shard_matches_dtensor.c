/* When several mesh dims shard one tensor dim, DTensor applies them in mesh-dim
 * order, each torch.chunk-ing what the previous left. ck_shard_box must agree with
 * a simulation that carries explicit index lists through those cuts, and with
 * hand-worked cases where the nested split differs from one flat split. */
#include "layout_testlib.h"

#define MAX_N 64

/* DTensor's local range along dim d for coordinate c: start from every index of
 * the dim and, per mesh dim sharding d, keep the coord's torch.chunk of the list. */
static void simulate_dim(uint64_t n, int d, const ck_mesh *m, const ck_placement *pl,
                         const uint32_t *c, uint64_t *first, uint64_t *count)
{
    uint64_t list[MAX_N], cnt = n;
    for (uint64_t i = 0; i < n; i++)
        list[i] = i;
    for (int k = 0; k < m->ndim; k++) {
        if (pl[k].kind != CK_SHARD || pl[k].dim != d)
            continue;
        uint64_t off[8], len[8];
        lt_torch_chunk(cnt, m->size[k], off, len);
        memmove(list, list + off[c[k]], len[c[k]] * sizeof *list);
        cnt = len[c[k]];
    }
    *first = cnt ? list[0] : 0;
    *count = cnt;
}

static int check_case(const ck_mesh *m, const ck_placement *pl, int ndim,
                      const uint64_t *shape)
{
    char what[256];
    lt_describe(what, sizeof what, m, pl, ndim, shape);
    uint64_t world = ck_mesh_world(m);
    for (uint64_t r = 0; r < world; r++) {
        uint32_t c[CK_MAX_MESH_DIMS];
        ck_mesh_coord(m, r, c);
        ck_box b;
        ck_shard_box(ndim, shape, m, pl, c, &b);
        for (int d = 0; d < ndim; d++) {
            uint64_t first, count;
            simulate_dim(shape[d], d, m, pl, c, &first, &count);
            /* An empty shard's offset is not pinned down (torch versions differ). */
            LT_CHECK(b.len[d] == count && (count == 0 || b.off[d] == first),
                     "%s: rank %llu dim %d: box [%llu,+%llu), DTensor gives [%llu,+%llu)",
                     what, (unsigned long long)r, d, (unsigned long long)b.off[d],
                     (unsigned long long)b.len[d], (unsigned long long)first,
                     (unsigned long long)count);
        }
    }
    return 0;
}

/* 10 elements on a 2x3 mesh, S(0) on both dims: halves [0,5) and [5,10), each cut
 * in chunks of 2; a flat 6-way chunk would give [4,6) to coord (0,2) instead. */
static int check_hand_cases(void)
{
    static const struct {
        const char *mesh, *pl;
        uint64_t n;
        uint64_t off[6], len[6];  /* per rank, dim 0 */
    } cases[] = {
        {"2x3", "S(0),S(0)", 10, {0, 2, 4, 5, 7, 9}, {2, 2, 1, 2, 2, 1}},
        {"3x2", "S(0),S(0)", 10, {0, 2, 4, 6, 8, 9}, {2, 2, 2, 2, 1, 1}},
        {"2x2", "S(0),S(0)", 7, {0, 2, 4, 6}, {2, 2, 2, 1}},
        {"2x3", "S(0),R", 5, {0, 0, 0, 3, 3, 3}, {3, 3, 3, 2, 2, 2}},
        {"2x3", "R,S(0)", 5, {0, 2, 4, 0, 2, 4}, {2, 2, 1, 2, 2, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_mesh m;
        ck_placement pl[CK_MAX_MESH_DIMS];
        ck_err err = {0};
        LT_CHECK(ck_mesh_parse(cases[i].mesh, NULL, &m, &err) == 0 &&
                 ck_placements_parse(cases[i].pl, m.ndim, 1, pl, &err) == 0,
                 "case %zu does not parse: %s", i, ck_err_msg(&err));
        for (uint64_t r = 0; r < ck_mesh_world(&m); r++) {
            uint32_t c[CK_MAX_MESH_DIMS];
            ck_mesh_coord(&m, r, c);
            ck_box b;
            ck_shard_box(1, &cases[i].n, &m, pl, c, &b);
            LT_CHECK(b.off[0] == cases[i].off[r] && b.len[0] == cases[i].len[r],
                     "n=%llu mesh %s %s rank %llu: box [%llu,+%llu), want [%llu,+%llu)",
                     (unsigned long long)cases[i].n, cases[i].mesh, cases[i].pl,
                     (unsigned long long)r, (unsigned long long)b.off[0],
                     (unsigned long long)b.len[0], (unsigned long long)cases[i].off[r],
                     (unsigned long long)cases[i].len[r]);
        }
    }
    return 0;
}

static int exhaustive(void)
{
    ck_mesh m = {0};
    while (lt_next_mesh(&m, 3, 5)) {
        for (uint64_t a = 0; a <= 13; a++) {
            for (uint64_t b = 0; b <= 6; b += 3) {
                uint64_t shape[2] = {a, b};
                int choice[CK_MAX_MESH_DIMS];
                ck_placement pl[CK_MAX_MESH_DIMS];
                lt_placements_reset(choice);
                while (lt_next_placements(choice, m.ndim, 3, pl))
                    if (check_case(&m, pl, 2, shape))
                        return 1;
            }
        }
    }
    return 0;
}

static int randomized(void)
{
    uint64_t seed = 0x5eed0002;
    for (int iter = 0; iter < 20000; iter++) {
        ck_mesh m = {0};
        m.ndim = (int)lt_range(&seed, 1, 4);
        for (int k = 0; k < m.ndim; k++)
            m.size[k] = (uint32_t)lt_range(&seed, 1, 8);
        int ndim = (int)lt_range(&seed, 1, 4);
        uint64_t shape[CK_MAX_NDIM];
        for (int d = 0; d < ndim; d++)
            shape[d] = lt_range(&seed, 0, MAX_N);
        ck_placement pl[CK_MAX_MESH_DIMS];
        for (int k = 0; k < m.ndim; k++)
            pl[k] = lt_placement((int)lt_range(&seed, 0, (uint64_t)ndim));
        if (check_case(&m, pl, ndim, shape))
            return 1;
    }
    return 0;
}

int main(void)
{
    if (check_hand_cases() || exhaustive() || randomized())
        return 1;
    return 0;
}
