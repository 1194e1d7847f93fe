/* harness.c - see harness.h. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sh_world *th_init(int *argc, char ***argv)
{
    ck_err err = {0};
    sh_world *w;
    if (sh_init(argc, argv, &w, &err)) {
        fprintf(stderr, "skip: sh_init: %s\n", ck_err_msg(&err));
        exit(77);
    }
    return w;
}

void th_die(sh_world *w, const char *what, const ck_err *err)
{
    fprintf(stderr, "rank %d: %s: %s\n", w ? sh_world_rank(w) : -1, what, ck_err_msg(err));
    exit(1);
}

sh_mesh *th_mesh(sh_world *w, int argc, char **argv)
{
    ck_err err = {0};
    int shape[2] = {sh_world_size(w), 0}, ndim = 1;
    const char *names1[1] = {"shard"}, *names2[2] = {"replicate", "shard"};
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--mesh") == 0 && sscanf(argv[i + 1], "%dx%d", &shape[0], &shape[1]) == 2)
            ndim = 2;
    sh_mesh *m;
    if (sh_mesh_new(w, ndim, shape, ndim == 1 ? names1 : names2, &m, &err))
        th_die(w, "mesh", &err);
    return m;
}

int th_finish(sh_world *w, int status)
{
    int s = status;
    ck_err err = {0};
    if (sh_all_reduce(sh_world_comm(w), &s, &s, 1, CK_I32, SH_MAX, NULL, &err))
        th_die(w, "broadcasting the verdict", &err);
    sh_finalize(w);
    return s;
}

static int failures;

void th_failed(void)
{
    failures++;
}

int th_failures(void)
{
    return failures;
}
