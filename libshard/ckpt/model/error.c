/* error.c - the message half of the core's error convention (see ck/error.h). */
#include "ck/error.h"
#include "model/say.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int ck_err_set(ck_err *err, int code, const char *fmt, ...)
{
    if (!err)
        return code;
    char msg[CK_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (err->code != 0 && err->msg[0] != '\0') {
        /* Context added on the way up goes in front: "saving t3: rank-00001.dat: EIO". */
        char inner[CK_ERR_MSG_MAX];
        memcpy(inner, err->msg, sizeof inner);
        snprintf(err->msg, sizeof err->msg, "%s: %s", msg, inner);
    } else {
        memcpy(err->msg, msg, sizeof err->msg);
    }
    err->code = code;
    return code;
}

void ck_err_clear(ck_err *err)
{
    if (err) {
        err->code = 0;
        err->msg[0] = '\0';
    }
}

const char *ck_err_msg(const ck_err *err)
{
    if (!err)
        return "";
    if (err->msg[0] != '\0')
        return err->msg;
    return err->code ? strerror(-err->code) : "no error";
}

void ck__vsay(void (*cb)(void *arg, const char *msg), void *arg, const char *fmt, va_list ap)
{
    if (!cb)
        return;
    char msg[CK_ERR_MSG_MAX + 256];
    vsnprintf(msg, sizeof msg, fmt, ap);
    cb(arg, msg);
}
