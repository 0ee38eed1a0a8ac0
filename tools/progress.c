/* The progress line of long tool runs (progress.h). */
#include "progress.h"

#include <stdio.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/env.h"

static void eta_text(char *out, size_t cap, double seconds) {
    if (seconds < 0) snprintf(out, cap, "?");
    else if (seconds < 100) snprintf(out, cap, "%.0f s", seconds);
    else if (seconds < 6000) snprintf(out, cap, "%.0f min", seconds / 60.0);
    else snprintf(out, cap, "%.1f h", seconds / 3600.0);
}

static void print_line(zs__progress *p, double t) {
    const double elapsed = t - p->start;
    const double rate = elapsed > 0 ? (double)p->done / elapsed : 0.0;
    const double percent = p->total ? 100.0 * (double)p->done / (double)p->total : 100.0;
    const double eta = p->done >= p->total ? 0.0 : rate > 0 ? (double)(p->total - p->done) / rate
                                                              : -1.0;
    char done[32], total[32], speed[32], left[32];
    zs__bytes_text(done, sizeof done, (double)p->done);
    zs__bytes_text(total, sizeof total, (double)p->total);
    zs__bytes_text(speed, sizeof speed, rate);
    eta_text(left, sizeof left, eta);
    /* The trailing spaces cover a longer previous line on a terminal. */
    fprintf(stderr, "%s%s: %3.0f%% %s / %s, %s/s, ETA %s%s", p->tty ? "\r" : "", p->label,
            percent, done, total, speed, left, p->tty ? "    " : "\n");
    fflush(stderr);
    p->open_line = p->tty;
    p->last_print = t;
}

void zs__progress_begin(zs__progress *p, const char *label, uint64_t total, int quiet) {
    p->label = label;
    p->total = total;
    p->done = 0;
    p->start = zs__clock_s();
    p->last_print = -1.0;
    p->after_s = ZS_TOOL_PROGRESS_AFTER_S;
    double after = 0.0;
    char why[256];
    if (zs__env_text(ZS_ENV_PROGRESS_AFTER_S)) {
        if (zs__env_nonnegative(ZS_ENV_PROGRESS_AFTER_S, &after, why, sizeof why) == 0)
            p->after_s = after;
        else
            fprintf(stderr, "warning: %s; progress starts after %g s\n", why, p->after_s);
    }
    p->enabled = !quiet;
    p->tty = isatty(STDERR_FILENO);
    p->last_tenth = 0;
    p->open_line = 0;
}

void zs__progress_update(zs__progress *p, uint64_t done) {
    if (!p->enabled) return;
    if (done > p->total) done = p->total;
    if (done > p->done) p->done = done;
    const double t = zs__clock_s();
    if (t - p->start < p->after_s) return;
    if (p->last_print >= 0 && t - p->last_print < 1.0) return;
    const int tenth = p->total ? (int)(10 * p->done / p->total) : 10;
    /* A log gets a line when another tenth is done (and the first one). */
    if (!p->tty && p->last_print >= 0 && tenth <= p->last_tenth) return;
    p->last_tenth = tenth;
    print_line(p, t);
}

void zs__progress_end(zs__progress *p) {
    if (!p->enabled || p->last_print < 0) return;
    p->done = p->total;
    print_line(p, zs__clock_s());
    if (p->open_line) fputc('\n', stderr);
    p->open_line = 0;
}
