/* The model's state as checkpoints, imports, tests and digests reach it
 * (state_io.c): reads and writes of the optimizer's arrays wherever they
 * live, the parameters rounded from the masters, the state after a load,
 * gradients zeroed. It waits for the optimizer pass first (update.h). */
#ifndef ZS_ZERO_STATE_IO_H
#define ZS_ZERO_STATE_IO_H

#include <stdint.h>
#include "offload/store.h"
#include "zeroshard.h"

/* The fp32 state `array` of elements [first, first + count) of a parameter,
 * wherever it lives (device, host, NVMe), copied to or from host memory.
 * The master of fp32 training without a separate master is the parameter
 * itself. Fails for an array this optimizer does not keep. Waits for a
 * running optimizer update first. */
zs_status zs__state_read(zs_ctx *zs, zs__state_array array, int param, int64_t first,
                         int64_t count, float *dst);
zs_status zs__state_write(zs_ctx *zs, zs__state_array array, int param, int64_t first,
                          int64_t count, const float *src);
/* A frozen parameter's elements [first, first + count) of this rank's range
 * (zs__param_range) set from fp32 values, rounded into the compute dtype in
 * place: frozen parameters have no master to write. */
zs_status zs__frozen_write(zs_ctx *zs, int param, int64_t first, int64_t count,
                           const float *src);
/* The same elements read back, widened to fp32 (exactly): what a
 * checkpoint saves as a frozen parameter's master tensor. */
zs_status zs__frozen_read(zs_ctx *zs, int param, int64_t first, int64_t count, float *dst);

/* zs_params_import (import.c) of some parameters: all, the frozen ones (a
 * fine-tune's base) or the trainable ones (its adapters); the others keep
 * their values. */
typedef enum zs__import_which {
    ZS__IMPORT_ALL = 0,
    ZS__IMPORT_FROZEN = 1,
    ZS__IMPORT_TRAINABLE = 2
} zs__import_which;
zs_status zs__params_import_some(zs_ctx *zs, zs_param_source source, void *user,
                                 zs__import_which which);

/* The parameters from the master weights, everywhere they are kept (after
 * a load or an import): each owned range rounded into the compute dtype.
 * Local; the caller agrees, then gathers (zs__gather_full_params). */
zs_status zs__params_from_master(zs_ctx *zs);
/* After zs_load has written every rank's owned state: stage 0's chunks
 * gathered, the parameters rounded from the masters and gathered, the
 * gradients zeroed. Collective; agreed. */
zs_status zs__state_loaded(zs_ctx *zs);
/* Gradients start from zero: the device's (the next backward adds into
 * them), and with host_too the host copies as well (which an offloaded
 * update may still be reading otherwise; it zeroes each unit's accumulated
 * host gradient itself when done with it, and copies overwrite the rest). */
zs_status zs__reset_gradients(zs_ctx *zs, int host_too);

/* A digest of every piece of this rank's training state: parameters (full or
 * shard), master weights, optimizer moments and the step counters. Tests use
 * it to prove that a skipped step changed nothing. */
uint64_t zs__state_digest(zs_ctx *zs);

#endif
