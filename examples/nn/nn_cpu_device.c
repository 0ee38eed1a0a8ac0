/*
 * The CPU's nn_device (nn_device.h): device memory is host memory, so the
 * transfers are copies that are complete when they return and there is
 * never anything to wait for. Also the status names every device and
 * backend shares.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_device.h"
#include "nn_cpu.h"
#include "nn_impl.h"
#include "nn_layers.h"

const char *nn_status_name(int status) {
    switch (status) {
    case NN_OK: return "ok";
    case NN_ERR_ARG: return "bad argument";
    case NN_ERR_NOMEM: return "out of memory";
    case NN_ERR_DEVICE: return "device error";
    case NN_ERR_UNAVAILABLE: return "backend unavailable";
    }
    return "unknown status";
}

typedef struct cpu_device {
    char err[NN_ERR_CAP];
} cpu_device;

#define DEV_ERR(dev) ((cpu_device *)(dev)->impl)->err, NN_ERR_CAP

static int check_ptr(nn_device *dev, const char *op, const char *what, const void *p) {
    if (p == NULL) {
        return ex_error(DEV_ERR(dev), NN_ERR_ARG, "nn cpu %s: %s is NULL", op, what);
    }
    return NN_OK;
}

static int cpu_alloc(nn_device *dev, size_t bytes, void **out) {
    if (out == NULL) {
        return ex_error(DEV_ERR(dev), NN_ERR_ARG, "nn cpu alloc: out is NULL");
    }
    *out = NULL;
    // aligned_alloc wants a multiple of the alignment; 64 bytes is a cache
    // line and an AVX-512 register.
    const size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded < bytes) {
        return ex_error(DEV_ERR(dev), NN_ERR_NOMEM, "nn cpu alloc: %zu bytes overflow", bytes);
    }
    void *p = aligned_alloc(64, rounded > 0 ? rounded : 64);
    if (p == NULL) {
        return ex_error(DEV_ERR(dev), NN_ERR_NOMEM,
                         "nn cpu alloc: out of host memory for %zu bytes", bytes);
    }
    memset(p, 0, rounded > 0 ? rounded : 64);
    *out = p;
    return NN_OK;
}

static void cpu_free(nn_device *dev, void *ptr) {
    (void)dev;
    free(ptr);
}

static int cpu_zero(nn_device *dev, void *ptr, size_t bytes) {
    if (bytes > 0) {
        int s = check_ptr(dev, "zero", "ptr", ptr);
        if (s != NN_OK) return s;
        memset(ptr, 0, bytes);
    }
    return NN_OK;
}

static int cpu_copy(nn_device *dev, void *dst, const void *src, size_t bytes) {
    if (bytes > 0) {
        int s = check_ptr(dev, "copy", "dst", dst);
        if (s == NN_OK) s = check_ptr(dev, "copy", "src", src);
        if (s != NN_OK) return s;
        memmove(dst, src, bytes);
    }
    return NN_OK;
}

static int cpu_synchronize(nn_device *dev) {
    (void)dev;
    return NN_OK;
}

static int cpu_host_wait(nn_device *dev, const void *host) {
    (void)dev;
    (void)host;
    return NN_OK;
}

/* In index order, in double: the same sum on every run and thread count. */
static int cpu_losses_sum(nn_device *dev, const float *losses, int n, double *host_out) {
    int s = check_ptr(dev, "losses_sum", "host_out", host_out);
    if (s == NN_OK && n > 0) s = check_ptr(dev, "losses_sum", "losses", losses);
    if (s != NN_OK) return s;
    *host_out = nn_cpu_losses_total(losses, n);
    return NN_OK;
}

double nn_cpu_losses_total(const float *losses, int n) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        sum += losses[i];
    }
    return sum;
}

static const char *cpu_last_error(const nn_device *dev) {
    return ((const cpu_device *)dev->impl)->err;
}

static void cpu_destroy(nn_device *dev) {
    if (dev == NULL) {
        return;
    }
    free(dev->impl);
    free(dev);
}

static const nn_device_ops cpu_device_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    // Device memory is host memory: upload and download copy.
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .synchronize = cpu_synchronize,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .upload_async = cpu_copy,
    .host_wait = cpu_host_wait,
    .losses_sum = cpu_losses_sum,
    .last_error = cpu_last_error,
    .destroy = cpu_destroy,
};

nn_device *nn_cpu_device_create(void) {
    nn_device *dev = calloc(1, sizeof(*dev));
    cpu_device *impl = calloc(1, sizeof(*impl));
    if (dev == NULL || impl == NULL) {
        free(dev);
        free(impl);
        return NULL;
    }
    dev->ops = &cpu_device_ops;
    dev->dtype = NN_F32;
    dev->layers = &nn_cpu_layer_ops;
    dev->impl = impl;
    return dev;
}

int nn_device_is_cpu(const nn_device *dev) {
    return dev != NULL && dev->ops == &cpu_device_ops;
}
