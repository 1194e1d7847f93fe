/* inspect_tiers.h - ckpt-inspect's view across the tiers (inspect_tiers.c). */
#ifndef CK_INSPECT_TIERS_H
#define CK_INSPECT_TIERS_H

#include <stdbool.h>
#include <stddef.h>

/* Prints, for each checkpoint (only: that name), where its copies are in the durable
 * root and the local tiers given, and whether every data file has a copy; returns the
 * exit code (1: a copy that does not open, or something planted among a tier's roots;
 * 2: a root that cannot be read, or no copy of only). */
int inspect_tiers(const char *prog, const char *durable, const char *const *locals,
                  size_t nlocal, const char *only, bool json);

#endif
