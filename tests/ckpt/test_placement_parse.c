/* Placement specs: "R,S(0)" with optional spaces parses to one entry per mesh dim
 * and formats back; the count must match the mesh, S(d) must fit tensor_ndim when
 * given, and "S(-1)", "S(", "Q" and friends are refused with -EINVAL quoting them.
 * Also the default placement (S(0) on the last mesh dim, R elsewhere). */
#include "layout_testlib.h"

static int good(const char *s, int mesh_ndim, int tensor_ndim, const char *canonical)
{
    ck_placement p[CK_MAX_MESH_DIMS];
    ck_err err = {0};
    int rc = ck_placements_parse(s, mesh_ndim, tensor_ndim, p, &err);
    LT_CHECK(rc == 0, "placements \"%s\" (mesh %d-D, tensor %d-D): rejected: %s", s,
             mesh_ndim, tensor_ndim, ck_err_msg(&err));
    char buf[64];
    int n = ck_placements_format(p, mesh_ndim, buf, sizeof buf);
    LT_CHECK(strcmp(buf, canonical) == 0 && n == (int)strlen(canonical),
             "placements \"%s\" format as \"%s\" (returned %d), want \"%s\"", s, buf, n,
             canonical);
    LT_CHECK(ck_placements_format(p, mesh_ndim, NULL, 0) == n, "placements \"%s\": "
             "sizing call returns a different length", s);
    return 0;
}

static int bad(const char *s, int mesh_ndim, int tensor_ndim, const char *needle)
{
    ck_placement p[CK_MAX_MESH_DIMS];
    memset(p, 0xab, sizeof p);
    ck_err err = {0};
    char what[128];
    snprintf(what, sizeof what, "placements \"%s\" (mesh %d-D, tensor %d-D)", s,
             mesh_ndim, tensor_ndim);
    if (lt_expect_einval(ck_placements_parse(s, mesh_ndim, tensor_ndim, p, &err), &err,
                         what, needle))
        return 1;
    LT_CHECK(p[0].kind == 0xab, "%s: rejected but wrote the output", what);
    return 0;
}

static int check_default(void)
{
    const char *want[] = {"S(0)", "R,S(0)", "R,R,S(0)", "R,R,R,S(0)"};
    for (int n = 1; n <= CK_MAX_MESH_DIMS; n++) {
        ck_placement p[CK_MAX_MESH_DIMS];
        char buf[64];
        ck_placements_default(n, p);
        ck_placements_format(p, n, buf, sizeof buf);
        LT_CHECK(strcmp(buf, want[n - 1]) == 0, "default placements of a %d-D mesh are "
                 "\"%s\", want \"%s\"", n, buf, want[n - 1]);
    }
    return 0;
}

/* Every R/S(0..2) combination on 1..4-D meshes formats and parses back. */
static int check_round_trip(void)
{
    for (int n = 1; n <= CK_MAX_MESH_DIMS; n++) {
        int choice[CK_MAX_MESH_DIMS];
        ck_placement p[CK_MAX_MESH_DIMS], q[CK_MAX_MESH_DIMS];
        lt_placements_reset(choice);
        while (lt_next_placements(choice, n, 4, p)) {
            char buf[64];
            ck_err err = {0};
            ck_placements_format(p, n, buf, sizeof buf);
            LT_CHECK(ck_placements_parse(buf, n, 3, q, &err) == 0, "\"%s\" does not "
                     "parse back: %s", buf, ck_err_msg(&err));
            for (int d = 0; d < n; d++)
                LT_CHECK(p[d].kind == q[d].kind && p[d].dim == q[d].dim,
                         "\"%s\": entry %d changed in the round trip", buf, d);
        }
    }
    return 0;
}

int main(void)
{
    int f = 0;
    f |= good("R", 1, 2, "R");
    f |= good("S(0)", 1, 1, "S(0)");
    f |= good("R,S(0)", 2, 2, "R,S(0)");
    f |= good(" R , S( 1 ) ", 2, 2, "R,S(1)");
    f |= good("S (0),S(0)", 2, 1, "S(0),S(0)");
    f |= good("S(0),S(1),R,S(7)", 4, -1, "S(0),S(1),R,S(7)");
    f |= good("S(5)", 1, -1, "S(5)");
    f |= good("R,R", 2, 0, "R,R");
    f |= good("S(07)", 1, 8, "S(7)");

    f |= bad("S(-1)", 1, 2, "S(-1)");
    f |= bad("S(", 1, 2, "S(");
    f |= bad("Q", 1, 2, "Q");
    f |= bad("R,Q", 2, 2, "Q");
    f |= bad("", 1, 2, "\"\"");
    f |= bad("r", 1, 2, "\"r\"");
    f |= bad("S0", 1, 2, "S0");
    f |= bad("S()", 1, 2, "S()");
    f |= bad("S(0", 1, 2, "S(0");
    f |= bad("S(0))", 1, 2, "S(0))");
    f |= bad("S(x)", 1, 2, "S(x)");
    f |= bad("S(1)", 1, 1, "S(1)");
    f |= bad("S(0)", 1, 0, "S(0)");
    f |= bad("S(8)", 1, -1, "S(8)");
    f |= bad("S(300)", 1, -1, "S(300)");
    f |= bad("S(99999999999999999999)", 1, -1, "S(99999999999999999999)");
    f |= bad("R R", 1, 2, "R R");
    f |= bad("R;S(0)", 2, 2, "R;S(0)");
    f |= bad("R", 2, 2, "\"R\"");
    f |= bad("R,S(0),R", 2, 2, "R,S(0),R");
    f |= bad("R,", 2, 2, "R,");
    f |= bad(",R", 2, 2, ",R");
    f |= bad("R,,R", 3, 2, "R,,R");
    f |= bad("R", 0, 2, "\"R\"");
    f |= bad("R,R,R,R,R", 5, 2, "R,R,R,R,R");
    f |= check_default();
    f |= check_round_trip();
    return f;
}
