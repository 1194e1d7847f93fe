/* model/grow.h - growing arrays (private to the core).
 *
 * Every box below the format builds arrays whose length it learns as it goes (plan
 * shards, fault records, manifest blobs): one doubling helper, so each caller checks
 * one return value instead of writing its own realloc arithmetic.
 */
#ifndef CK_MODEL_GROW_H
#define CK_MODEL_GROW_H

#include <stddef.h>

/* Makes room for at least `need` elements of `size` bytes in the array *parr points
 * to, whose capacity is *cap, doubling it as it grows. 0 or -ENOMEM, leaving the
 * array as it was. parr is the address of the array pointer, of any element type. */
int ck__grow(void *parr, size_t *cap, size_t need, size_t size);

#endif
