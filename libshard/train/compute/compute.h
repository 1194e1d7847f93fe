/* compute/compute.h - what the public ops' files (ops.c, attention.c) share: how an
 * op reports a failure, and the one place the host waits for the device. */
#ifndef SH_COMPUTE_COMPUTE_H
#define SH_COMPUTE_COMPUTE_H

#include "ck/error.h"
#include "sh/world.h"

/* rc as the public ops return it: 0, or rc with "WHAT on DEVICE (rank R) failed". */
int sh_ops_done(const sh_world *w, int rc, const char *what, ck_err *err);

/* The host waits for w's device (its table's sync), counted in w->host_waits. */
int sh_host_wait(sh_world *w);

#endif
