/* A training program for run_preempt.sh (issue 29): stops, ends and fences
 * through the public API, with its faults injected from inside so that the
 * step they hit is known.
 *
 *   preempt <workdir> <tag> [option=value ...] [group.key=value ...]
 *
 * Every rank trains a small model of three units (sizes that divide by
 * nothing) with gradients that depend on the step, the rank and the element,
 * so a resumed run that took a different path would show in the bits. The
 * configuration is written to <workdir>/<tag>-<rank>.cfg: the cpu backend,
 * stage 2, AdamW, clipping (so that the gradient norm, which the step's
 * agreement carries beside the stop votes, decides bits), comm.timeout_s =
 * 120, checkpoint.dir = <workdir>/ckpt and checkpoint.resume = "auto"
 * ("none" with checkpoint.dir=""); arguments with a '.' in the key override
 * it.
 * Options (steps are optimizer steps, counted from 1):
 *   steps=N         train until N steps are applied (default 12)
 *   accumulate=K    micro-steps per step (gradient_accumulation_steps)
 *   sleep_ms=M      sleep before every micro-step (room for outside signals)
 *   signal_rank=R signal_step=S   rank R raises SIGUSR1 before the first
 *                   micro-step of step S (a preemption warning for one rank)
 *   twice=1         ... and raises it again 1.2 s later (a second signal)
 *   die_rank=R die_step=S         rank R raises SIGKILL there (a dead rank)
 *   stop_rank=R stop_step=S       rank R raises SIGSTOP there (a hung rank)
 *   fence_step=S    after step S rank 0 writes a generation one above this
 *                   job's into <ckpt>/generation (a newer launch started)
 *   final=DIR       at the end, zs_save into DIR (tensor hashes to compare)
 * Output: "rank R pid P" at the start; "rank 0: step S clip C" after each
 * step; "rank R: stopped after step S code C committed L" when
 * zs_stop_requested turns nonzero (then the program exits with C); "rank 0:
 * finished step S digest D" at the end (an FNV-1a digest of every
 * parameter). A failing call prints "rank R: FAILED <status>: <message>"
 * and exits 3 without MPI_Finalize. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "blocks.h"
#include "zeroshard.h"
#include "zeroshard_mpi.h"

#define UNITS 3
#define MAX_OVERRIDES 32

static int g_rank;

static void check(zs_status st, const char *what) {
    if (st == ZS_OK) return;
    printf("rank %d: FAILED %s in %s: %s\n", g_rank, zs_status_name(st), what, zs_last_error());
    fflush(stdout);
    _exit(3);
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

typedef struct options {
    long steps, accumulate, sleep_ms;
    long signal_rank, signal_step, twice;
    long die_rank, die_step, stop_rank, stop_step, fence_step;
    const char *final_dir;
} options;

static long value_of(const char *arg, const char *name, long current) {
    const size_t n = strlen(name);
    return strncmp(arg, name, n) == 0 && arg[n] == '=' ? atol(arg + n + 1) : current;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: preempt workdir tag [option=value ...] [group.key=value ...]\n");
        return 2;
    }
    const char *work = argv[1], *tag = argv[2];
    options o = {12, 1, 0, -1, -1, 0, -1, -1, -1, -1, -1, NULL};
    const char *overrides[MAX_OVERRIDES];
    int override_count = 0;
    for (int i = 3; i < argc; i++) {
        const char *eq = strchr(argv[i], '=');
        const char *dot = strchr(argv[i], '.');
        if (dot && eq && dot < eq) {
            if (override_count < MAX_OVERRIDES) overrides[override_count++] = argv[i];
            continue;
        }
        if (strncmp(argv[i], "final=", 6) == 0) o.final_dir = argv[i] + 6;
        o.steps = value_of(argv[i], "steps", o.steps);
        o.accumulate = value_of(argv[i], "accumulate", o.accumulate);
        o.sleep_ms = value_of(argv[i], "sleep_ms", o.sleep_ms);
        o.signal_rank = value_of(argv[i], "signal_rank", o.signal_rank);
        o.signal_step = value_of(argv[i], "signal_step", o.signal_step);
        o.twice = value_of(argv[i], "twice", o.twice);
        o.die_rank = value_of(argv[i], "die_rank", o.die_rank);
        o.die_step = value_of(argv[i], "die_step", o.die_step);
        o.stop_rank = value_of(argv[i], "stop_rank", o.stop_rank);
        o.stop_step = value_of(argv[i], "stop_step", o.stop_step);
        o.fence_step = value_of(argv[i], "fence_step", o.fence_step);
    }
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    printf("rank %d pid %d\n", g_rank, (int)getpid());
    fflush(stdout);

    char path[1024], ckpt[1024];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", work);
    for (int i = 0; i < override_count; i++)
        if (strncmp(overrides[i], "checkpoint.dir=", 15) == 0) {
            const char *dir = overrides[i] + 15;
            const size_t n = strlen(dir);
            const int quoted = n >= 2 && dir[0] == '"' && dir[n - 1] == '"';
            snprintf(ckpt, sizeof ckpt, "%.*s", (int)(quoted ? n - 2 : n), dir + quoted);
        }
    snprintf(path, sizeof path, "%s/%s-%d.cfg", work, tag, g_rank);
    FILE *f = fopen(path, "w");
    if (!f) return 2;
    fprintf(f,
            "backend = \"cpu\";\n"
            "gradient_accumulation_steps = %ld;\n"
            "gradient_clipping = 0.05;\n"
            "zero: { stage = 2; };\n"
            "optimizer: { type = \"adamw\"; lr = 0.01; weight_decay = 0.01; };\n"
            "comm: { timeout_s = 120; };\n"
            "checkpoint: { dir = \"%s\"; resume = \"%s\"; };\n",
            o.accumulate, ckpt, ckpt[0] ? "auto" : "none");
    fclose(f);
    zs_config *cfg = NULL;
    check(zs_config_load(path, &cfg), "zs_config_load");
    if (override_count > 0)
        check(zs_config_override_list(cfg, override_count, overrides), "zs_config_override_list");
    zs_ctx *zs = NULL;
    check(zs_create_with_comm(cfg, MPI_COMM_WORLD, &zs), "zs_create");
    zs_config_destroy(cfg);

    zs_unit *units[UNITS];
    zs_param *params[UNITS];
    int64_t numel[UNITS];
    const char *what = "";
    zs_status described = blocks_describe(zs, UNITS, 701, 263, units, params, numel, &what);
    check(described, what);
    check(zs_build(zs), "zs_build");

    while (zs_step_count(zs) < o.steps) {
        const long next = (long)zs_step_count(zs) + 1; /* the step these micro-steps make */
        zs_step_info info;
        for (long micro = 0; micro < o.accumulate; micro++) {
            if (o.sleep_ms > 0) sleep_ms(o.sleep_ms);
            if (micro == 0 && next == o.signal_step && g_rank == o.signal_rank) {
                raise(SIGUSR1);
                if (o.twice) {
                    sleep_ms(1200);
                    raise(SIGUSR1);
                }
            }
            if (micro == 0 && next == o.die_step && g_rank == o.die_rank) raise(SIGKILL);
            if (micro == 0 && next == o.stop_step && g_rank == o.stop_rank) raise(SIGSTOP);
            for (int u = 0; u < UNITS; u++) {
                check(zs_fetch(zs, units[u]), "zs_fetch");
                if (!zs_param_data(params[u])) check(ZS_ERR_STATE, "zs_param_data");
                check(zs_release(zs, units[u]), "zs_release");
            }
            for (int u = UNITS - 1; u >= 0; u--) {
                check(zs_fetch(zs, units[u]), "zs_fetch (backward)");
                float *g = zs_param_grad(params[u]);
                if (!g) check(ZS_ERR_STATE, "zs_param_grad");
                for (int64_t i = 0; i < numel[u]; i++)
                    g[i] += 0.001f * (float)((g_rank + 1) * (1 + (next + micro) % 7)) *
                            (float)(1 + i % 13) * (i % 2 ? -1.0f : 1.0f);
                check(zs_grads_ready(zs, units[u]), "zs_grads_ready");
                check(zs_release(zs, units[u]), "zs_release (backward)");
            }
            check(zs_step(zs, &info), "zs_step");
            const int code = zs_stop_requested(zs);
            if (code) {
                printf("rank %d: stopped after step %lld code %d committed %lld\n", g_rank,
                       (long long)zs_step_count(zs), code, (long long)zs_last_committed_step(zs));
                fflush(stdout);
                zs_destroy(zs);
                MPI_Finalize();
                return code;
            }
        }
        if (g_rank == 0) {
            printf("rank 0: step %lld clip %.3g\n", (long long)zs_step_count(zs), info.clip_coef);
            fflush(stdout);
        }
        if (g_rank == 0 && zs_step_count(zs) == o.fence_step) {
            char gen[1100];
            snprintf(gen, sizeof gen, "%s/generation", ckpt);
            FILE *g = fopen(gen, "w");
            if (!g) return 2;
            /* The runtime read its generation from job.generation or
             * ZS_JOB_GENERATION; the test passes it as an override. */
            long mine = 0;
            for (int i = 0; i < override_count; i++) mine = value_of(overrides[i], "job.generation", mine);
            fprintf(g, "%ld\n", mine + 1);
            fclose(g);
        }
    }

    /* An FNV-1a digest of every parameter, as rank 0 sees them. */
    uint64_t digest = 1469598103934665603ull;
    for (int u = 0; u < UNITS; u++) {
        check(zs_fetch(zs, units[u]), "zs_fetch (digest)");
        const unsigned char *bytes = zs_param_data(params[u]);
        if (!bytes) check(ZS_ERR_STATE, "zs_param_data (digest)");
        for (int64_t i = 0; i < numel[u] * 4; i++) digest = (digest ^ bytes[i]) * 1099511628211ull;
        check(zs_release(zs, units[u]), "zs_release (digest)");
    }
    if (o.final_dir) check(zs_save(zs, o.final_dir), "zs_save (final)");
    if (g_rank == 0) printf("rank 0: finished step %lld digest %016llx\n",
                            (long long)zs_step_count(zs), (unsigned long long)digest);
    fflush(stdout);
    zs_destroy(zs);
    MPI_Finalize();
    return 0;
}
