/* ck__layout_check accepts sane layouts and rejects, with -EINVAL and the tensor's
 * name in the message, S(d) past the tensor's dims, dims or byte sizes beyond 63
 * bits (without being fooled by wrap-around), and malformed meshes/placements. */
#include "layout_testlib.h"
#include "model/layout.h"

static int expect(int want_rc, const char *tensor, int ndim, const uint64_t *shape,
                  size_t itemsize, const char *mesh, const char *pl, const char *what)
{
    ck_mesh m;
    ck_placement p[CK_MAX_MESH_DIMS];
    ck_err err = {0};
    LT_CHECK(ck_mesh_parse(mesh, NULL, &m, &err) == 0 &&
             ck_placements_parse(pl, m.ndim, -1, p, &err) == 0,
             "%s: setup does not parse: %s", what, ck_err_msg(&err));
    int rc = ck__layout_check(tensor, ndim, shape, itemsize, &m, p, &err);
    if (want_rc == 0) {
        LT_CHECK(rc == 0, "%s: rejected: %s", what, ck_err_msg(&err));
        return 0;
    }
    return lt_expect_einval(rc, &err, what, tensor);
}

int main(void)
{
    const uint64_t big = 1ull << 62;
    int fails = 0;
    fails |= expect(0, "w", 2, (uint64_t[]){8, 4}, 4, "2x2", "S(0),S(1)", "2-D on 2x2");
    fails |= expect(0, "w", 1, (uint64_t[]){3}, 4, "2x2", "S(0),S(0)", "nested S(0)");
    fails |= expect(0, "scalar", 0, NULL, 8, "4", "R", "0-D replicated");
    fails |= expect(0, "empty", 2, (uint64_t[]){0, 5}, 2, "4", "S(1)", "empty tensor");
    fails |= expect(0, "w", 1, (uint64_t[]){big}, 1, "2", "S(0)", "2^62 bytes");
    fails |= expect(0, "w", 1, (uint64_t[]){INT64_MAX}, 1, "2", "R", "2^63-1 bytes");
    /* Partial products overflow but an empty dim makes it 0 bytes. */
    fails |= expect(0, "w", 3, (uint64_t[]){big, big, 0}, 8, "2", "R", "0 x huge");

    fails |= expect(-EINVAL, "layers.3.wq", 2, (uint64_t[]){8, 4}, 4, "2x2", "S(0),S(2)",
                    "S(2) of a 2-D tensor");
    fails |= expect(-EINVAL, "scalar_s", 0, NULL, 4, "2", "S(0)", "S(0) of a 0-D tensor");
    fails |= expect(-EINVAL, "emb", 1, (uint64_t[]){big}, 2, "2", "S(0)",
                    "2^63 bytes");
    fails |= expect(-EINVAL, "emb", 2, (uint64_t[]){1ull << 32, 1ull << 32}, 1, "2", "R",
                    "2^64 elements (wraps to 0)");
    fails |= expect(-EINVAL, "emb", 2, (uint64_t[]){(1ull << 32) + 1, (1ull << 32) - 1},
                    1, "2", "R", "2^64-1 elements");
    fails |= expect(-EINVAL, "huge_dim", 2, (uint64_t[]){UINT64_MAX, 0}, 4, "2", "R",
                    "a dim of 2^64-1 next to an empty one");
    fails |= expect(-EINVAL, "toomany", CK_MAX_NDIM + 1,
                    (uint64_t[CK_MAX_NDIM + 1]){1}, 4, "2", "R", "9 dims");
    fails |= expect(-EINVAL, "noitem", 1, (uint64_t[]){4}, 0, "2", "R", "itemsize 0");

    /* Meshes and placements built by hand rather than parsed. */
    ck_mesh m = {.ndim = 2, .size = {2, 0}};
    ck_placement p[2] = {{CK_SHARD, 0}, {CK_REPLICATE, 0}};
    ck_err err = {0};
    fails |= lt_expect_einval(ck__layout_check("zmesh", 1, (uint64_t[]){4}, 4, &m, p, &err),
                              &err, "mesh dim of size 0", "zmesh");
    m.size[1] = 2;
    p[1].kind = 7;
    ck_err_clear(&err);
    fails |= lt_expect_einval(ck__layout_check("kind7", 1, (uint64_t[]){4}, 4, &m, p, &err),
                              &err, "placement kind 7", "kind7");
    return fails;
}
