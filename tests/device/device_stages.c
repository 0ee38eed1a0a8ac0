/* The device stage test, written once (device_stages.h). */
#define _DEFAULT_SOURCE /* mkdtemp, nanosleep */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "device_stages.h"
#include "test_util.h"
#include "zeroshard.h"
#include "zeroshard_mpi.h"

#define STEPS 4
#define UNITS 3
#define SKIP_CODE 77

/* Parameter shapes: unit u holds a weight [rows x cols] and a bias [rows].
 * No unit's size is a multiple of 2 or 3 (the world sizes registered), so
 * every unit is padded and its last shard is partly padding. The last unit
 * (1035 elements, 4 KiB in fp32) is larger than a piece of the host staging
 * the comm.impl = "mpi" runs use (staging_bytes = 1024), so its shards go
 * through comm/staging.c in several pieces at np 1-3. */
static const int64_t shapes[UNITS][2] = {{7, 5}, {3, 7}, {45, 22}};
#define PARAMS (2 * UNITS)

typedef struct run {
    float *final[PARAMS]; /* downloaded fp32 values, registration order */
    int64_t numel[PARAMS];
} run;

/* The device under test (set by device_stages_main). */
static const device_ops *g_ops;

static int on_device(const zs_ctx *zs) { return strcmp(zs_backend_name(zs), g_ops->backend) == 0; }

/* Set by main for one run: before the final fetches, the compute stream is
 * held back this long (0: not held). */
static int hold_stream_ms = 0;

/* Copies between host and backend memory: the device's own in stream
 * order (waited for), plain memcpy on the CPU backend. */
static int stream_copy(zs_ctx *zs, void *dst, const void *src, size_t bytes, int to_device,
                       const char *what) {
    if (!on_device(zs)) {
        memcpy(dst, src, bytes);
        return 0;
    }
    return g_ops->copy(zs, dst, src, bytes, to_device, what);
}

static int read_back(zs_ctx *zs, void *host, const void *src, size_t bytes) {
    return stream_copy(zs, host, src, bytes, 0, "reading back");
}

static int write_grad(zs_ctx *zs, void *dst, const void *host, size_t bytes) {
    return stream_copy(zs, dst, host, bytes, 1, "writing a gradient");
}

/* A deterministic, parameter-dependent gradient: that of
 * sum_i (p_i - t_i)^2 / 2 + p_i^4 / 40, with targets t_i fixed per element. */
void device_stages_gradient(int param, const float *p, float *g, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float t = 0.5f * sinf(0.37f * (float)(i + 13 * param));
        g[i] = (p[i] - t) + 0.1f * p[i] * p[i] * p[i];
    }
}

/* For one run: more settings of the zero group, and the steps to train to
 * (a run that resumes from a checkpoint starts at its step). */
static const char *g_zero_extra = "";
static int g_steps = STEPS;

static int write_config(const char *backend, int stage, const char *extra, char *path,
                        size_t capacity) {
    char dir[] = "/tmp/zs_device_stages_XXXXXX";
    if (!mkdtemp(dir)) return -1;
    snprintf(path, capacity, "%s/run.cfg", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f,
            "seed = 11;\n"
            "backend = \"%s\";\n"
            "zero: { stage = %d; max_live_units = 2; align = 16; %s };\n"
            "optimizer: { type = \"adamw\"; lr = 0.01; weight_decay = 0.1; beta1 = 0.9;\n"
            "             beta2 = 0.99; eps = 1e-8; };\n"
            "precision: { dtype = \"fp32\"; };\n%s\n",
            backend, stage, g_zero_extra, extra ? extra : "");
    return fclose(f) == 0 ? 0 : -1;
}

static void remove_config(const char *path) {
    unlink(path);
    char dir[256];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        rmdir(dir);
    }
}

/* Trains STEPS steps with `backend` and `stage` on `comm` and downloads the
 * final parameters into out. Returns 0, or -1 after reporting a failure. */
static int train(MPI_Comm comm, const char *backend, int stage, const char *extra, run *out) {
    char path[256];
    if (write_config(backend, stage, extra, path, sizeof path) != 0) {
        ZT_CHECK_MSG(0, "cannot write a configuration under /tmp");
        return -1;
    }
    zs_config *cfg = NULL;
    zs_status st = zs_config_load(path, &cfg);
    remove_config(path);
    ZT_OK(st);
    if (st != ZS_OK) return -1;
    zs_ctx *zs = NULL;
    st = zs_create_with_comm(cfg, comm, &zs);
    zs_config_destroy(cfg);
    ZT_OK(st);
    if (st != ZS_OK) return -1;

    int rc = -1;
    zs_param *params[PARAMS] = {0};
    float *host_p = NULL, *host_g = NULL;
    for (int u = 0; u < UNITS && st == ZS_OK; u++) {
        char name[32];
        snprintf(name, sizeof name, "unit%d", u);
        st = zs_unit_begin(zs, name, NULL);
        snprintf(name, sizeof name, "unit%d.weight", u);
        if (st == ZS_OK)
            st = zs_param_create(zs, name, 2, shapes[u], ZS_INIT_NORMAL_STD(0.3), 0,
                                 &params[2 * u]);
        snprintf(name, sizeof name, "unit%d.bias", u);
        if (st == ZS_OK)
            st = zs_param_create(zs, name, 1, &shapes[u][0], ZS_INIT_UNIFORM_RANGE(-0.1, 0.1),
                                 ZS_PARAM_NO_DECAY, &params[2 * u + 1]);
        if (st == ZS_OK) st = zs_unit_end(zs);
    }
    if (st == ZS_OK) st = zs_build(zs);
    ZT_OK(st);
    if (st != ZS_OK) goto done;

    int64_t largest = 0;
    for (int i = 0; i < PARAMS; i++) {
        out->numel[i] = zs_param_numel(params[i]);
        if (out->numel[i] > largest) largest = out->numel[i];
    }
    host_p = malloc((size_t)largest * sizeof(float));
    host_g = malloc((size_t)largest * sizeof(float));
    ZT_REQUIRE(host_p && host_g);
    /* The step's host synchronizations are counted where nothing but the
     * norm needs one: one process (its collectives enqueue on the device)
     * and no offload (whose host-tier update drains the stream). */
    int ranks = 0;
    MPI_Comm_size(comm, &ranks);
    const int count_waits = on_device(zs) && ranks == 1 && !extra;
    /* Parameters on NVMe: the gathers of a step (everything but zs_step)
     * do not block the host. */
    const int count_gather_waits = on_device(zs) && ranks == 1 && extra &&
                                   strstr(extra, "params = \"nvme\"") != NULL;

    for (int step = (int)zs_step_count(zs); step < g_steps; step++) {
        const uint64_t pass_before = g_ops->waits(zs);
        /* Forward does nothing here; backward runs in reverse unit order. */
        for (int u = UNITS - 1; u >= 0; u--) {
            zs_unit *unit = zs_unit_at(zs, u);
            st = zs_fetch(zs, unit);
            ZT_OK(st);
            if (st != ZS_OK) goto done;
            for (int k = 0; k < 2; k++) {
                zs_param *p = params[2 * u + k];
                const size_t bytes = (size_t)zs_param_numel(p) * sizeof(float);
                void *data = zs_param_data(p), *grad = zs_param_grad(p);
                ZT_CHECK_MSG(data && grad, "step %d unit %d: %s", step, u, zs_last_error());
                if (!data || !grad) goto done;
                if (on_device(zs) && g_ops->gradient) {
                    /* A kernel in stream order, as a backward pass computes:
                     * nothing waits between the gathers of a pass. */
                    if (g_ops->gradient(zs, 2 * u + k, data, grad, zs_param_numel(p)) != 0)
                        goto done;
                    continue;
                }
                if (read_back(zs, host_p, data, bytes) != 0) goto done;
                device_stages_gradient(2 * u + k, host_p, host_g, zs_param_numel(p));
                if (write_grad(zs, grad, host_g, bytes) != 0) goto done;
            }
            st = zs_grads_ready(zs, unit);
            if (st == ZS_OK) st = zs_release(zs, unit);
            ZT_OK(st);
            if (st != ZS_OK) goto done;
        }
        zs_step_info info;
        const uint64_t waits_before = g_ops->waits(zs);
        /* Two staging halves: the first two gathers of a pass never wait,
         * a later one only where the device lags two gathers behind (the
         * sim device, 20 us a launch, does: 1 of 3 in some passes). Not
         * one wait per gather, which would end prefetching. */
        if (count_gather_waits)
            ZT_CHECK_MSG(waits_before - pass_before <= UNITS - 2, "stage %d step %d, parameters "
                         "on NVMe: the %d gathers of the backward pass blocked the host %llu "
                         "times; at most %d (the gathers after the first two) may",
                         stage, step, UNITS, (unsigned long long)(waits_before - pass_before),
                         UNITS - 2);
        st = zs_step(zs, &info);
        const uint64_t waits = g_ops->waits(zs) - waits_before;
        ZT_OK(st);
        if (st != ZS_OK) goto done;
        if (count_waits)
            ZT_CHECK_MSG(waits == 1, "%s stage %d step %d: zs_step blocked the host %llu times; "
                         "exactly one wait (the gradient's sums of squares) was expected",
                         backend, stage, step, (unsigned long long)waits);
        ZT_CHECK_MSG(!info.skipped && isfinite(info.grad_norm), "%s stage %d step %d: skipped %d, "
                     "grad norm %g", backend, stage, step, info.skipped, info.grad_norm);
    }

    /* Held back: the device sleeps while the first two units are fetched
     * back to back (max_live_units = 2), so both copies into place are
     * queued behind the sleep when the second gather refills staging. */
    if (hold_stream_ms > 0 && on_device(zs)) {
        ZT_CHECK_MSG(g_ops->hold(zs, hold_stream_ms) == 0, "holding the stream back failed");
        for (int u = 0; u < 2 && st == ZS_OK; u++) st = zs_fetch(zs, zs_unit_at(zs, u));
        ZT_OK(st);
        if (st != ZS_OK) goto done;
    }
    for (int u = 0; u < UNITS; u++) {
        zs_unit *unit = zs_unit_at(zs, u);
        const int held = hold_stream_ms > 0 && on_device(zs) && u < 2;
        st = held ? ZS_OK : zs_fetch(zs, unit);
        ZT_OK(st);
        if (st != ZS_OK) goto done;
        for (int k = 0; k < 2; k++) {
            const int i = 2 * u + k;
            out->final[i] = malloc((size_t)out->numel[i] * sizeof(float));
            ZT_REQUIRE(out->final[i]);
            const void *data = zs_param_data(params[i]);
            ZT_CHECK_MSG(data != NULL, "final fetch of unit %d: %s", u, zs_last_error());
            if (!data) goto done;
            if (read_back(zs, out->final[i], data, (size_t)out->numel[i] * sizeof(float)) != 0)
                goto done;
        }
        st = zs_release(zs, unit);
        ZT_OK(st);
        if (st != ZS_OK) goto done;
    }
    rc = 0;
done:
    free(host_p);
    free(host_g);
    zs_destroy(zs);
    return rc;
}

static void free_run(run *r) {
    for (int i = 0; i < PARAMS; i++) free(r->final[i]);
}

static void compare_bitwise(const run *a, const run *b, int stage, const char *what) {
    for (int i = 0; i < PARAMS; i++) {
        int64_t first = -1;
        for (int64_t j = 0; j < a->numel[i] && first < 0; j++)
            if (memcmp(&a->final[i][j], &b->final[i][j], sizeof(float)) != 0) first = j;
        ZT_CHECK_MSG(first < 0, "stage %d (%s) differs in parameter %d element %lld: "
                     "%.9g vs %.9g", stage, what, i, (long long)first,
                     first < 0 ? 0.0 : (double)a->final[i][first],
                     first < 0 ? 0.0 : (double)b->final[i][first]);
    }
}

static void compare_relative(const run *got, const run *want, int stage) {
    for (int i = 0; i < PARAMS; i++) {
        double diff = 0, scale = 0;
        for (int64_t j = 0; j < got->numel[i]; j++) {
            diff = fmax(diff, fabs((double)got->final[i][j] - (double)want->final[i][j]));
            scale = fmax(scale, fabs((double)want->final[i][j]));
        }
        ZT_CHECK_MSG(diff <= 1e-6 * scale, "%s stage %d vs cpu stage 0, parameter %d: "
                     "max |diff| %.3g > 1e-6 * max |cpu| %.3g", g_ops->backend, stage, i, diff,
                     scale);
    }
}

typedef struct feature {
    const char *name;
    int first_stage, last_stage, min_world;
    const char *zero; /* more of the zero group */
    const char *extra;
} feature;

static void features(const device_ops *ops, int world) {
    static const feature table[] = {
        {"buckets", 2, 3, 1, "", "comm: { bucket_bytes = 4096; };"},
        {"prefetch", 3, 3, 1, "prefetch_bytes = 65536;", NULL},
        {"hybrid sharding", 1, 3, 2, "shard_group = \"node\";", "comm: { ranks_per_node = 1; };"},
        {"ZeRO++ (qwZ, hpZ, qgZ int8)", 3, 3, 2, "secondary_partition = \"node\";",
         "comm: { ranks_per_node = 1; quantize_weights = \"int8\"; quantize_grads = \"int8\"; "
         "quant_block = 64; };"},
        {"qgZ int4", 1, 2, 2, "",
         "comm: { ranks_per_node = 1; quantize_grads = \"int4\"; quant_block = 48; };"},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const feature *f = &table[i];
        if (world < f->min_world) continue;
        for (int stage = f->first_stage; stage <= f->last_stage; stage++) {
            run dev, cpu;
            memset(&dev, 0, sizeof dev);
            memset(&cpu, 0, sizeof cpu);
            g_zero_extra = f->zero;
            ZT_REQUIRE(train(MPI_COMM_WORLD, ops->backend, stage, f->extra, &dev) == 0);
            ZT_REQUIRE(train(MPI_COMM_WORLD, "cpu", stage, f->extra, &cpu) == 0);
            g_zero_extra = "";
            compare_bitwise(&dev, &cpu, stage, f->name);
            free_run(&dev);
            free_run(&cpu);
        }
    }
}

/* A checkpoint saved from device memory after step 2 and loaded into a new
 * context (device memory again) continues to the uninterrupted run's bits. */
static void checkpoints(const device_ops *ops, const run *uninterrupted) {
    char dir[256] = "";
    if (zt_rank == 0) snprintf(dir, sizeof dir, "/tmp/zs_device_ckpt_XXXXXX");
    if (zt_rank == 0 && !mkdtemp(dir)) dir[0] = '\0';
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    ZT_REQUIRE(dir[0]);
    char extra[512];
    snprintf(extra, sizeof extra, "checkpoint: { dir = \"%s\"; every = 2; resume = \"auto\"; };",
             dir);
    for (int stage = 0; stage < 4; stage++) {
        char sub[300];
        snprintf(sub, sizeof sub, "%s/s%d", dir, stage);
        snprintf(extra, sizeof extra,
                 "checkpoint: { dir = \"%s\"; every = 2; resume = \"auto\"; };", sub);
        run first, resumed;
        memset(&first, 0, sizeof first);
        memset(&resumed, 0, sizeof resumed);
        g_steps = 2;
        ZT_REQUIRE(train(MPI_COMM_WORLD, ops->backend, stage, extra, &first) == 0);
        g_steps = STEPS;
        ZT_REQUIRE(train(MPI_COMM_WORLD, ops->backend, stage, extra, &resumed) == 0);
        compare_bitwise(&resumed, &uninterrupted[stage], stage,
                        "saved after step 2 from device memory, loaded into it, resumed");
        free_run(&first);
        free_run(&resumed);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (zt_rank == 0) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    }
}

/* The sim device's memory from too small to enough (ZS_SIM_MEMORY_BYTES,
 * in steps of 4 KiB, with device_memory_bytes unset so that no plan check
 * refuses first): each allocation on the way fails in turn, on every rank
 * alike, as out of memory naming the device, without a crash or a hang,
 * until the model fits. Stage 3 with host staging's buffers; not on CUDA,
 * whose memory is the GPU's. */
static void out_of_memory_walk(const device_ops *ops) {
    if (strcmp(ops->backend, "sim") != 0) return;
    int failures = 0, fitted = 0;
    for (int kib = 4; kib <= 256 && !fitted; kib += 4) {
        char bytes[32];
        snprintf(bytes, sizeof bytes, "%d", kib * 1024);
        setenv("ZS_SIM_MEMORY_BYTES", bytes, 1);
        char path[256];
        ZT_REQUIRE(write_config(ops->backend, 3, NULL, path, sizeof path) == 0);
        zs_config *cfg = NULL;
        zs_status st = zs_config_load(path, &cfg);
        remove_config(path);
        ZT_OK(st);
        zs_ctx *zs = NULL;
        st = zs_create_with_comm(cfg, MPI_COMM_WORLD, &zs);
        zs_config_destroy(cfg);
        zs_param *p = NULL;
        for (int u = 0; u < UNITS && st == ZS_OK; u++) {
            char name[32];
            snprintf(name, sizeof name, "unit%d", u);
            st = zs_unit_begin(zs, name, NULL);
            snprintf(name, sizeof name, "unit%d.weight", u);
            if (st == ZS_OK) st = zs_param_create(zs, name, 2, shapes[u], ZS_INIT_NORMAL_STD(0.3), 0, &p);
            if (st == ZS_OK) st = zs_unit_end(zs);
        }
        if (st == ZS_OK) st = zs_build(zs);
        if (st == ZS_OK) {
            fitted = 1;
        } else {
            failures++;
            ZT_CHECK_MSG(st == ZS_ERR_OUT_OF_MEMORY && strstr(zs_last_error(), "out of memory"),
                         "sim memory %d KiB: %s: %s", kib, zs_status_name(st), zs_last_error());
        }
        zs_destroy(zs);
    }
    unsetenv("ZS_SIM_MEMORY_BYTES");
    if (zt_rank == 0)
        printf("out-of-memory walk: %d refusals before the model fitted in %d KiB\n", failures,
               4 * (failures + 1));
    ZT_CHECK_MSG(fitted && failures > 0, "the walk: %d refusals, fitted %d", failures, fitted);
}

int device_stages_main(int argc, char **argv, const device_ops *ops) {
    g_ops = ops;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    int world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);

    /* Every rank skips if any must: a lone skipping rank would leave the
     * others waiting in zs_create. */
    char reason[256] = "";
    int skip = ops->must_skip(reason, sizeof reason), any_skip = 0;
    MPI_Allreduce(&skip, &any_skip, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any_skip) {
        if (zt_rank == 0 || skip)
            printf("SKIP: rank %d: %s\n", zt_rank, skip ? reason : "another rank cannot run");
        fflush(stdout);
        MPI_Finalize();
        return SKIP_CODE;
    }

    /* The reference: the CPU backend, stage 0, one process (each rank runs
     * it alone on MPI_COMM_SELF). */
    run reference;
    memset(&reference, 0, sizeof reference);
    ZT_REQUIRE(train(MPI_COMM_SELF, "cpu", 0, NULL, &reference) == 0);

    run runs[4], cpu[4];
    memset(runs, 0, sizeof runs);
    memset(cpu, 0, sizeof cpu);
    for (int stage = 0; stage < 4; stage++) {
        ZT_REQUIRE(train(MPI_COMM_WORLD, ops->backend, stage, NULL, &runs[stage]) == 0);
        compare_relative(&runs[stage], &reference, stage);
        if (stage > 0) compare_bitwise(&runs[stage], &runs[0], stage, "against stage 0");
        /* The engine inline (it runs inline on CUDA anyway: the same bits). */
        run sync;
        memset(&sync, 0, sizeof sync);
        ZT_REQUIRE(train(MPI_COMM_WORLD, ops->backend, stage, "comm: { overlap = false; };", &sync) == 0);
        compare_bitwise(&sync, &runs[stage], stage, "comm.overlap = false");
        free_run(&sync);
        /* MPI with host staging, in pieces smaller than the units, against
         * the CPU backend at this world size: bit for bit. */
        ZT_REQUIRE(train(MPI_COMM_WORLD, "cpu", stage, NULL, &cpu[stage]) == 0);
        run staged;
        memset(&staged, 0, sizeof staged);
        ZT_REQUIRE(train(MPI_COMM_WORLD, ops->backend, stage,
                         "comm: { impl = \"mpi\"; staging_bytes = 1024; };", &staged) == 0);
        compare_bitwise(&staged, &cpu[stage], stage, "comm.impl = mpi against the cpu backend");
        free_run(&staged);
    }
    /* Offload, against the same stage without it. */
    static const char *const offloads[] = {
        "offload: { optimizer = \"host\"; buffer_bytes = 4096; };",
        "offload: { optimizer = \"host\"; pin_memory = false; };",
        "offload: { optimizer = \"nvme\"; nvme_path = \"/tmp\"; buffer_bytes = 4096; };",
        "offload: { optimizer = \"host\"; params = \"host\"; };",
        "offload: { optimizer = \"nvme\"; params = \"nvme\"; nvme_path = \"/tmp\"; };",
    };
    for (int stage = 1; stage < 4; stage++)
        for (int k = 0; k < 5; k++) {
            if (k >= 3 && stage != 3) continue; /* parameters are sharded in stage 3 only */
            run offloaded;
            memset(&offloaded, 0, sizeof offloaded);
            ZT_REQUIRE(train(MPI_COMM_WORLD, ops->backend, stage, offloads[k], &offloaded) == 0);
            compare_bitwise(&offloaded, &runs[stage], stage, offloads[k]);
            free_run(&offloaded);
        }
    /* The runtime's other device paths against the CPU backend with the
     * same settings, bit for bit (its kernels are the CPU's on sim; on CUDA
     * the staged ring adds in the CPU's order): buckets, stage-3 prefetch,
     * hybrid sharding and ZeRO++ (one rank per simulated node, so both run
     * at every world size). */
    features(ops, world);
    checkpoints(ops, runs);
    out_of_memory_walk(ops);
    /* Parameters on NVMe with the device held back for 300 ms before two
     * gathers back to back (in fp32 the copy reads the staging's halves
     * themselves; the rounded halves of bf16/fp16 alternate the same way). */
    {
        run held;
        memset(&held, 0, sizeof held);
        hold_stream_ms = 300;
        ZT_REQUIRE(train(MPI_COMM_WORLD, ops->backend, 3, offloads[4], &held) == 0);
        hold_stream_ms = 0;
        compare_bitwise(&held, &runs[3], 3, "parameters on NVMe, gathers behind a held stream");
        free_run(&held);
    }
    for (int stage = 0; stage < 4; stage++) {
        free_run(&runs[stage]);
        free_run(&cpu[stage]);
    }
    free_run(&reference);

    /* A failure on one rank fails the job (mpirun reports the first nonzero
     * exit status); the barrier keeps ranks' reports together. */
    MPI_Barrier(MPI_COMM_WORLD);
    char name[64];
    snprintf(name, sizeof name, "%s%s", ops->test, world == 1 ? " (np 1)" : "");
    int status = zt_finish(name);
    MPI_Finalize();
    return status;
}
