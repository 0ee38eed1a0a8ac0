/* A progress line for long tool runs (zs-ckpt export and verify).
 *
 * Quiet for short runs: nothing is printed before ZS_TOOL_PROGRESS_AFTER_S
 * seconds have passed (the environment variable ZS_PROGRESS_AFTER_S, a
 * number of seconds >= 0, replaces it; tests set 0 to see a line at once).
 * After that, at most one line per second goes to stderr:
 *   "zs-ckpt verify:  42% 1.2 GiB / 2.9 GiB, 310.5 MiB/s, ETA 6 s"
 * rewritten in place with '\r' when stderr is a terminal; otherwise (a log
 * file, a CI job) as plain lines, one each time another tenth of the work is
 * done, so a log gets about ten lines whatever the run's length.
 * Not thread-safe; one progress line at a time. */
#ifndef ZS_TOOLS_PROGRESS_H
#define ZS_TOOLS_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

/* Sizes are printed with the library's one formatter (core/memory.h). */
#include "core/memory.h"

/* Seconds a run must last before its first progress line. */
#define ZS_TOOL_PROGRESS_AFTER_S 2.0

typedef struct zs__progress {
    const char *label;  /* "zs-ckpt verify"; not copied */
    uint64_t total;     /* units of work (bytes) */
    uint64_t done;
    double start;       /* monotonic seconds */
    double last_print;  /* when the last line was printed; < 0 before the first */
    double after_s;     /* quiet period */
    int enabled;        /* 0 with --quiet */
    int tty;            /* stderr is a terminal: rewrite one line */
    int last_tenth;     /* tenths of the work done at the last plain line */
    int open_line;      /* a '\r' line is on the terminal without its newline */
} zs__progress;

/* Starts the clock. quiet != 0 turns every later call into a no-op. */
void zs__progress_begin(zs__progress *p, const char *label, uint64_t total, int quiet);
/* Records that `done` of `total` units are complete (monotonic) and prints
 * a line when one is due. Cheap enough to call per chunk of I/O. */
void zs__progress_update(zs__progress *p, uint64_t done);
/* Ends the run: when a line was shown, prints the final 100% line (and the
 * newline a terminal line lacks); prints nothing for a quiet run. */
void zs__progress_end(zs__progress *p);

#endif
