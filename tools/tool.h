/* tool.h - what every ckpt-* tool shares: exit codes, messages, the progress line. */
#ifndef CK_TOOL_H
#define CK_TOOL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ck/ckpt.h"
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

/* Progress on stderr. On a terminal, one line redrawn at most ten times a second.
 * Elsewhere (a batch log) nothing, unless the tool's --progress asks (force): then a
 * whole line every PROGRESS_EVERY seconds and one at the end, which a log keeps
 * readable. Safe to call often. */
typedef struct tool_progress {
    const char *prog;
    const char *label;
    bool tty;
    bool lines;                 /* --progress without a terminal */
    double t0, last;
    uint64_t done, total, shown;
} tool_progress;

void tool_progress_init(tool_progress *p, const char *prog, const char *label, bool force);
void tool_progress_update(void *arg, uint64_t done, uint64_t total);
void tool_progress_done(tool_progress *p);

/* A log callback for the core: "PROG: msg" on stderr. arg is the tool_progress, so
 * that one callback argument serves both (the core passes one cb_arg). */
void tool_log(void *arg, const char *msg);

/* "a partial copy from ckptd ID: K of N data files (NAMES...)" for a partial copy (the
 * names cut short at len), "" for a complete one (docs/FORMAT.md, "Copies"). */
const char *tool_copy_line(const ck_ckpt *ck, char *buf, size_t len);

double tool_now(void);
/* "1.50 GiB" */
const char *tool_bytes(uint64_t n, char *buf, size_t len);

#endif
