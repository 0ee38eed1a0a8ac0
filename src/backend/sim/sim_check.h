/* The simulated device's guard: what makes wrong orders fail loudly.
 *
 * Two parts, both process-wide (signal handlers are):
 *
 *   - A device address dereferenced by host code ends the process with a
 *     message that names the sim device (the outer view of device memory has
 *     no access, so the dereference faults as it would on a GPU).
 *
 *   - The stream-order check (backend/stream_check.h), on unless
 *     ZS_STREAM_CHECK=0: every op declares at enqueue the bytes it reads and
 *     writes; waits (synchronize, fences) and the host's accesses to
 *     page-locked memory are checked against them. Host accesses are found
 *     two ways. Explicitly: the runtime declares where host code hands
 *     page-locked memory to the CPU's kernels, to MPI or to pread
 *     (zs__sim_check_host_use through the backend's host_access op), which
 *     also lets OpenMP's worker threads and the kernel's own reads and
 *     writes (which fail with EFAULT, not a signal) through. Implicitly:
 *     while a queued op may still read a page-locked page it is read-only
 *     (written: no access), so any other host access faults; the handler
 *     checks it as a host access of the faulting thread, and lifts the
 *     protection when that thread is ordered after every device access of
 *     the page, or lets the one instruction through (single-stepped, then
 *     protected again) when only the bytes it touches are ordered (two
 *     staging halves that share a page). A race ends the process with the
 *     check's report. The verdict depends only on the order of enqueues,
 *     waits and accesses, never on whether the device's thread has run the
 *     op yet: a protection lifted by a wait is lifted whether or not the
 *     device was behind.
 *
 * What it cannot see: a host access to a page whose protection an ordered
 * access of another thread lifted earlier (protection is per page, the
 * clocks per thread), and accesses that never fault or are never declared.
 * Faults are decoded on x86-64 (read or write, single-stepping); elsewhere
 * every fault counts as a write and an ordered one lifts the protection. */
#ifndef ZS_BACKEND_SIM_SIM_CHECK_H
#define ZS_BACKEND_SIM_SIM_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "backend/sim/sim_arena.h"
#include "backend/stream_check.h"
#include "zeroshard.h"

typedef struct zs__sim_check zs__sim_check;

/* Installs the fault handlers for these arenas (one sim device per process
 * is guarded; a second one while the first exists is not, and says so at
 * DEBUG) and, with `checking`, creates the checker (abort at the first
 * race, backtraces in the reports). */
zs_status zs__sim_check_create(zs__sim_arena *device, zs__sim_arena *pinned, int checking,
                               zs__sim_check **out);
/* Restores the program's handlers and frees; NULL is a no-op. */
void zs__sim_check_destroy(zs__sim_check *ck);
/* 1 when the stream-order check runs. */
int zs__sim_check_on(const zs__sim_check *ck);

/* Right after an op entered the queue, under the lock that keeps these
 * calls in queue order: records its ranges (outer addresses), protects
 * the page-locked pages it touches. */
zs_status zs__sim_check_enqueue(zs__sim_check *ck, const char *op,
                                const zs__stream_check_range *ranges, int nranges);
/* The calling thread waited for every op enqueued so far / recorded a
 * fence / waited for one / a fence was destroyed. */
void zs__sim_check_synchronize(zs__sim_check *ck);
void zs__sim_check_fence_record(zs__sim_check *ck, const void *fence);
void zs__sim_check_fence_wait(zs__sim_check *ck, const void *fence);
void zs__sim_check_fence_forget(zs__sim_check *ck, const void *fence);
/* Host-to-host order (backend.h: order_release, order_acquire). */
void zs__sim_check_release(zs__sim_check *ck, const void *key);
void zs__sim_check_acquire(zs__sim_check *ck, const void *key);
/* Memory freed (after the stream drained): its accesses are forgotten and
 * its pages' protection lifted. */
void zs__sim_check_forget(zs__sim_check *ck, const void *addr, size_t bytes);
/* The calling thread (or the OpenMP threads it starts, or a system call on
 * its behalf) is about to read (write = 0) or write page-locked memory
 * [addr, addr + bytes): checked like a fault, and its pages opened (whole:
 * bytes of another buffer that share an end page are unguarded until an
 * op touches them again; their host accesses must be declared too).
 * `what` names it in a report. */
zs_status zs__sim_check_host_use(zs__sim_check *ck, const void *addr, size_t bytes, int write,
                                 const char *what);

#endif
