/* ck/steps.h - a training run's checkpoints in a root: the names PREFIX<digits>.
 *
 * A run names its saves PREFIX followed by the step in decimal ("step-1200", or the C
 * trainer's "step-00001200"), and owns only those: a root may also hold checkpoints
 * it did not make (a "best-model", ckpt-reshard's "step-100-2x8", another run's
 * "ft-7"), which no rule of a run may pick as its newest or remove to keep its last K.
 * The step is the number in the name, compared as a number ("step-10" is newer than
 * "step-9"), so that a run needs no manifest read to order its saves. Every caller
 * that resumes or prunes (the manager of libshard.loop, the C trainer, ckpt-rm) asks
 * these functions, so that the rule is written once (decision 0148).
 */
#ifndef CK_STEPS_H
#define CK_STEPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ck/ckpt.h"
#include "ck/engine.h"

typedef struct ck_step_ckpt {
    uint64_t step;
    char name[CK_NAME_MAX];
} ck_step_ckpt;


/* The committed checkpoints of root named PREFIX<digits>, oldest step first (equal
 * steps, "step-5" and "step-05", by name), in a malloc'd array the caller frees; none
 * is *n == 0 and *out == NULL. -EINVAL for a prefix that cannot begin a checkpoint
 * name (a '/', a leading '.', more than CK_CKPT_NAME_LEN - 1 bytes). */
CK_API int ck_root_steps(const char *root, const char *prefix, ck_step_ckpt **out, size_t *n,
                         ck_err *err);

/* The committed PREFIX<digits> with the highest step: its name (and step, if step is
 * not NULL). -ENOENT, with a message naming root and prefix, when there is none. */
CK_API int ck_root_newest(const char *root, const char *prefix, char name[CK_NAME_MAX],
                          uint64_t *step, ck_err *err);

/* Keeps the keep newest committed PREFIX<digits> of root and removes the others,
 * oldest first, each by ck_root_remove (crash-safe; I/O through e, NULL: the real
 * engine); no other name is counted or touched. removed(arg, name), if not NULL, is
 * called after each removal. A checkpoint that another process removes or holds
 * meanwhile (-ENOENT, -EBUSY) is skipped. Returns the number removed, or the first
 * other error (what was removed before it stays removed). keep must be at least 1:
 * -EINVAL for 0, which would remove the run's every checkpoint. */
CK_API int ck_root_prune(const char *root, const char *prefix, size_t keep, ck_engine *e,
                         void (*removed)(void *arg, const char *name), void *arg, ck_err *err);

#endif
