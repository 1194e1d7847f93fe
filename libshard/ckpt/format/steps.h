/* format/steps.h - the rule of a run's names, PREFIX<digits> (private to the core; the
 * calls callers make are ck/steps.h's). */
#ifndef CK_FORMAT_STEPS_H
#define CK_FORMAT_STEPS_H

#include <stdbool.h>
#include <stdint.h>

/* Whether name is prefix followed by 1 to 20 decimal digits and nothing else (leading
 * zeros allowed), the number fitting in 64 bits; the number goes to *step (may be
 * NULL). */
bool ck__step_of(const char *name, const char *prefix, uint64_t *step);

#endif
