/* model/boxes.h - the tiling check with its work counted (private to the core).
 *
 * ck_boxes_check (ck/layout.h) must stay O(n log n) in the number of boxes whatever
 * the list, since ckptd runs it on every box list a client declares. Its tests assert
 * that bound on the steps it takes (a count of the coordinates it hashes, the boxes it
 * visits and the comparisons of its sorts), not on a clock.
 */
#ifndef CK_MODEL_BOXES_H
#define CK_MODEL_BOXES_H

#include <stdint.h>

#include "ck/layout.h"

/* ck_boxes_check, with the steps it took in *work: at most about
 * 4 (ndim + 1)^2 (n + 1) + 2 (n + 1) log2(2 n + 2) ndim. */
int ck__boxes_check_work(const char *tensor, int ndim, const uint64_t *shape, uint32_t n,
                         const ck_box *boxes, uint64_t *work, ck_err *err);

#endif
