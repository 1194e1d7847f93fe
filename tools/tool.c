/* tool.c - shared pieces of the ckpt-* tools (see tool.h). */
#include "tool.h"

#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int tool_exit_code(int err)
{
    switch (err) {
    case 0:
        return EXIT_OK;
    case -EBADMSG:
    case -EPROTONOSUPPORT:
        return EXIT_BAD;
    default:
        return EXIT_USAGE;
    }
}

void tool_error(const char *prog, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

double tool_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

const char *tool_bytes(uint64_t n, char *buf, size_t len)
{
    static const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)n);
    else
        snprintf(buf, len, "%.2f %s", v, unit[u]);
    return buf;
}

void tool_progress_init(tool_progress *p, const char *prog, const char *label)
{
    memset(p, 0, sizeof *p);
    p->prog = prog;
    p->label = label;
    p->tty = isatty(STDERR_FILENO);
    p->t0 = tool_now();
}

void tool_progress_update(void *arg, uint64_t done, uint64_t total)
{
    tool_progress *p = arg;
    if (!p || !p->tty)
        return;
    double t = tool_now();
    if (t - p->last < 0.1 && done < total)
        return;
    p->last = t;
    p->total = total;
    char a[32], b[32];
    double el = t - p->t0;
    fprintf(stderr, "\r%s: %s / %s (%.0f%%) %.2f GB/s   ", p->label, tool_bytes(done, a, sizeof a),
            tool_bytes(total, b, sizeof b), total ? 100.0 * (double)done / (double)total : 100.0,
            el > 0 ? (double)done / el / 1e9 : 0.0);
    fflush(stderr);
}

void tool_progress_done(tool_progress *p)
{
    if (p->tty && p->last > 0) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
}

void tool_log(void *arg, const char *msg)
{
    const tool_progress *p = arg;
    if (p && p->tty && p->last > 0)
        fputs("\r\033[K", stderr);   /* don't print over the progress line */
    fprintf(stderr, "%s: %s\n", p ? p->prog : "ckpt", msg);
}
