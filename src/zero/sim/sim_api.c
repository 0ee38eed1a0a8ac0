/* zeroshard_sim.h: a program's side of the simulated device.
 *
 * Floor (src/floors.txt): Public, over the ground's backend; calls nothing
 * of zero/.
 */
#include "zeroshard_sim.h"

#include <string.h>

#include "backend/sim/sim_backend.h"
#include "core/error.h"
#include "zero/ground.h"

#define ZS_SIM_KERNEL_ARGS 192
#define ZS_SIM_KERNEL_ACCESSES 16

struct zs_sim_kernel {
    const zs__backend *be;
};

typedef struct launch_args {
    zs_sim_kernel_fn fn;
    const zs__backend *be;
    const char *name;
    _Alignas(16) unsigned char args[ZS_SIM_KERNEL_ARGS];
} launch_args;

static zs_status sim_of(const zs_ctx *zs, const char *call, zs__backend **out) {
    *out = zs && zs->backend && zs__sim_backend_is(zs->backend) ? zs->backend : NULL;
    if (*out) return ZS_OK;
    return zs__fail(ZS_ERR_UNSUPPORTED, "%s: the context's backend is '%s', not \"sim\"; set "
                    "backend = \"sim\" in the configuration", call,
                    zs && zs->backend ? zs->backend->ops->name : "none");
}

void *zs_sim_ptr(const zs_sim_kernel *k, const void *address) {
    return zs__sim_backend_inner(k->be, address);
}

/* A kernel's run on the device's thread: its failure becomes the stream's. */
static zs_status run_kernel(void *p) {
    launch_args *a = p;
    const zs_sim_kernel k = {a->be};
    const int rc = a->fn(&k, a->args);
    return rc == 0 ? ZS_OK
                   : zs__fail(ZS_ERR_INTERNAL, "the program's kernel \"%s\" returned %d", a->name,
                              rc);
}

zs_status zs_sim_launch(zs_ctx *zs, const char *name, zs_sim_kernel_fn fn, const void *args,
                        size_t args_bytes) {
    return zs_sim_launch_access(zs, name, fn, args, args_bytes, NULL, 0);
}

zs_status zs_sim_launch_access(zs_ctx *zs, const char *name, zs_sim_kernel_fn fn,
                               const void *args, size_t args_bytes, const zs_sim_access *accesses,
                               int count) {
    zs__backend *be = NULL;
    ZS_CHECK(sim_of(zs, "zs_sim_launch", &be));
    if (!fn || (args_bytes && !args) || args_bytes > ZS_SIM_KERNEL_ARGS || count < 0 ||
        count > ZS_SIM_KERNEL_ACCESSES || (count && !accesses))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_sim_launch(\"%s\"): %s", name ? name : "",
                        !fn ? "no kernel function"
                        : args_bytes > ZS_SIM_KERNEL_ARGS ? "more than 192 bytes of arguments"
                        : count < 0 || count > ZS_SIM_KERNEL_ACCESSES
                            ? "between 0 and 16 declared accesses"
                            : "a NULL pointer for arguments or accesses");
    launch_args a;
    memset(&a, 0, sizeof a);
    a.fn = fn;
    a.be = be;
    a.name = name ? name : "kernel";
    if (args_bytes) memcpy(a.args, args, args_bytes);
    zs__stream_check_range ranges[ZS_SIM_KERNEL_ACCESSES];
    for (int i = 0; i < count; i++)
        ranges[i] = (zs__stream_check_range){(uintptr_t)accesses[i].ptr, accesses[i].bytes,
                                             accesses[i].write ? 1 : 0};
    return zs__sim_backend_launch(be, a.name, run_kernel, &a, sizeof a, ranges, count);
}

zs_status zs_sim_malloc(zs_ctx *zs, size_t bytes, void **out) {
    zs__backend *be = NULL;
    *out = NULL;
    ZS_CHECK(sim_of(zs, "zs_sim_malloc", &be));
    return zs__sim_backend_program_alloc(be, bytes, out);
}

zs_status zs_sim_free(zs_ctx *zs, void *ptr) {
    zs__backend *be = NULL;
    ZS_CHECK(sim_of(zs, "zs_sim_free", &be));
    return zs__sim_backend_program_free(be, ptr);
}

zs_status zs_sim_host_alloc(zs_ctx *zs, size_t bytes, void **out) {
    zs__backend *be = NULL;
    *out = NULL;
    ZS_CHECK(sim_of(zs, "zs_sim_host_alloc", &be));
    return zs__sim_backend_program_host_alloc(be, bytes, out);
}

zs_status zs_sim_host_free(zs_ctx *zs, void *ptr) {
    zs__backend *be = NULL;
    ZS_CHECK(sim_of(zs, "zs_sim_host_free", &be));
    return zs__sim_backend_program_host_free(be, ptr);
}

zs_status zs_sim_memcpy_async(zs_ctx *zs, void *dst, const void *src, size_t bytes) {
    zs__backend *be = NULL;
    ZS_CHECK(sim_of(zs, "zs_sim_memcpy_async", &be));
    return zs__sim_backend_program_copy(be, dst, src, bytes);
}

zs_status zs_sim_memcpy(zs_ctx *zs, void *dst, const void *src, size_t bytes) {
    zs__backend *be = NULL;
    ZS_CHECK(sim_of(zs, "zs_sim_memcpy", &be));
    ZS_CHECK(zs__sim_backend_program_copy(be, dst, src, bytes));
    return zs__sim_backend_program_synchronize(be);
}

zs_status zs_sim_synchronize(zs_ctx *zs) {
    zs__backend *be = NULL;
    ZS_CHECK(sim_of(zs, "zs_sim_synchronize", &be));
    return zs__sim_backend_program_synchronize(be);
}

/* An event is the backend's fence: recorded behind every op enqueued so
 * far, waited for by the host, known to the stream-order check. */
zs_status zs_sim_event_create(zs_ctx *zs, zs_sim_event **out) {
    zs__backend *be = NULL;
    *out = NULL;
    ZS_CHECK(sim_of(zs, "zs_sim_event_create", &be));
    void *fence = NULL;
    ZS_CHECK(zs__fence_create(be, &fence));
    *out = fence;
    return ZS_OK;
}

zs_status zs_sim_event_record(zs_ctx *zs, zs_sim_event *event) {
    zs__backend *be = NULL;
    ZS_CHECK(sim_of(zs, "zs_sim_event_record", &be));
    if (!event) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_sim_event_record: event is NULL");
    return zs__fence_record(be, event);
}

zs_status zs_sim_event_synchronize(zs_ctx *zs, zs_sim_event *event) {
    zs__backend *be = NULL;
    ZS_CHECK(sim_of(zs, "zs_sim_event_synchronize", &be));
    if (!event)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_sim_event_synchronize: event is NULL");
    return zs__sim_backend_program_fence_wait(be, event);
}

void zs_sim_event_destroy(zs_ctx *zs, zs_sim_event *event) {
    zs__backend *be = NULL;
    if (!event || sim_of(zs, "zs_sim_event_destroy", &be) != ZS_OK) return;
    zs__fence_destroy(be, event);
}

unsigned long long zs_sim_blocking_waits(const zs_ctx *zs) {
    return zs && zs->backend ? (unsigned long long)zs__backend_blocking_waits(zs->backend) : 0;
}
