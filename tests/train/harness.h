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
/* Prints "rank R: what: message" and exits 1 (tests only). */
void th_die(sh_world *w, const char *what, const ck_err *err);

/* A claim: when cond is false, prints "rank R: FAIL cond: message" and counts it;
 * th_failures() is the count so far. */
#define TH_CHECK(w, cond, ...)                                                           \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            printf("rank %d: FAIL %s: ", sh_world_rank(w), #cond);                       \
            printf(__VA_ARGS__);                                                         \
            printf("\n");                                                                \
            th_failed();                                                                 \
        }                                                                                \
    } while (0)
void th_failed(void);
int th_failures(void);

#endif
