/* The per-rank micro-batch and accumulation steps of a global batch (see
 * ex_batch.h). Pure arithmetic: tests/trainer/test_batch.c walks every branch. */
#include "ex_batch.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int fail(char *err, size_t err_cap, const char *fmt, ...) {
    if (err && err_cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_cap, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* "1, 2, 4 or 8": the world sizes up to `limit` that divide g (at most 8 named). */
static void list_divisors(int64_t g, int64_t limit, char *buf, size_t cap) {
    int64_t found[8];
    int n = 0, more = 0;
    for (int64_t d = 1; d <= g && d <= limit; d++) {
        if (g % d) continue;
        if (n < 8) found[n++] = d;
        else more = 1;
    }
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used < cap; i++) {
        const char *sep = i == 0 ? "" : (i == n - 1 && !more) ? " or " : ", ";
        int w = snprintf(buf + used, cap - used, "%s%" PRId64, sep, found[i]);
        if (w > 0) used += (size_t)w;
    }
    if (more && used < cap) snprintf(buf + used, cap - used, ", ...");
}

int ex_batch_derive(int64_t global_batch, int world, int cap, ex_batch *out, char *err,
                    size_t err_cap) {
    if (global_batch < 1 || world < 1 || cap < 1 || !out)
        return fail(err, err_cap, "ex_batch_derive: bad arguments (app.global_batch = %" PRId64
                    ", world size %d, app.batch_size = %d; each must be >= 1)",
                    global_batch, world, cap);
    if (global_batch % world != 0) {
        char sizes[128];
        list_divisors(global_batch, INT64_MAX, sizes, sizeof sizes);
        const int64_t down = global_batch / world * world, up = down + world;
        return fail(err, err_cap,
                    "app.global_batch = %" PRId64 " sequences cannot be split evenly over %d "
                    "ranks (the world size must divide it); run on %s ranks, or set "
                    "app.global_batch to a multiple of %d (e.g. %" PRId64 " or %" PRId64 ")",
                    global_batch, world, sizes, world, down > 0 ? down : up,
                    down > 0 ? up : 2 * up);
    }
    const int64_t per_rank = global_batch / world;
    for (int64_t b = per_rank < cap ? per_rank : cap; b >= 1; b--) {
        if (per_rank % b) continue;
        const int64_t a = per_rank / b;
        if (a > EX_BATCH_MAX_ACCUMULATION)
            return fail(err, err_cap,
                        "app.global_batch = %" PRId64 " over %d ranks is %" PRId64 " sequences "
                        "per rank: with at most app.batch_size = %d per micro-step that takes "
                        "%" PRId64 " micro-steps, more than gradient_accumulation_steps allows "
                        "(%d); raise app.batch_size or run on more ranks",
                        global_batch, world, per_rank, cap, a, EX_BATCH_MAX_ACCUMULATION);
        out->micro_batch = (int)b;
        out->accumulation = (int)a;
        return 0;
    }
    /* Not reached: b = 1 divides every per_rank. */
    return fail(err, err_cap, "ex_batch_derive: no micro-batch divides %" PRId64, per_rank);
}
