/* The zero layer's side of offload.optimizer = "nvme" (offload/nvme_state.h
 * holds the swap-file mechanics, offload/store.h the tier itself): the
 * job's run id, and names of units for the tier's messages.
 *
 * Floor (src/floors.txt): Owns nothing; calls nothing of zero/ (the store is
 * offload/'s).
 */
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/log.h"
#include "offload/swap.h"
#include "zero/ground.h"
#include "zero/nvme_tier.h"

zs_status zs__nvme_runid(zs_ctx *zs, char *runid, size_t cap) {
    /* One per-run directory for the job: rank 0's host and process id. */
    char mine[80];
    zs__swap_default_runid(mine, sizeof mine);
    ZS_CHECK(zs__comm_broadcast(zs->comm, mine, sizeof mine, 0, "offload.nvme run id"));
    snprintf(runid, cap, "%s", mine);
    return ZS_OK;
}

/* The units whose shards overlap state elements [first, end) (stages 1-3:
 * the state index space is the trainable units' shard layout, unit after
 * unit). */
static void name_units(void *ctx, int64_t first, int64_t end, char *out, size_t cap) {
    const zs_ctx *zs = ctx;
    int lo = -1, hi = -1;
    for (int u = 0; u < zs->unit_count; u++) {
        const zs__plan_unit *pu = &zs->plan->units[u];
        if (!pu->frozen && pu->grad_shard_offset < end &&
            pu->grad_shard_offset + pu->shard_numel > first) {
            if (lo < 0) lo = u;
            hi = u;
        }
    }
    if (lo < 0) snprintf(out, cap, "padding");
    else if (lo == hi) snprintf(out, cap, "unit '%s'", zs->units[lo]->name);
    else snprintf(out, cap, "units '%s' to '%s'", zs->units[lo]->name, zs->units[hi]->name);
}

void zs__nvme_tier_named(zs_ctx *zs) {
    zs__nvme_state_set_namer(zs->store.nvme, name_units, zs);
    const zs__nvme_layout *l = zs__nvme_state_layout(zs->store.nvme);
    ZS_INFO("offload.optimizer = nvme: %lld chunks of %zu bytes in %s", (long long)l->chunks,
            l->block_bytes, zs__nvme_state_path(zs->store.nvme));
}
