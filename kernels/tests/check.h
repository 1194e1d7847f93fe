/* check.h - a failing check prints where and what, and the test exits 1 at the end. */
#ifndef KERNELS_TEST_CHECK_H
#define KERNELS_TEST_CHECK_H

#include <stdio.h>

static int check_failures;

#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);  \
            fprintf(stderr, __VA_ARGS__);                                             \
            fputc('\n', stderr);                                                      \
            check_failures++;                                                         \
        }                                                                             \
    } while (0)

#define CHECK_DONE()                                                                  \
    do {                                                                              \
        if (check_failures) {                                                         \
            fprintf(stderr, "%d check(s) failed\n", check_failures);                  \
            return 1;                                                                 \
        }                                                                             \
        printf("ok\n");                                                               \
        return 0;                                                                     \
    } while (0)

#endif
