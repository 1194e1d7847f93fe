/* save_and_load.c - a checkpoint saved on a 2x2 mesh, loaded onto 3 ranks, verified.
 *
 *   build/examples/save_and_load /tmp/ckpt-example
 *
 * A 7x5 f32 tensor W with W[i][j] = 10 i + j is saved as FSDP2 on a 2x2 HSDP mesh
 * holds it: replicated over dim 0 of the mesh, sharded by rows over dim 1 (R,S(0)),
 * so rows 0-3 live on mesh column 0 and rows 4-6 on column 1, twice each. One
 * process plays the four ranks here; a training job calls the same functions, or
 * ck/client.h's asynchronous ones, with one rank per process. Then each of 3 ranks
 * on a 1-D mesh (S(0)) loads its rows, 3, 3 and 1 as torch.chunk cuts them, reading
 * only the bytes it needs, and the checkpoint is verified block by block. Exit 0 when every loaded element is
 * the one saved and verify finds no problem.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ck/ck.h"

enum { ROWS = 7, COLS = 5 };

static int fail(const char *what, const ck_err *err)
{
    fprintf(stderr, "save_and_load: %s: %s\n", what, ck_err_msg(err));
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: save_and_load ROOT\n");
        return 2;
    }
    const char *root = argv[1];
    if (mkdir(root, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "save_and_load: %s: %s\n", root, strerror(errno));
        return 1;
    }
    const uint64_t shape[2] = { ROWS, COLS };
    float full[ROWS][COLS];
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < COLS; j++)
            full[i][j] = (float)(10 * i + j);

    /* Save on 2x2: every rank offers its local shard; of two replicas the plan
     * writes one. */
    ck_err err = { 0 };
    ck_mesh mesh;
    ck_placement pl[2];
    if (ck_mesh_parse("2x2", "replicate,shard", &mesh, &err) < 0 ||
        ck_placements_parse("R,S(0)", 2, 2, pl, &err) < 0)
        return fail("mesh", &err);
    ck_decl *d;                   /* what the checkpoint holds: built once, saved often */
    ck_save *s;
    if (ck_decl_new(&d, &mesh, &err) < 0 ||
        ck_decl_tensor(d, "W", CK_F32, 2, shape, pl, &err) < 0 ||
        ck_save_begin(&s, root, "example", 100, d, NULL, &err) < 0)
        return fail("save", &err);
    ck_decl_free(d);              /* the save holds its own reference */
    for (uint64_t rank = 0; rank < ck_mesh_world(&mesh); rank++) {
        uint32_t coord[CK_MAX_MESH_DIMS];
        ck_box box;
        ck_mesh_coord(&mesh, rank, coord);
        ck_shard_box(2, shape, &mesh, pl, coord, &box);
        /* Row-major shard bytes: a dim-0 shard is a run of whole rows. */
        if (ck_save_shard(s, "W", rank, full[box.off[0]], &err) < 0)
            return fail("save", &err);
    }
    if (ck_save_commit(s, NULL, &err) < 0)      /* durable and visible, or nothing */
        return fail("commit", &err);

    /* Load onto 3 ranks, S(0): each reads its own rows, whatever mesh saved them, into
     * f32 (the saved dtype here; another one would convert), every block's SHA-256
     * checked on the way. */
    ck_ckpt *ck;
    ck_reader *rd;
    if (ck_open(root, "example", &ck, &err) < 0 ||
        ck_reader_open(ck, "W", CK_F32, &rd, &err) < 0)
        return fail("open", &err);
    ck_mesh three;
    ck_placement spl[1] = { { .kind = CK_SHARD, .dim = 0 } };
    if (ck_mesh_parse("3", NULL, &three, &err) < 0)
        return fail("mesh", &err);
    int wrong = 0;
    for (uint64_t rank = 0; rank < 3; rank++) {
        uint32_t coord[CK_MAX_MESH_DIMS];
        ck_box box;
        ck_mesh_coord(&three, rank, coord);
        ck_shard_box(2, shape, &three, spl, coord, &box);
        float part[ROWS][COLS];
        if (ck_reader_read_shard(rd, &three, spl, rank, part, &err) < 0)
            return fail("load", &err);
        for (uint64_t i = 0; i < box.len[0]; i++)
            for (int j = 0; j < COLS; j++)
                wrong += part[i][j] != full[box.off[0] + i][j];
        printf("rank %llu of 3: rows %llu..%llu loaded\n", (unsigned long long)rank,
               (unsigned long long)box.off[0],
               (unsigned long long)(box.off[0] + box.len[0] - 1));
    }
    ck_reader_close(rd);

    /* Verify: structure, coverage, and every block's SHA-256. */
    ck_verify_opts vo = { .deep = true };
    ck_verify_result res;
    if (ck_verify(ck, &vo, &res, &err) < 0)
        return fail("verify", &err);
    ck_close(ck);
    printf("%d wrong elements; verify: %llu problems in %llu shards, %llu blocks hashed\n",
           wrong, (unsigned long long)res.problems, (unsigned long long)res.shards,
           (unsigned long long)res.blocks_hashed);
    return wrong || res.problems ? 1 : 0;
}
