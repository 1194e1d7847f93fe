/* test_nccl_bootstrap_one_id_per_comm: the NCCL backend's bootstrap, on CPU ranks.
 *
 * The world and every mesh dim get a NCCL communicator whose unique id rank 0 of
 * that communicator made and MPI broadcast: every rank of one communicator opens it
 * with the same id, its own rank and the communicator's size, and communicators
 * differ in their ids. Making the communicator itself needs a GPU, so a recorder
 * stands in the seam where ncclCommInitRank runs; the ids are real NCCL ones
 * (ncclGetUniqueId needs no GPU). Host buffers on a NCCL communicator still go
 * through MPI. A rank whose open fails makes every rank fail, none waits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "comm/nccl.h"

enum { MAX_OPENS = 8 };

typedef struct opened {
    ncclUniqueId id;
    int nranks, rank;
    char name[64];
} opened;

typedef struct recorder {
    opened log[MAX_OPENS];
    int n;
    int fail_rank;       /* this world rank's opens fail; -1: none */
    int world_rank;
} recorder;

static int rec_open(void *arg, const ncclUniqueId *id, int nranks, int rank,
                    const char *name, sh_nccl_link **out, ck_err *err)
{
    recorder *r = arg;
    if (r->world_rank == r->fail_rank)
        return ck_err_set(err, -EIO, "refused by the test on rank %d", r->world_rank);
    if (r->n == MAX_OPENS)
        return ck_err_set(err, -ENOSPC, "too many opens");
    opened *o = &r->log[r->n++];
    o->id = *id;
    o->nranks = nranks;
    o->rank = rank;
    snprintf(o->name, sizeof o->name, "%s", name);
    *out = calloc(1, sizeof **out);
    return *out ? 0 : -ENOMEM;
}

static void rec_close(void *arg, sh_nccl_link *l)
{
    (void)arg;
    free(l);
}

#define CHECK(cond, ...) TH_CHECK(w, cond, __VA_ARGS__)

int main(int argc, char **argv)
{
    sh_world *w = th_init(&argc, &argv);
    ck_err err = {0};
    int wr = sh_world_rank(w), ws = sh_world_size(w);
    recorder rec = {.fail_rank = -1, .world_rank = wr};
    sh_nccl_seam seam = {.open = rec_open, .close = rec_close, .arg = &rec};
    if (sh_nccl_attach_world(sh_world_comm(w), &seam, &err))
        th_die(w, "NCCL world", &err);
    sh_mesh *mesh = th_mesh(w, argc, argv);
    int nd = sh_mesh_ndim(mesh);
    CHECK(rec.n == 1 + nd, "%d opens for the world and %d dims", rec.n, nd);
    CHECK(rec.log[0].nranks == ws && rec.log[0].rank == wr, "world opened as %d of %d",
          rec.log[0].rank, rec.log[0].nranks);
    for (int d = 0; d < nd && 1 + d < rec.n; d++) {
        const opened *o = &rec.log[1 + d];
        CHECK(o->nranks == sh_mesh_size(mesh, d) && o->rank == sh_mesh_coord(mesh, d),
              "dim %d opened as %d of %d, its coordinate is %d of %d", d, o->rank,
              o->nranks, sh_mesh_coord(mesh, d), sh_mesh_size(mesh, d));
        CHECK(strcmp(o->name, sh_comm_name(sh_mesh_comm(mesh, d))) == 0, "dim %d named '%s'",
              d, o->name);
    }

    /* Every rank's ids and coordinates, gathered over the NCCL world (host buffers:
     * MPI underneath). */
    enum { SLOT = (1 + CK_MAX_MESH_DIMS) * (int)sizeof(ncclUniqueId) };
    _Alignas(int) unsigned char mine[SLOT] = {0};
    int coord[CK_MAX_MESH_DIMS] = {0};
    for (int i = 0; i < rec.n && i <= nd; i++)
        memcpy(mine + (size_t)i * sizeof(ncclUniqueId), &rec.log[i].id, sizeof(ncclUniqueId));
    for (int d = 0; d < nd; d++)
        coord[d] = sh_mesh_coord(mesh, d);
    unsigned char *all = malloc((size_t)SLOT * (size_t)ws);
    int *coords = malloc(sizeof coord * (size_t)ws);
    if (sh_all_gather(sh_world_comm(w), mine, all, SLOT / 4, CK_I32, NULL, &err) ||
        sh_all_gather(sh_world_comm(w), coord, coords, CK_MAX_MESH_DIMS, CK_I32, NULL, &err))
        th_die(w, "gathering the ids", &err);
    const size_t idb = sizeof(ncclUniqueId);
    for (int j = 0; j < ws; j++) {
        const unsigned char *theirs = all + (size_t)j * SLOT;
        CHECK(memcmp(theirs, mine, idb) == 0, "rank %d opened the world with another id", j);
        for (int d = 0; d < nd; d++) {
            bool same_comm = true;
            for (int e = 0; e < nd; e++)
                if (e != d && coords[j * CK_MAX_MESH_DIMS + e] != coord[e])
                    same_comm = false;
            bool same_id = memcmp(theirs + (1 + d) * idb, mine + (1 + d) * idb, idb) == 0;
            CHECK(same_id == same_comm, "dim %d: rank %d %s this rank's communicator but "
                  "%s its id", d, j, same_comm ? "shares" : "is outside",
                  same_id ? "shares" : "has another");
        }
    }
    for (int a = 0; a <= nd; a++)
        for (int b = a + 1; b <= nd; b++)
            CHECK(memcmp(mine + a * idb, mine + b * idb, idb) != 0,
                  "communicators %d and %d share an id", a, b);

    /* A collective on host buffers over a NCCL dim communicator: MPI's result. */
    for (int d = 0; d < nd; d++) {
        int one = 1, n = 0;
        if (sh_all_reduce(sh_mesh_comm(mesh, d), &one, &n, 1, CK_I32, SH_SUM, NULL, &err))
            th_die(w, "host all-reduce on a NCCL communicator", &err);
        CHECK(n == sh_mesh_size(mesh, d), "dim %d summed %d ones", d, n);
    }

    /* One rank's open fails: every rank's mesh fails, and the others say why. */
    if (ws > 1) {
        rec.fail_rank = ws - 1;
        sh_mesh *bad = NULL;
        ck_err e2 = {0};
        int rc = sh_mesh_new(w, 1, &ws, NULL, &bad, &e2);
        CHECK(rc < 0 && !bad, "a mesh whose rank %d cannot open NCCL was made (%d)", ws - 1,
              rc);
        if (wr != ws - 1)
            CHECK(strstr(ck_err_msg(&e2), "another rank") != NULL, "message '%s'",
                  ck_err_msg(&e2));
        else
            CHECK(strstr(ck_err_msg(&e2), "refused by the test") != NULL, "message '%s'",
                  ck_err_msg(&e2));
        rec.fail_rank = -1;
    }

    free(all);
    free(coords);
    sh_mesh_free(mesh);
    if (!th_failures() && wr == 0)
        printf("ok: %d communicators per rank, one id each, shared by exactly their ranks\n",
               1 + nd);
    return th_finish(w, th_failures() ? 1 : 0);
}
