/* crash_testlib.h - the save both crash tests run: checkpoint NAME of 3 tensors on a
 * 2x2 mesh (R,S(0): replicas share the writing) and one blob, through an engine, in
 * small I/Os so that it takes many operations. Header-only, as ckpt_testlib.h. */
#ifndef CRASH_TESTLIB_H
#define CRASH_TESTLIB_H

#include "test_engines.h"
#include "ck/save.h"
#include "ckpt_testlib.h"

static const uint64_t seed = 42;

typedef struct gen {
    ck_synth_src src[64];
    int n;
} gen;

static int save(const char *root, const char *name, ck_engine *e, gen *g, ck_err *err)
{
    ck_mesh mesh;
    ck_placement pl[2];
    ck_mesh_parse("2x2", NULL, &mesh, NULL);
    ck_placements_parse("R,S(0)", 2, 2, pl, NULL);
    ck_save_opts so = { .engine = e, .block_size = 16384, .io_size = 8192, .mem_limit = 65536,
                        .hash_threads = 2 };
    ck_save *s;
    ck_decl *d;
    char tn[8];
    static const uint64_t shapes[3][2] = { { 330, 100 }, { 5, 7 }, { 640, 64 } };
    int r = ck_decl_new(&d, &mesh, err);
    for (uint32_t t = 0; t < 3 && r == 0; t++) {
        snprintf(tn, sizeof tn, "t%u", t);
        r = ck_decl_tensor(d, tn, CK_F32, 2, shapes[t], pl, err);
    }
    if (r == 0)
        r = ck_save_begin(&s, root, name, 7, d, &so, err);
    ck_decl_free(d);
    if (r < 0)
        return r;
    g->n = 0;
    for (uint32_t t = 0; t < 3 && r == 0; t++) {
        snprintf(tn, sizeof tn, "t%u", t);
        for (uint64_t rank = 0; rank < 4 && r == 0; rank++) {
            if (!ck_save_writes(s, tn, rank))
                continue;
            ck_synth_src *src = &g->src[g->n++];
            uint32_t coord[2];
            ck_mesh_coord(&mesh, rank, coord);
            *src = (ck_synth_src){ .seed = seed, .tensor = t, .itemsize = 4, .ndim = 2,
                                   .shape = { shapes[t][0], shapes[t][1] } };
            ck_shard_box(2, shapes[t], &mesh, pl, coord, &src->box);
            r = ck_save_shard_fill(s, tn, rank, ck_synth_fill, src, err);
        }
    }
    if (r == 0)
        r = ck_save_blob(s, "step", "7", 1, err);
    if (r < 0) {
        ck_save_abort(s);
        return r;
    }
    return ck_save_commit(s, NULL, err);
}

#endif
