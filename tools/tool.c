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

/* Seconds between two progress lines in a log (--progress without a terminal). */
#define PROGRESS_EVERY 2.0

void tool_progress_init(tool_progress *p, const char *prog, const char *label, bool force)
{
    memset(p, 0, sizeof *p);
    p->prog = prog;
    p->label = label;
    p->tty = isatty(STDERR_FILENO);
    p->lines = force && !p->tty;
    p->t0 = tool_now();
}

static void progress_print(tool_progress *p, double t)
{
    char a[32], b[32];
    double el = t - p->t0;
    fprintf(stderr, "%s%s: %s / %s (%.0f%%) %.2f GB/s%s", p->tty ? "\r" : "", p->label,
            tool_bytes(p->done, a, sizeof a), tool_bytes(p->total, b, sizeof b),
            p->total ? 100.0 * (double)p->done / (double)p->total : 100.0,
            el > 0 ? (double)p->done / el / 1e9 : 0.0, p->tty ? "   " : "\n");
    fflush(stderr);
    p->last = t;
    p->shown = p->done;
}

void tool_progress_update(void *arg, uint64_t done, uint64_t total)
{
    tool_progress *p = arg;
    if (!p || (!p->tty && !p->lines))
        return;
    p->done = done;
    p->total = total;
    double t = tool_now();
    if (t - p->last < (p->tty ? 0.1 : PROGRESS_EVERY) && done < total)
        return;
    if (p->lines && done == p->shown && p->last > 0)
        return;    /* the end, already in the log */
    progress_print(p, t);
}

void tool_progress_done(tool_progress *p)
{
    if (p->tty && p->last > 0) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    } else if (p->lines && p->total && (p->last == 0 || p->shown != p->done)) {
        progress_print(p, tool_now());    /* where it stopped, whatever the clock */
    }
}

void tool_log(void *arg, const char *msg)
{
    const tool_progress *p = arg;
    if (p && p->tty && p->last > 0)
        fputs("\r\033[K", stderr);   /* don't print over the progress line */
    fprintf(stderr, "%s: %s\n", p ? p->prog : "ckpt", msg);
}

const char *tool_copy_line(const ck_ckpt *ck, char *buf, size_t len)
{
    const ck_copy *c = ck_get_copy(ck);
    uint32_t n = ck_get_info(ck)->n_files;
    buf[0] = '\0';
    if (!c->partial)
        return buf;
    size_t at = (size_t)snprintf(buf, len, "a partial copy from ckptd %s: %u of %u data files",
                                 c->source, c->files_held, n);
    for (uint32_t f = 0, k = 0; f < n && at < len; f++) {
        if (!ck_file_held(ck, f))
            continue;
        const char *name = ck_file_get(ck, f)->name;
        /* Room for this name and a closing "...)" must be left. */
        if (at + strlen(name) + 8 > len) {
            snprintf(buf + at, len - at, " ...)");
            return buf;
        }
        at += (size_t)snprintf(buf + at, len - at, "%s%s", k++ ? " " : " (", name);
    }
    if (c->files_held && at < len)
        snprintf(buf + at, len - at, ")");
    return buf;
}
