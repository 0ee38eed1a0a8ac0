/* The injected network of the benchmarks (injected_network.h). */
#include "comm/injected_network.h"

#include <errno.h>
#include <time.h>

#include "core/clock.h"
#include "core/env.h"
#include "core/log.h"

int zs__injected_network_from_env(zs__injected_network *net) {
    double us = 0.0, gbps = 0.0;
    char why[256];
    if (zs__env_nonnegative(ZS_ENV_COMM_DELAY_US, &us, why, sizeof why) != 0)
        ZS_WARN("%s; ignored", why);
    if (zs__env_nonnegative(ZS_ENV_COMM_DELAY_GBPS, &gbps, why, sizeof why) != 0)
        ZS_WARN("%s; ignored", why);
    net->latency_s = us * 1e-6;
    net->bytes_per_s = gbps * 1e9 / 8.0;
    if (net->latency_s <= 0 && net->bytes_per_s <= 0) return 0;
    ZS_INFO("injected network: every collective takes at least %g us + bytes / %g Gbit/s", us,
            gbps);
    return 1;
}

void zs__injected_network_after_op(void *ctx, const zs__engine_op *op) {
    const zs__injected_network *net = ctx;
    double want = net->latency_s;
    if (net->bytes_per_s > 0) want += (double)op->bytes / net->bytes_per_s;
    const double spent = (double)(zs__clock_ns() - op->start_ns) * 1e-9;
    if (spent >= want) return;
    const double rest = want - spent;
    struct timespec ts = {(time_t)rest, (long)((rest - (double)(time_t)rest) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}
