/* zs_estimate_memory: the memory plan of a layout, without building it.
 *
 * Floor (src/floors.txt): Owns nothing; calls the memory plan and the
 * partition plan below it.
 */
#include <string.h>

#include "core/error.h"
#include "core/memory.h"
#include "zero/memory_plan.h"
#include "zero/plan.h"

zs_status zs_estimate_memory(const zs_config *cfg, int world_size, int unit_count,
                             const int *params_per_unit, const int64_t *param_numel,
                             zs_memory_stats *out) {
    return zs_estimate_memory_flags(cfg, world_size, unit_count, params_per_unit, param_numel,
                                    NULL, out);
}

zs_status zs_estimate_memory_flags(const zs_config *cfg, int world_size, int unit_count,
                                   const int *params_per_unit, const int64_t *param_numel,
                                   const unsigned *param_flags, zs_memory_stats *out) {
    if (!cfg || !out || world_size < 1 || unit_count < 0 || (unit_count > 0 && !params_per_unit))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_estimate_memory: a configuration, a world "
                        "size >= 1, the layout and out are required");
    const zs__settings *s = zs__config_settings(cfg);
    /* Hybrid sharding lays the model out over one node's ranks, replicated
     * on every node: the node size is comm.ranks_per_node (zs_create
     * detects it; an estimate has no ranks to ask). */
    int shard_size = world_size, replicas = 1;
    if (s->zero.shard_group == ZS_SHARD_GROUP_NODE) {
        const int64_t per_node = s->comm.ranks_per_node;
        if (per_node < 1 || per_node > world_size || world_size % per_node != 0)
            return zs__fail(ZS_ERR_CONFIG, "zs_estimate_memory: zero.shard_group = \"node\" "
                            "shards over one node's ranks: set comm.ranks_per_node to the ranks "
                            "per node (zs-estimate: --set comm.ranks_per_node=N), a divisor of the world "
                            "size %d (it is %lld)", world_size, (long long)per_node);
        shard_size = (int)per_node;
        replicas = world_size / shard_size;
    }
    /* hpZ's secondary partition and qgZ's staging follow the nodes too. */
    int node_size = world_size;
    ZS_CHECK(zs__estimate_node_size(s, world_size, &node_size));
    zs__plan *plan = NULL;
    ZS_CHECK(zs__plan_of_settings(s, shard_size, replicas, unit_count, params_per_unit,
                                  param_numel, param_flags, NULL, NULL, &plan));
    zs__memory_plan mp;
    const zs_status st = zs__memory_plan_make(s, plan, node_size, NULL, &mp);
    zs__plan_destroy(plan);
    if (st != ZS_OK) return st;
    memset(out, 0, sizeof *out);
    for (int t = 0; t < ZS_MEM_TAG_COUNT; t++) {
        out->current[t] = out->peak[t] = mp.bytes[t];
        if (!zs__mem_tag_on_disk((zs_mem_tag)t)) out->total_current += mp.bytes[t];
    }
    out->total_peak = out->total_current;
    out->live_bytes_budget = mp.live_budget;
    return ZS_OK;
}
