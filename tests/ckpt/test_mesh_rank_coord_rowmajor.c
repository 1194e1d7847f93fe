/* Ranks map to coordinates row-major, as DeviceMesh(arange(world).view(shape)):
 * enumerating coordinates with the last dim fastest must meet ranks 0, 1, 2, ...
 * in order, and ck_mesh_rank must invert ck_mesh_coord, on all meshes of 1..4 dims
 * with sizes 1..5 and on a few large ones. */
#include "layout_testlib.h"

static int check_mesh(const ck_mesh *m)
{
    char ms[64];
    ck_mesh_format(m, ms, sizeof ms);
    uint32_t want[CK_MAX_MESH_DIMS] = {0};
    uint64_t world = ck_mesh_world(m);
    for (uint64_t r = 0; r < world; r++) {
        uint32_t c[CK_MAX_MESH_DIMS];
        ck_mesh_coord(m, r, c);
        for (int d = 0; d < m->ndim; d++)
            LT_CHECK(c[d] == want[d], "mesh %s rank %llu: coord[%d] = %u, want %u", ms,
                     (unsigned long long)r, d, c[d], want[d]);
        LT_CHECK(ck_mesh_rank(m, c) == r, "mesh %s: rank of coord of %llu is %llu", ms,
                 (unsigned long long)r, (unsigned long long)ck_mesh_rank(m, c));
        /* The next coordinate of arange(world).view(shape), last dim fastest. */
        for (int d = m->ndim - 1; d >= 0 && ++want[d] == m->size[d]; d--)
            want[d] = 0;
    }
    return 0;
}

int main(void)
{
    ck_mesh m = {0};
    uint64_t total = 0;
    while (lt_next_mesh(&m, 4, 5)) {
        uint64_t w = 1;
        for (int d = 0; d < m.ndim; d++)
            w *= m.size[d];
        LT_CHECK(ck_mesh_world(&m) == w, "world of a %d-D mesh is %llu, want %llu",
                 m.ndim, (unsigned long long)ck_mesh_world(&m), (unsigned long long)w);
        if (check_mesh(&m))
            return 1;
        total++;
    }
    LT_CHECK(total == 5 + 25 + 125 + 625, "visited %llu meshes, want 780",
             (unsigned long long)total);
    const char *big[] = {"1048576", "1024x1024", "16x16x16x256", "7x3x11"};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        ck_err err = {0};
        LT_CHECK(ck_mesh_parse(big[i], NULL, &m, &err) == 0, "%s: %s", big[i],
                 ck_err_msg(&err));
        if (check_mesh(&m))
            return 1;
    }
    return 0;
}
