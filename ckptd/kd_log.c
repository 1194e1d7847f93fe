/* kd_log.c - the daemon's log: one timestamped line per event worth knowing later
 * (refused peers, recovery removals, failures, commits). */
#include <stdarg.h>
#include <time.h>

#include "kd.h"

static void vlog(kd_server *s, const char *fmt, va_list ap)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    FILE *f = s->log ? s->log : stderr;
    fprintf(f, "%s.%03ldZ ckptd: ", stamp, ts.tv_nsec / 1000000);
    vfprintf(f, fmt, ap);
    fputc('\n', f);
    fflush(f);
}

void kd_log(kd_server *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(s, fmt, ap);
    va_end(ap);
}

double kd_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void kd_log_to(void (*log)(void *arg, const char *msg), void *arg, const char *fmt, ...)
{
    char msg[2 * CK_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (log)
        log(arg, msg);
}

/* The core's log callback; saver threads call it too, and stdio locks each call. */
void kd_log_cb(void *arg, const char *msg)
{
    kd_log(arg, "%s", msg);
}
