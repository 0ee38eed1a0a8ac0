/* Stages 0-3 on the CUDA backend (tests/device/device_stages.h says what is
 * checked): the CUDA side of the test, its copies on the compute stream, a
 * host function that holds the stream back, and the backend's count of
 * blocking waits. Without a CUDA device every rank prints SKIP and exits 77. */
#define _DEFAULT_SOURCE /* nanosleep */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <time.h>

#include "device_stages.h"
#include "test_util.h"
#include "zero/cuda/stream_api.h"
#include "zeroshard_cuda.h"

static void CUDART_CB sleep_on_stream(void *ms) {
    const int n = *(const int *)ms;
    struct timespec nap = {n / 1000, (long)(n % 1000) * 1000000L};
    nanosleep(&nap, NULL);
}

static int cuda_copy(zs_ctx *zs, void *dst, const void *src, size_t bytes, int to_device,
                     const char *what) {
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

static int cuda_hold(zs_ctx *zs, int ms) {
    static int held_ms;
    held_ms = ms;
    return cudaLaunchHostFunc(zs_cuda_stream(zs), sleep_on_stream, &held_ms) == cudaSuccess ? 0
                                                                                            : -1;
}

static uint64_t cuda_waits(const zs_ctx *zs) { return zs__cuda_blocking_waits(zs); }

/* 1 (with `reason` set) when this rank has no CUDA device. Ranks beyond
 * a node's devices share them (comm.impl = "auto" then stages through
 * MPI), so the device count is no reason to skip. */
static int cuda_must_skip(char *reason, size_t capacity) {
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
    static const device_ops ops = {"cuda", "test_cuda_stages", cuda_must_skip, cuda_copy,
                                   cuda_hold, cuda_waits, NULL};
    return device_stages_main(argc, argv, &ops);
}
