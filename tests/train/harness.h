/* harness.h - what the multi-rank tests share: joining the world (skip when the test
 * cannot run), a mesh from "--mesh RxS", and ending every rank with rank 0's verdict. */
#ifndef TM_HARNESS_H
#define TM_HARNESS_H

#include <stdio.h>

#include "sh/sh.h"

/* sh_init, or exit 77 (skip) when MPI cannot start. */
sh_world *th_init(int *argc, char ***argv);
/* A 1-D mesh of the world, or the 2-D "replicate x shard" mesh named by --mesh RxS
 * in argv. Exits 1 with the error on failure. */
sh_mesh *th_mesh(sh_world *w, int argc, char **argv);
/* Every rank returns the largest status of any rank (a failure anywhere fails every
 * rank the same way; 77, skip, wins over 1); finalizes the world. */
int th_finish(sh_world *w, int status);
/* A failed check prints the rank and the condition and counts into the caller's
 * `failures`. */
#define TH_CHECK(rank, cond, ...)                                                        \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            printf("rank %d: FAIL %s: ", (rank), #cond);                                 \
            printf(__VA_ARGS__);                                                         \
            printf("\n");                                                                \
            failures++;                                                                  \
        }                                                                                \
    } while (0)

/* Prints "rank R: what: message" and exits 1 (tests only). */
void th_die(sh_world *w, const char *what, const ck_err *err);

#endif
