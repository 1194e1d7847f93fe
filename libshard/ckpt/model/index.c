/* index.c - names to entries, open addressing (see model/index.h). */
#include "model/index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    while (*s)
        h = (h ^ (uint8_t)*s++) * 0x100000001b3ull;
    return h;
}

/* The slot of name: its entry's, or the empty one where it would go. */
static uint32_t *slot_of(const ck__index *x, ck__index_name nm, const void *owner,
                         const char *name)
{
    uint32_t mask = x->cap - 1;
    for (uint32_t i = (uint32_t)fnv1a(name) & mask;; i = (i + 1) & mask) {
        uint32_t *e = &x->slot[i];
        if (*e == 0 || strcmp(nm(owner, *e - 1), name) == 0)
            return e;
    }
}

uint32_t ck__index_find(const ck__index *x, ck__index_name nm, const void *owner,
                        const char *name)
{
    return x->cap ? *slot_of(x, nm, owner, name) : 0;
}

int ck__index_add(ck__index *x, ck__index_name nm, const void *owner, uint32_t count,
                  uint32_t i)
{
    if ((count + 1) * 2 > x->cap) {
        ck__index old = *x;
        x->cap = old.cap ? old.cap * 2 : 256;
        if (!(x->slot = calloc(x->cap, sizeof *x->slot))) {
            *x = old;
            return -ENOMEM;
        }
        for (uint32_t k = 0; k < old.cap; k++)
            if (old.slot[k])
                *slot_of(x, nm, owner, nm(owner, old.slot[k] - 1)) = old.slot[k];
        free(old.slot);
    }
    *slot_of(x, nm, owner, nm(owner, i)) = i + 1;
    return 0;
}

void ck__index_free(ck__index *x)
{
    free(x->slot);
    *x = (ck__index){ 0 };
}
