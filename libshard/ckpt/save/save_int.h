/* save/save_int.h - what a save shows the core's own tests (private to the core).
 *
 * The plan of a prepared save, so that a test can build a rank's image from the plan
 * alone, independently of save/image.c, and check that the save accepts it.
 */
#ifndef CK_SAVE_SAVE_INT_H
#define CK_SAVE_SAVE_INT_H

#include "ck/save.h"
#include "model/plan.h"

/* The plan fixed by ck_save_prepare or ck_save_prepare_group; NULL before. */
const ck__plan *ck__save_plan(const ck_save *s);

/* The coordinator of a save shared by several daemons gives it up: unlike
 * ck_save_abort of a shared save, it removes the pending directory (the other
 * daemons were told to stop, and their writes into it fail), then frees s. */
void ck__save_discard(ck_save *s);

#endif
