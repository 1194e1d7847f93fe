/* grow.c - see grow.h. */
#include "model/grow.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int ck__grow(void *parr, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    if (n > SIZE_MAX / size)
        return -ENOMEM;
    void *old;
    memcpy(&old, parr, sizeof old);   /* parr is some T **: copy, don't alias */
    void *p = realloc(old, n * size);
    if (!p)
        return -ENOMEM;
    memcpy(parr, &p, sizeof p);
    *cap = n;
    return 0;
}
