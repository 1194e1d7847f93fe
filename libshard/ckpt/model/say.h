/* model/say.h - messages to a caller's callback (private to the core).
 *
 * Logs, verify's problems and compare's differences all go to a callback the caller
 * may leave NULL, as one formatted line of bounded length: one helper formats it,
 * so that no box grows its own buffer arithmetic.
 */
#ifndef CK_MODEL_SAY_H
#define CK_MODEL_SAY_H

#include <stdarg.h>

/* Formats fmt and ap into a line and hands it to cb(arg, line); nothing when cb is
 * NULL. */
void ck__vsay(void (*cb)(void *arg, const char *msg), void *arg, const char *fmt, va_list ap);

#endif
