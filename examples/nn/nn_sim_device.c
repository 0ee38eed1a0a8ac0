/*
 * The simulated device's nn_device (nn_sim.h): zeroshard_sim.h's memory,
 * copies and kernels behind nn_device.h's ops. Each host_alloc buffer has
 * an event, recorded behind the last transfer that uses it (upload_async,
 * losses_sum), so that host_wait waits for that buffer alone, as the CUDA
 * device's per-buffer events do.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_cpu.h"
#include "nn_impl.h"
#include "nn_layers.h"
#include "nn_sim.h"
#include "zeroshard_sim.h"

typedef struct host_buffer {
    const char *base;
    size_t bytes;
    zs_sim_event *event; /* behind the last transfer that used it */
} host_buffer;

typedef struct sim_device {
    zs_ctx *zs;
    char err[NN_ERR_CAP];
    host_buffer *host; /* the live host_alloc buffers */
    int nhost, cap_host;
    unsigned long long waits; /* upload, download and synchronize calls: each blocks */
} sim_device;

static sim_device *impl_of(const nn_device *dev) { return (sim_device *)dev->impl; }

zs_ctx *nn_sim_device_context(const nn_device *dev) { return impl_of(dev)->zs; }

int nn_sim_device_failed(nn_device *dev, const char *op) {
    return ex_error(impl_of(dev)->err, NN_ERR_CAP, NN_ERR_DEVICE, "nn sim %s: %s", op,
                    zs_last_error());
}

#define SIM_TRY(dev, op, call)                                                                \
    do {                                                                                      \
        if ((call) != ZS_OK) return nn_sim_device_failed(dev, op);                            \
    } while (0)

static int sim_alloc(nn_device *dev, size_t bytes, void **out) {
    if (out == NULL) return ex_error(impl_of(dev)->err, NN_ERR_CAP, NN_ERR_ARG,
                                     "nn sim alloc: out is NULL");
    *out = NULL;
    // zs_sim_malloc gives zeroed pages; 0 bytes still gives a pointer to free.
    const zs_status st = zs_sim_malloc(impl_of(dev)->zs, bytes > 0 ? bytes : 64, out);
    if (st == ZS_ERR_OUT_OF_MEMORY)
        return ex_error(impl_of(dev)->err, NN_ERR_CAP, NN_ERR_NOMEM, "nn sim alloc: %s",
                        zs_last_error());
    SIM_TRY(dev, "alloc", st);
    return NN_OK;
}

static void sim_free(nn_device *dev, void *ptr) {
    if (ptr != NULL && zs_sim_free(impl_of(dev)->zs, ptr) != ZS_OK)
        fprintf(stderr, "nn sim free: %s\n", zs_last_error());
}

typedef struct zero_args {
    void *ptr;
    size_t bytes;
} zero_args;

static int zero_kernel(const zs_sim_kernel *k, void *args) {
    const zero_args *a = args;
    memset(zs_sim_ptr(k, a->ptr), 0, a->bytes);
    return 0;
}

static int sim_zero(nn_device *dev, void *ptr, size_t bytes) {
    if (bytes == 0) return NN_OK;
    const zero_args a = {ptr, bytes};
    const zs_sim_access acc = {ptr, bytes, 1};
    SIM_TRY(dev, "zero", zs_sim_launch_access(impl_of(dev)->zs, "nn_zero", zero_kernel, &a,
                                              sizeof a, &acc, 1));
    return NN_OK;
}

static int sim_copy_wait(nn_device *dev, void *dst, const void *src, size_t bytes) {
    impl_of(dev)->waits++;
    if (bytes > 0) SIM_TRY(dev, "copy", zs_sim_memcpy(impl_of(dev)->zs, dst, src, bytes));
    return NN_OK;
}

static int sim_copy_async(nn_device *dev, void *dst, const void *src, size_t bytes) {
    if (bytes > 0) SIM_TRY(dev, "copy", zs_sim_memcpy_async(impl_of(dev)->zs, dst, src, bytes));
    return NN_OK;
}

static int sim_synchronize(nn_device *dev) {
    impl_of(dev)->waits++;
    SIM_TRY(dev, "synchronize", zs_sim_synchronize(impl_of(dev)->zs));
    return NN_OK;
}

/* The host_alloc buffer holding p, or NULL. */
static host_buffer *host_of(sim_device *d, const void *p) {
    const char *c = p;
    for (int i = 0; i < d->nhost; i++)
        if (c >= d->host[i].base && c < d->host[i].base + d->host[i].bytes) return &d->host[i];
    return NULL;
}

static int sim_host_alloc(nn_device *dev, size_t bytes, void **out) {
    sim_device *d = impl_of(dev);
    *out = NULL;
    if (d->nhost == d->cap_host) {
        const int cap = d->cap_host ? 2 * d->cap_host : 8;
        host_buffer *h = realloc(d->host, sizeof *h * (size_t)cap);
        if (h == NULL)
            return ex_error(d->err, NN_ERR_CAP, NN_ERR_NOMEM, "nn sim host_alloc: out of memory");
        d->host = h;
        d->cap_host = cap;
    }
    host_buffer *h = &d->host[d->nhost];
    memset(h, 0, sizeof *h);
    SIM_TRY(dev, "host_alloc", zs_sim_host_alloc(d->zs, bytes > 0 ? bytes : 64, out));
    if (zs_sim_event_create(d->zs, &h->event) != ZS_OK) {
        zs_sim_host_free(d->zs, *out);
        *out = NULL;
        return nn_sim_device_failed(dev, "host_alloc");
    }
    h->base = *out;
    h->bytes = bytes > 0 ? bytes : 64;
    d->nhost++;
    return NN_OK;
}

static void sim_host_free(nn_device *dev, void *host) {
    sim_device *d = impl_of(dev);
    host_buffer *h = host ? host_of(d, host) : NULL;
    if (h == NULL) return;
    zs_sim_event_destroy(d->zs, h->event);
    if (zs_sim_host_free(d->zs, host) != ZS_OK)
        fprintf(stderr, "nn sim host_free: %s\n", zs_last_error());
    *h = d->host[--d->nhost];
}

/* Marks the buffer holding host as used by the transfers enqueued so far. */
static int record_use(nn_device *dev, const void *host, const char *op) {
    host_buffer *h = host_of(impl_of(dev), host);
    if (h == NULL)
        return ex_error(impl_of(dev)->err, NN_ERR_CAP, NN_ERR_ARG,
                        "nn sim %s: the host buffer is not from host_alloc", op);
    SIM_TRY(dev, op, zs_sim_event_record(impl_of(dev)->zs, h->event));
    return NN_OK;
}

static int sim_upload_async(nn_device *dev, void *dst, const void *host_src, size_t bytes) {
    if (bytes == 0) return NN_OK;
    SIM_TRY(dev, "upload_async", zs_sim_memcpy_async(impl_of(dev)->zs, dst, host_src, bytes));
    return record_use(dev, host_src, "upload_async");
}

static int sim_host_wait(nn_device *dev, const void *host) {
    host_buffer *h = host_of(impl_of(dev), host);
    if (h == NULL)
        return ex_error(impl_of(dev)->err, NN_ERR_CAP, NN_ERR_ARG,
                        "nn sim host_wait: the host buffer is not from host_alloc");
    SIM_TRY(dev, "host_wait", zs_sim_event_synchronize(impl_of(dev)->zs, h->event));
    return NN_OK;
}

typedef struct sum_args {
    const float *losses;
    int n;
    double *host_out;
} sum_args;

static int sum_kernel(const zs_sim_kernel *k, void *args) {
    const sum_args *a = args;
    *(double *)zs_sim_ptr(k, a->host_out) = nn_cpu_losses_total(zs_sim_ptr(k, a->losses), a->n);
    return 0;
}

static int sim_losses_sum(nn_device *dev, const float *losses, int n, double *host_out) {
    const sum_args a = {losses, n, host_out};
    const zs_sim_access acc[2] = {{losses, sizeof(float) * (size_t)(n > 0 ? n : 0), 0},
                                  {host_out, sizeof(double), 1}};
    SIM_TRY(dev, "losses_sum", zs_sim_launch_access(impl_of(dev)->zs, "nn_losses_sum",
                                                    sum_kernel, &a, sizeof a, acc, 2));
    return record_use(dev, host_out, "losses_sum");
}

static const char *sim_last_error(const nn_device *dev) { return impl_of(dev)->err; }

static unsigned long long sim_blocking_waits(const nn_device *dev) { return impl_of(dev)->waits; }

static void sim_destroy(nn_device *dev) {
    if (dev == NULL) return;
    sim_device *d = impl_of(dev);
    for (int i = 0; i < d->nhost; i++) zs_sim_event_destroy(d->zs, d->host[i].event);
    free(d->host);
    free(d);
    free(dev);
}

static const nn_device_ops sim_device_ops = {
    .name = "sim",
    .alloc = sim_alloc,
    .free = sim_free,
    .zero = sim_zero,
    .upload = sim_copy_wait,
    .download = sim_copy_wait,
    .copy = sim_copy_async,
    .synchronize = sim_synchronize,
    .host_alloc = sim_host_alloc,
    .host_free = sim_host_free,
    .upload_async = sim_upload_async,
    .host_wait = sim_host_wait,
    .losses_sum = sim_losses_sum,
    .last_error = sim_last_error,
    .blocking_waits = sim_blocking_waits,
    .destroy = sim_destroy,
};

int nn_sim_device_create(zs_ctx *zs, nn_device **out, char *err, size_t cap) {
    *out = NULL;
    if (zs == NULL || strcmp(zs_backend_name(zs), "sim") != 0)
        return ex_error(err, cap, NN_ERR_UNAVAILABLE,
                        "nn sim: the context's backend is '%s', not \"sim\"",
                        zs ? zs_backend_name(zs) : "none");
    nn_device *dev = calloc(1, sizeof *dev);
    sim_device *d = calloc(1, sizeof *d);
    if (dev == NULL || d == NULL) {
        free(dev);
        free(d);
        return ex_error(err, cap, NN_ERR_NOMEM, "nn sim: out of host memory");
    }
    d->zs = zs;
    dev->ops = &sim_device_ops;
    dev->dtype = NN_F32;
    dev->layers = &nn_sim_layer_ops;
    dev->impl = d;
    *out = dev;
    return NN_OK;
}
