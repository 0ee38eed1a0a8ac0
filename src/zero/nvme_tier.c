/* The zero layer's side of offload.optimizer = "nvme" (offload/nvme_state.h
 * holds the swap-file mechanics): creating the tier at zs_build, parameters
 * from the master after a load, and the state digest. The optimizer pass itself is step.c's, through the tier's sweep. */
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/log.h"
#include "offload/swap.h"
#include "zero/ctx.h"

/* Host floats per round when a parameter range passes through memory. */
#define ZS_NVME_ROUND (1 << 16)

zs_status zs__nvme_runid(zs_ctx *zs, char *runid, size_t cap) {
    /* One per-run directory for the job: rank 0's host and process id. */
    char mine[80];
    zs__swap_default_runid(mine, sizeof mine);
    ZS_CHECK(zs__comm_broadcast(zs->comm, mine, sizeof mine, 0, "offload.nvme run id"));
    snprintf(runid, cap, "%s", mine);
    return ZS_OK;
}

/* The units whose shards overlap state elements [first, end) (stages 1-3:
 * the state index space is the shard layout, unit after unit). */
static void name_units(void *ctx, int64_t first, int64_t end, char *out, size_t cap) {
    const zs_ctx *zs = ctx;
    int lo = -1, hi = -1;
    for (int u = 0; u < zs->unit_count; u++) {
        const zs__plan_unit *pu = &zs->plan->units[u];
        if (pu->shard_offset < end && pu->shard_offset + pu->shard_numel > first) {
            if (lo < 0) lo = u;
            hi = u;
        }
    }
    if (lo < 0) snprintf(out, cap, "padding");
    else if (lo == hi) snprintf(out, cap, "unit '%s'", zs->units[lo]->name);
    else snprintf(out, cap, "units '%s' to '%s'", zs->units[lo]->name, zs->units[hi]->name);
}

zs_status zs__nvme_tier_create(zs_ctx *zs, const zs__nvme_layout *layout, const char *runid) {
    ZS_CHECK(zs__nvme_state_create(zs->settings.offload.nvme_path, zs->rank, runid, layout,
                                   &zs->mem, &zs->nvme));
    zs__nvme_state_set_namer(zs->nvme, name_units, zs);
    ZS_INFO("offload.optimizer = nvme: %lld chunks of %zu bytes in %s",
            (long long)layout->chunks, layout->block_bytes, zs__nvme_state_path(zs->nvme));
    return ZS_OK;
}

zs_status zs__params_from_nvme_master(zs_ctx *zs) {
    if (zs->params_on_nvme) return ZS_OK; /* each gather rounds the master itself */
    zs__backend *be = zs->backend;
    zs__buf scratch = {0};
    ZS_CHECK(zs__mem_host_alloc(&zs->mem, ZS_MEM_SCRATCH, ZS_NVME_ROUND * sizeof(float), &scratch.ptr));
    zs_status st = ZS_OK;
    for (int i = 0; i < zs->param_count && st == ZS_OK; i++) {
        int64_t b, e;
        if (!zs__plan_owned_range(zs->plan, i, zs->rank, &b, &e)) continue;
        for (int64_t at = b; at < e && st == ZS_OK; at += ZS_NVME_ROUND) {
            const int64_t n = e - at < ZS_NVME_ROUND ? e - at : ZS_NVME_ROUND;
            st = zs__state_read(zs, ZS_STATE_MASTER, i, at, n, scratch.ptr);
            /* From host memory (the backend stages it where it must). */
            if (st == ZS_OK)
                st = be->ops->convert(be, zs__param_at(zs, i, at), zs->compute_dtype, scratch.ptr,
                                      ZS_DTYPE_FP32, n);
        }
    }
    zs__mem_host_free(&zs->mem, ZS_MEM_SCRATCH, scratch.ptr, ZS_NVME_ROUND * sizeof(float));
    return st;
}

void zs__nvme_digest_update(const zs_ctx *zs, XXH3_state_t *state) {
    /* Array by array, as the memory tiers' contiguous buffers are hashed.
     * The cache is the only thing a read changes, so the digest is
     * logically const. */
    zs__nvme_state *ns = zs->nvme;
    const zs__nvme_layout *l = zs__nvme_state_layout(ns);
    float *round = malloc((size_t)l->chunk_numel * sizeof(float));
    if (!round) return;
    for (int a = 0; a < l->arrays; a++)
        for (int64_t at = 0; at < l->state_numel; at += l->chunk_numel) {
            const int64_t n = l->state_numel - at < l->chunk_numel ? l->state_numel - at : l->chunk_numel;
            if (zs__nvme_state_get(ns, a, at, n, round) != ZS_OK) {
                /* An unreadable state has no digest: make it differ from any. */
                XXH3_64bits_update(state, "unreadable", 10);
                free(round);
                return;
            }
            XXH3_64bits_update(state, round, (size_t)n * sizeof(float));
        }
    free(round);
}
