/* kd_parse.c - the decimal counts the daemon and ckptctl take on their command lines and
 * in peer addresses: one rule for all of them, so that "--peer-checkers 4", "ckptctl
 * peer get --checkers 4" and "host:4000" refuse the same things. */
#include <errno.h>
#include <stdlib.h>

#include "kd.h"

bool kd_decimal(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
    /* strtoul alone would take a sign, leading space and "" (as 0): digits only here. */
    if (!s || *s < '0' || *s > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return false;
    *out = (unsigned)v;
    return true;
}
