/* The injected network of the benchmarks (injected_network.h).
 *
 * Floor (src/floors.txt): owns the simulated network's state; calls the
 * communicator's counters below it.
 */
#include "comm/injected_network.h"

#include <errno.h>
#include <time.h>

#include "comm/comm.h"
#include "core/clock.h"
#include "core/env.h"
#include "core/log.h"

static double read_nonnegative(zs__env_var var, int *set) {
    double value = 0.0;
    char why[256];
    if (zs__env_nonnegative(var, &value, why, sizeof why) != 0) ZS_WARN("%s; ignored", why);
    else if (zs__env_text(var)) *set = 1;
    return value;
}

int zs__injected_network_from_env(zs__injected_network *net) {
    int us_set = 0, gbps_set = 0, us_inter_set = 0, gbps_inter_set = 0;
    const double us = read_nonnegative(ZS_ENV_COMM_DELAY_US, &us_set);
    const double gbps = read_nonnegative(ZS_ENV_COMM_DELAY_GBPS, &gbps_set);
    const double us_inter = read_nonnegative(ZS_ENV_COMM_DELAY_US_INTER, &us_inter_set);
    const double gbps_inter = read_nonnegative(ZS_ENV_COMM_DELAY_GBPS_INTER, &gbps_inter_set);
    net->latency_s = us * 1e-6;
    net->bytes_per_s = gbps * 1e9 / 8.0;
    net->per_link = us_inter_set || gbps_inter_set;
    net->latency_inter_s = us_inter_set ? us_inter * 1e-6 : net->latency_s;
    net->bytes_per_s_inter = gbps_inter_set ? gbps_inter * 1e9 / 8.0 : net->bytes_per_s;
    net->world = NULL;
    net->intra_before = net->inter_before = 0;
    if (net->latency_s <= 0 && net->bytes_per_s <= 0 && net->latency_inter_s <= 0 &&
        net->bytes_per_s_inter <= 0)
        return 0;
    if (!net->per_link)
        ZS_INFO("injected network: every collective takes at least %g us + bytes / %g Gbit/s", us,
                gbps);
    else
        ZS_INFO("injected network: every collective takes at least its latency (%g us inside a "
                "node, %g us when it crosses nodes) + its bytes inside a node / %g Gbit/s + its "
                "bytes across nodes / %g Gbit/s (0: no limit)",
                net->latency_s * 1e6, net->latency_inter_s * 1e6, net->bytes_per_s * 8e-9,
                net->bytes_per_s_inter * 8e-9);
    return 1;
}

void zs__injected_network_watch(zs__injected_network *net, const zs__comm *world) {
    net->world = world;
}

static void link_totals(const zs__injected_network *net, uint64_t *intra, uint64_t *inter) {
    *intra = *inter = 0;
    if (!net->world) return;
    zs_comm_stats s;
    zs__comm_stats_total(net->world, &s);
    for (int op = 0; op < ZS_COMM_OP_COUNT; op++) {
        *intra += s.bytes_intra[op];
        *inter += s.bytes_inter[op];
    }
}

double zs__injected_network_want_s(const zs__injected_network *net, uint64_t bytes,
                                   uint64_t sent_intra, uint64_t sent_inter) {
    if (!net->per_link) {
        double want = net->latency_s;
        if (net->bytes_per_s > 0) want += (double)bytes / net->bytes_per_s;
        return want;
    }
    double want = sent_inter > 0 ? net->latency_inter_s : net->latency_s;
    if (net->bytes_per_s > 0) want += (double)sent_intra / net->bytes_per_s;
    if (net->bytes_per_s_inter > 0) want += (double)sent_inter / net->bytes_per_s_inter;
    return want;
}

void zs__injected_network_before_op(void *ctx, const zs__engine_op *op) {
    (void)op;
    zs__injected_network *net = ctx;
    if (net->per_link) link_totals(net, &net->intra_before, &net->inter_before);
}

void zs__injected_network_after_op(void *ctx, const zs__engine_op *op) {
    zs__injected_network *net = ctx;
    uint64_t intra = 0, inter = 0;
    if (net->per_link) {
        link_totals(net, &intra, &inter);
        intra -= net->intra_before;
        inter -= net->inter_before;
    }
    const double want = zs__injected_network_want_s(net, op->bytes, intra, inter);
    const double spent = (double)(zs__clock_ns() - op->start_ns) * 1e-9;
    if (spent >= want) return;
    const double rest = want - spent;
    struct timespec ts = {(time_t)rest, (long)((rest - (double)(time_t)rest) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}
