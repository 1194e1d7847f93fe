/* ck/error.h - error reporting for the checkpoint core.
 *
 * Every ck_ function returns 0 on success or a negative errno-style code. When the
 * caller passes a ck_err, it also receives a message that names the file, tensor or
 * rank involved, so a tool can print one line that a person can act on.
 *
 * Codes with a fixed meaning across the core:
 *   -EBADMSG          the checkpoint is bad: corrupt or inconsistent metadata or data
 *   -EPROTONOSUPPORT  a record carries a format major version this build cannot read
 *   -ENOENT           no such checkpoint, tensor, blob or file
 *   -EINVAL           bad argument from the caller (a usage error)
 *   -EIO, -ENOSPC ... the operating system's own errors, passed through
 */
#ifndef CK_ERROR_H
#define CK_ERROR_H

#include <errno.h>
#include <stddef.h>

/* CK_API marks the public API: the core is built with hidden visibility
 * (docs/decisions/0161), so only what a public header declares with CK_API is
 * exported from a shared object that links the core. */
#define CK_API __attribute__((visibility("default")))

#define CK_ERR_MSG_MAX 1024

typedef struct ck_err {
    int code;                   /* 0 or the negative code last set */
    char msg[CK_ERR_MSG_MAX];   /* human-readable, names the thing */
} ck_err;

/* Records code and a printf-style message in err (which may be NULL) and returns
 * code, so that error paths read `return ck_err_set(err, -EIO, "...", ...);`.
 * A message already set is kept and the new one is prefixed to it with ": ",
 * so callers can add context on the way up. */
CK_API int ck_err_set(ck_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Resets err to "no error". */
CK_API void ck_err_clear(ck_err *err);

/* The message, or strerror(-code) when none was set. Never NULL. */
CK_API const char *ck_err_msg(const ck_err *err);

#endif
