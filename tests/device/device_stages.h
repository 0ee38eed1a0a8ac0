/* Stages 0-3 on a device backend (run under mpirun -np 1, 2 and 3; ranks
 * beyond a node's devices share them), written once for the CUDA backend
 * (tests/cuda/test_cuda_stages.c) and the simulated device
 * (tests/sim/test_sim_stages.c), which hand it their copies, a way to hold
 * the device back, and their count of blocking waits:
 *   - a few AdamW steps whose gradients are written into the device gradient
 *     buffers in stream order;
 *   - stages 0-3 give bit-identical final parameters at this world size
 *     (stage 0's all-reduce is reduce-scatter + all-gather, comm.c), with
 *     the collectives comm.impl = "auto" chose (NCCL with a GPU per rank,
 *     else MPI with host staging), and with comm.overlap off;
 *   - comm.impl = "mpi" (device buffers staged through pinned host memory
 *     into the MPI ring) gives the CPU backend's bits at the same world size
 *     and stage: the ring adds in the same order and the kernels give the
 *     CPU's bits;
 *   - every stage matches the CPU backend's single-process stage-0 run within
 *     1e-6 relative (max |a-b| / max |b| per tensor);
 *   - offload: in stages 1-3 the optimizer state in pinned host memory
 *     (offload.optimizer = "host", plus offload.params = "host" in stage 3,
 *     and once unpinned) and on NVMe (swap files under /tmp; in stage 3 also
 *     with the parameters there) gives the same bits as no offload: the host
 *     runs the CPU backend's kernels, which match the device's bit for bit;
 *   - one host synchronization per optimizer step: at np 1 without offload,
 *     zs_step blocks the host exactly once in every stage, for the
 *     gradient's sums of squares of all units together (the backend's
 *     blocking waits); with the parameters on NVMe the gathers of a step
 *     block it never (their staging alternates halves guarded by fences
 *     instead of a wait after every gather);
 *   - parameters on NVMe, the device held back: the stream is made to sleep,
 *     then two units are fetched back to back, so both gathers' copies out
 *     of the pinned staging are still queued when the second gather has
 *     filled its staging; the values must still be each unit's own (issue
 *     26, item 2).
 * Every rank computes the same gradient, so the average over ranks is that
 * gradient exactly (x + x = 2x and 2x / 2 = x in floating point), and the
 * single-process CPU run is a valid reference at any world size.
 *
 * Where the device cannot run (no GPU), every rank prints SKIP and exits 77,
 * which mpirun passes on and ctest reports as skipped. */
#ifndef ZS_TESTS_DEVICE_STAGES_H
#define ZS_TESTS_DEVICE_STAGES_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard.h"

typedef struct device_ops {
    const char *backend; /* "cuda", "sim" */
    const char *test;    /* the test's name, for its summary */
    /* 1 (reason set) when this rank cannot run the device. */
    int (*must_skip)(char *reason, size_t capacity);
    /* A copy between host and device memory in stream order that the host
     * waits for (a read sees every gather and update before it; a gradient
     * write is ordered like a backward kernel). 0, or -1 after a message. */
    int (*copy)(zs_ctx *zs, void *dst, const void *src, size_t bytes, int to_device,
                const char *what);
    /* Makes the device's stream sleep `ms` before what comes next. */
    int (*hold)(zs_ctx *zs, int ms);
    /* The backend's blocking waits so far. */
    uint64_t (*waits)(const zs_ctx *zs);
    /* Optional: writes device_stages_gradient(param, p, g, n) of device
     * memory in stream order without waiting (a backward kernel); without
     * it the test reads the parameter back, computes on the host and
     * writes the gradient, waiting each time. 0, or -1 after a message. */
    int (*gradient)(zs_ctx *zs, int param, const void *p, void *g, int64_t n);
} device_ops;

/* The test's gradient, for parameter `param`: that of
 * sum_i (p_i - t_i)^2 / 2 + p_i^4 / 40, with targets t_i fixed per element
 * (the host's and a device kernel's, the same code). */
void device_stages_gradient(int param, const float *p, float *g, int64_t n);

/* The whole test: MPI_Init_thread to MPI_Finalize. Returns the exit code. */
int device_stages_main(int argc, char **argv, const device_ops *ops);

#endif
