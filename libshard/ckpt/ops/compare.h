/* ops/compare.h - what the comparison shows of an element (private to the core). */
#ifndef CK_OPS_COMPARE_H
#define CK_OPS_COMPARE_H

#include <stddef.h>

#include "ck/types.h"

/* Writes element bytes p of dtype as a number ("0.5", "-3", "true") into buf. */
void ck__elem_format(ck_dtype dtype, const void *p, char *buf, size_t len);

#endif
