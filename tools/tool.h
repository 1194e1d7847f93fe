/* tool.h - what every ckpt-* tool shares: exit codes, messages, the progress line. */
#ifndef CK_TOOL_H
#define CK_TOOL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ck/error.h"

/* Documented exit codes of every tool (README.md, "Exit codes"). */
enum {
    EXIT_OK = 0,
    EXIT_BAD = 1,      /* the checkpoint is bad (or, for verify --against, differs) */
    EXIT_USAGE = 2,    /* usage error, no such checkpoint, or an I/O error */
};

/* Maps a core error code to the tool's exit code. */
int tool_exit_code(int err);

/* Prints "PROG: msg" to stderr. */
void tool_error(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A one-line progress display on stderr, only when stderr is a terminal. Safe to call
 * often: it redraws at most ten times a second. */
typedef struct tool_progress {
    const char *prog;
    const char *label;
    bool tty;
    double t0, last;
    uint64_t total;
} tool_progress;

void tool_progress_init(tool_progress *p, const char *prog, const char *label);
void tool_progress_update(void *arg, uint64_t done, uint64_t total);
void tool_progress_done(tool_progress *p);

/* A log callback for the core: "PROG: msg" on stderr. arg is the tool_progress, so
 * that one callback argument serves both (the core passes one cb_arg). */
void tool_log(void *arg, const char *msg);

double tool_now(void);
/* "1.50 GiB" */
const char *tool_bytes(uint64_t n, char *buf, size_t len);

#endif
