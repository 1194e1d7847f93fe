/* saves.h - what of the trainer's checkpoints is the trainer's own: their names, how
 * many it keeps (--keep-last), and reading a safetensors export (--eval). Saving,
 * finding the latest and loading go through the training library (sh/checkpoint.h).
 */
#ifndef TR_SAVES_H
#define TR_SAVES_H

#include <stdint.h>

#include "ck/ckpt.h"
#include "sh/sh.h"

/* "step-%08llu": TR_SAVE_PREFIX and the step, the names that mark a checkpoint as
 * this trainer's (ck/steps.h). */
#define TR_SAVE_PREFIX "step-"
void tr_save_name(uint64_t step, char name[CK_NAME_MAX]);

/* Rank 0, after a commit: removes the oldest (by step) of the trainer's committed
 * checkpoints under root beyond the newest keep_last; no other name is touched. */
int tr_prune_saves(const char *root, int keep_last, ck_err *err);

/* Reads every entry's box from the safetensors file at path (full tensors, as
 * ckpt-consolidate writes them): a dim-0 box is one byte range of the tensor. */
int tr_load_safetensors(const char *path, const sh_state_dict *sd, ck_err *err);

#endif
