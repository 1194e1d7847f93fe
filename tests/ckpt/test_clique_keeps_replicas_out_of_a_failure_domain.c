/* The clique rule (async/saver.h, ck__clique; docs/decisions/0174-clique-rule.md):
 * for every node count, factor F and jump J that divide, each node's clique is F nodes
 * that all name the same clique (a node's peers have it as their peer), every node is
 * in exactly one, and no two members lie in one failure domain of J consecutive nodes
 * (their indices differ by a multiple of J, within one block of F x J). A count that F x J
 * does not divide is refused with a message naming the rule. */
#include "async/saver.h"
#include "ckpt_testlib.h"

/* The clique of i, sorted, itself included, into c (f entries). */
static int clique(uint32_t i, uint32_t n, uint32_t f, uint32_t j, uint32_t *c)
{
    uint32_t peers[64];
    ck_err err = { 0 };
    int r = ck__clique(i, n, f, j, peers, &err);
    if (r < 0)
        return r;
    memcpy(c, peers, (f - 1) * sizeof *c);
    c[f - 1] = i;
    for (uint32_t a = 0; a < f; a++)          /* f is small */
        for (uint32_t b = a + 1; b < f; b++)
            if (c[b] < c[a]) {
                uint32_t t = c[a];
                c[a] = c[b];
                c[b] = t;
            }
    return 0;
}

int main(void)
{
    uint32_t cases[][3] = { { 4, 2, 1 }, { 4, 2, 2 }, { 8, 2, 2 }, { 12, 3, 2 }, { 16, 2, 4 },
                            { 6, 3, 1 }, { 9, 3, 3 }, { 4, 1, 1 }, { 1, 1, 1 }, { 24, 4, 3 } };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        uint32_t n = cases[k][0], f = cases[k][1], j = cases[k][2];
        uint32_t *in = calloc(n, sizeof *in);
        for (uint32_t i = 0; i < n; i++) {
            uint32_t c[64], d[64];
            CHECK(clique(i, n, f, j, c) == 0, "n %u f %u j %u: node %u refused", n, f, j, i);
            for (uint32_t m = 0; m < f; m++) {
                CHECK(clique(c[m], n, f, j, d) == 0 && !memcmp(c, d, f * sizeof *c),
                      "n %u f %u j %u: node %u's peer %u has another clique", n, f, j, i, c[m]);
                CHECK(c[m] < n, "n %u: member %u out of range", n, c[m]);
                CHECK(m == 0 || c[m] != c[m - 1], "n %u f %u j %u: node %u twice in %u's clique",
                      n, f, j, c[m], i);
                CHECK(m == 0 || (c[m] - c[0]) % j == 0,
                      "n %u f %u j %u: %u and %u of one clique are in one failure domain", n,
                      f, j, c[0], c[m]);
                CHECK(c[m] / (f * j) == i / (f * j), "n %u f %u j %u: %u outside %u's block", n,
                      f, j, c[m], i);
            }
            /* Each clique counted once, by its least member: a partition of the nodes. */
            for (uint32_t m = 0; m < f && c[0] == i; m++)
                in[c[m]]++;
        }
        for (uint32_t i = 0; i < n; i++)
            CHECK(in[i] == 1, "n %u f %u j %u: node %u in %u cliques", n, f, j, i,
                  in[i]);
        free(in);
    }
    ck_err err = { 0 };
    CHECK(ck__clique(0, 4, 2, 3, NULL, &err) == -EINVAL && strstr(ck_err_msg(&err), "multiple"),
          "4 nodes, F 2, J 3 accepted (or unclear: %s)", ck_err_msg(&err));
    CHECK(ck__clique(0, 3, 2, 1, NULL, &err) == -EINVAL, "3 nodes in cliques of 2 accepted");
    if (!tl_failures)
        printf("ok: cliques of 10 shapes keep their members a multiple of J apart\n");
    return tl_failures ? 1 : 0;
}
