/* model/index.h - names to entries in O(1) (private to the core).
 *
 * A declaration may hold hundreds of thousands of tensors, and a save as many blobs
 * (ckptd adds every rank's while its event loop waits): each is found by name through
 * an open-addressing table of entry numbers. The names stay with the table's owner,
 * which names entry i through the callback.
 */
#ifndef CK_MODEL_INDEX_H
#define CK_MODEL_INDEX_H

#include <stdint.h>

typedef const char *(*ck__index_name)(const void *owner, uint32_t i);

typedef struct ck__index {
    uint32_t *slot;            /* entry + 1, 0 when empty; at most half full */
    uint32_t cap;
} ck__index;

/* Entry + 1 of name, 0 when there is none. */
uint32_t ck__index_find(const ck__index *x, ck__index_name nm, const void *owner,
                        const char *name);
/* Adds entry i, the count-th (its name, which no entry has yet, from nm). 0 or -ENOMEM. */
int ck__index_add(ck__index *x, ck__index_name nm, const void *owner, uint32_t count,
                  uint32_t i);
void ck__index_free(ck__index *x);

#endif
