/* The simulated device's parts beyond the backend interface: the defaults of
 * its simulated time, and what zeroshard_sim.h (the programs' side: device
 * memory, copies, kernels run by the device's thread) needs. */
#ifndef ZS_BACKEND_SIM_SIM_BACKEND_H
#define ZS_BACKEND_SIM_SIM_BACKEND_H

#include <stddef.h>

#include "backend/backend.h"
#include "backend/sim/sim_stream.h"
#include "backend/stream_check.h"

/* Small enough for tests, large enough that the host runs ahead of the
 * device (an enqueue costs the host a microsecond): a launch of 20 us,
 * copies over a PCIe 4 x16 link (16 GB/s) and in device memory at a GPU's
 * bandwidth. ZS_SIM_LAUNCH_US, ZS_SIM_HOST_GBPS and ZS_SIM_DEVICE_GBPS
 * change them (0: no such cost). */
#define ZS__SIM_LAUNCH_US_DEFAULT 20.0
#define ZS__SIM_HOST_GBPS_DEFAULT 16.0
#define ZS__SIM_DEVICE_GBPS_DEFAULT 800.0

/* 1 when be is a sim device. */
int zs__sim_backend_is(const zs__backend *be);
/* The device thread's address of p (device or page-locked memory; other
 * host memory unchanged), for kernels. */
void *zs__sim_backend_inner(const zs__backend *be, const void *p);
/* Enqueues a kernel: fn(args copy) on the device's thread, in stream order,
 * after the latency of a launch; ranges[0..nranges) (outer addresses) are
 * what it reads and writes, for the stream-order check. */
zs_status zs__sim_backend_launch(zs__backend *be, const char *name, zs__sim_op_fn fn,
                                 const void *args, size_t args_bytes,
                                 const zs__stream_check_range *ranges, int nranges);
/* 1 when p..p+bytes is the device's memory. */
int zs__sim_backend_owns(const zs__backend *be, const void *p, size_t bytes);
/* The program's own device memory (zeroshard_sim.h): zeroed, not charged to
 * the accountant; free waits for the stream first. */
zs_status zs__sim_backend_program_alloc(zs__backend *be, size_t bytes, void **out);
zs_status zs__sim_backend_program_free(zs__backend *be, void *ptr);
/* The program's page-locked host memory (not charged to the accountant). */
zs_status zs__sim_backend_program_host_alloc(zs__backend *be, size_t bytes, void **out);
zs_status zs__sim_backend_program_host_free(zs__backend *be, void *ptr);
/* The program's copy (the backend's copy, its waits for pageable memory
 * not counted among the runtime's) and its wait for everything enqueued
 * (not counted either). */
zs_status zs__sim_backend_program_copy(zs__backend *be, void *dst, const void *src, size_t bytes);
zs_status zs__sim_backend_program_synchronize(zs__backend *be);
/* The program's wait for a fence (its events: the backend's fences), not
 * counted either. */
zs_status zs__sim_backend_program_fence_wait(zs__backend *be, void *fence);

#endif
