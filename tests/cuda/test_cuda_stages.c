/* Stages 0-3 on the CUDA backend (run under mpirun -np 1, 2 and 3, on any
 * number of GPUs: ranks beyond a node's GPUs share them):
 *   - a few AdamW steps whose gradients are written into the device gradient
 *     buffers on the compute stream (zs_cuda_stream);
 *   - stages 0-3 give bit-identical final parameters at this world size
 *     (stage 0's all-reduce is reduce-scatter + all-gather, comm.c), with
 *     the collectives comm.impl = "auto" chose (NCCL with a GPU per rank,
 *     else MPI with host staging), and with comm.overlap off;
 *   - comm.impl = "mpi" (device buffers staged through pinned host memory
 *     into the MPI ring) gives the CPU backend's bits at the same world size
 *     and stage: the ring adds in the same order and the kernels give the
 *     CPU's bits (test_cuda_kernels);
 *   - every stage matches the CPU backend's single-process stage-0 run within
 *     1e-6 relative (max |a-b| / max |b| per tensor);
 *   - offload: in stages 1-3 the optimizer state in pinned host memory
 *     (offload.optimizer = "host", plus offload.params = "host" in stage 3,
 *     and once unpinned) and on NVMe (swap files under /tmp; in stage 3 also
 *     with the parameters there) gives the same
 *     bits as no offload: the host runs the CPU backend's kernels, which
 *     match the device's bit for bit (test_cuda_kernels);
 *   - one host synchronization per optimizer step: at np 1 without offload
 *     (NCCL, whose collectives only enqueue), zs_step blocks the host
 *     exactly once in every stage, for the gradient's sums of squares of
 *     all units together (the CUDA backend's wait count,
 *     zs__cuda_blocking_waits); with the parameters on NVMe the gathers
 *     of a step block it never (their staging alternates halves guarded by
 *     fences instead of a wait after every gather);
 *   - parameters on NVMe, the device held back: a host function that
 *     sleeps is queued on the compute stream, then two units are fetched
 *     back to back, so both gathers' copies out of the pinned staging are
 *     still queued when the second gather has filled its staging; the
 *     values must still be each unit's own (issue 26, item 2).
 * Every rank computes the same gradient, so the average over ranks is that
 * gradient exactly (x + x = 2x and 2x / 2 = x in floating point), and the
 * single-process CPU run is a valid reference at any world size.
 *
 * Without a usable device every rank prints SKIP and exits 77, which mpirun
 * passes on and ctest reports as skipped. */
#define _DEFAULT_SOURCE /* mkdtemp, nanosleep */
#include <cuda_runtime_api.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"
#include "zero/cuda/stream_api.h"
#include "zeroshard.h"
#include "zeroshard_cuda.h"
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

static int is_cuda(const zs_ctx *zs) { return strcmp(zs_backend_name(zs), "cuda") == 0; }

/* Set by main for one run: before the final fetches, the compute stream is
 * held back by a host function that sleeps this long (0: not held). */
static int hold_stream_ms = 0;

static void CUDART_CB sleep_on_stream(void *ms) {
    const int n = *(const int *)ms;
    struct timespec nap = {n / 1000, (long)(n % 1000) * 1000000L};
    nanosleep(&nap, NULL);
}

/* Copies between host and backend memory. On CUDA the copy runs on the
 * compute stream, so a read sees every all-gather and optimizer update
 * zeroshard ordered there, and a gradient write is ordered like a backward
 * kernel; the host buffer is reused right away, so the copy is waited for. */
static int stream_copy(zs_ctx *zs, void *dst, const void *src, size_t bytes, int to_device,
                       const char *what) {
    if (!is_cuda(zs)) {
        memcpy(dst, src, bytes);
        return 0;
    }
    cudaStream_t stream = zs_cuda_stream(zs);
    cudaError_t rc = cudaMemcpyAsync(dst, src, bytes,
                                     to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                     stream);
    if (rc == cudaSuccess) rc = cudaStreamSynchronize(stream);
    if (rc != cudaSuccess) {
        fprintf(stderr, "rank %d: %s (%zu bytes) failed: %s\n", zt_rank, what, bytes,
                cudaGetErrorString(rc));
        return -1;
    }
    return 0;
}

static int read_back(zs_ctx *zs, void *host, const void *src, size_t bytes) {
    return stream_copy(zs, host, src, bytes, 0, "reading back");
}

static int write_grad(zs_ctx *zs, void *dst, const void *host, size_t bytes) {
    return stream_copy(zs, dst, host, bytes, 1, "writing a gradient");
}

/* A deterministic, parameter-dependent gradient: that of
 * sum_i (p_i - t_i)^2 / 2 + p_i^4 / 40, with targets t_i fixed per element. */
static void gradient(int param, const float *p, float *g, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float t = 0.5f * sinf(0.37f * (float)(i + 13 * param));
        g[i] = (p[i] - t) + 0.1f * p[i] * p[i] * p[i];
    }
}

static int write_config(const char *backend, int stage, const char *extra, char *path,
                        size_t capacity) {
    char dir[] = "/tmp/zs_cuda_stages_XXXXXX";
    if (!mkdtemp(dir)) return -1;
    snprintf(path, capacity, "%s/run.cfg", dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f,
            "seed = 11;\n"
            "backend = \"%s\";\n"
            "zero: { stage = %d; max_live_units = 2; align = 16; };\n"
            "optimizer: { type = \"adamw\"; lr = 0.01; weight_decay = 0.1; beta1 = 0.9;\n"
            "             beta2 = 0.99; eps = 1e-8; };\n"
            "precision: { dtype = \"fp32\"; };\n%s\n",
            backend, stage, extra ? extra : "");
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
    const int count_waits = is_cuda(zs) && ranks == 1 && !extra;
    /* Parameters on NVMe: the gathers of a step (everything but zs_step)
     * do not block the host. */
    const int count_gather_waits = is_cuda(zs) && ranks == 1 && extra &&
                                   strstr(extra, "params = \"nvme\"") != NULL;

    for (int step = 0; step < STEPS; step++) {
        const uint64_t pass_before = zs__cuda_blocking_waits(zs);
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
                if (read_back(zs, host_p, data, bytes) != 0) goto done;
                gradient(2 * u + k, host_p, host_g, zs_param_numel(p));
                if (write_grad(zs, grad, host_g, bytes) != 0) goto done;
            }
            st = zs_grads_ready(zs, unit);
            if (st == ZS_OK) st = zs_release(zs, unit);
            ZT_OK(st);
            if (st != ZS_OK) goto done;
        }
        zs_step_info info;
        const uint64_t waits_before = zs__cuda_blocking_waits(zs);
        if (count_gather_waits)
            ZT_CHECK_MSG(waits_before == pass_before, "stage %d step %d, parameters on NVMe: "
                         "the gathers of the backward pass blocked the host %llu times; none "
                         "was expected", stage, step,
                         (unsigned long long)(waits_before - pass_before));
        st = zs_step(zs, &info);
        const uint64_t waits = zs__cuda_blocking_waits(zs) - waits_before;
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
    if (hold_stream_ms > 0 && is_cuda(zs)) {
        cudaError_t e = cudaLaunchHostFunc(zs_cuda_stream(zs), sleep_on_stream, &hold_stream_ms);
        ZT_CHECK_MSG(e == cudaSuccess, "cudaLaunchHostFunc: %s", cudaGetErrorString(e));
        for (int u = 0; u < 2 && st == ZS_OK; u++) st = zs_fetch(zs, zs_unit_at(zs, u));
        ZT_OK(st);
        if (st != ZS_OK) goto done;
    }
    for (int u = 0; u < UNITS; u++) {
        zs_unit *unit = zs_unit_at(zs, u);
        const int held = hold_stream_ms > 0 && is_cuda(zs) && u < 2;
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
        ZT_CHECK_MSG(diff <= 1e-6 * scale, "cuda stage %d vs cpu stage 0, parameter %d: "
                     "max |diff| %.3g > 1e-6 * max |cpu| %.3g", stage, i, diff, scale);
    }
}

/* 1 (with `reason` set) when this rank has no CUDA device. Ranks beyond
 * a node's devices share them (comm.impl = "auto" then stages through
 * MPI), so the device count is no reason to skip. */
static int must_skip(char *reason, size_t capacity) {
    int devices = 0;
    cudaError_t rc = cudaGetDeviceCount(&devices);
    if (rc != cudaSuccess) {
        snprintf(reason, capacity, "no usable CUDA device (%s)", cudaGetErrorString(rc));
        return 1;
    }
    if (devices == 0) {
        snprintf(reason, capacity, "no CUDA device");
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &(int){0}); /* the comm engine's thread */
    int world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &zt_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);

    /* Every rank skips if any must: a lone skipping rank would leave the
     * others waiting in zs_create. */
    char reason[256] = "";
    int skip = must_skip(reason, sizeof reason), any_skip = 0;
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
        ZT_REQUIRE(train(MPI_COMM_WORLD, "cuda", stage, NULL, &runs[stage]) == 0);
        compare_relative(&runs[stage], &reference, stage);
        if (stage > 0) compare_bitwise(&runs[stage], &runs[0], stage, "against stage 0");
        /* The engine inline (it runs inline on CUDA anyway: the same bits). */
        run sync;
        memset(&sync, 0, sizeof sync);
        ZT_REQUIRE(train(MPI_COMM_WORLD, "cuda", stage, "comm: { overlap = false; };", &sync) == 0);
        compare_bitwise(&sync, &runs[stage], stage, "comm.overlap = false");
        free_run(&sync);
        /* MPI with host staging, in pieces smaller than the units, against
         * the CPU backend at this world size: bit for bit. */
        ZT_REQUIRE(train(MPI_COMM_WORLD, "cpu", stage, NULL, &cpu[stage]) == 0);
        run staged;
        memset(&staged, 0, sizeof staged);
        ZT_REQUIRE(train(MPI_COMM_WORLD, "cuda", stage,
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
            ZT_REQUIRE(train(MPI_COMM_WORLD, "cuda", stage, offloads[k], &offloaded) == 0);
            compare_bitwise(&offloaded, &runs[stage], stage, offloads[k]);
            free_run(&offloaded);
        }
    /* Parameters on NVMe with the device held back for 300 ms before two
     * gathers back to back (in fp32 the copy reads the staging's halves
     * themselves; the rounded halves of bf16/fp16 alternate the same way). */
    {
        run held;
        memset(&held, 0, sizeof held);
        hold_stream_ms = 300;
        ZT_REQUIRE(train(MPI_COMM_WORLD, "cuda", 3, offloads[4], &held) == 0);
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
    int status = zt_finish(world == 1 ? "test_cuda_stages (np 1)" : "test_cuda_stages");
    MPI_Finalize();
    return status;
}
