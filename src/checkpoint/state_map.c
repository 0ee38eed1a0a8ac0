/* Where each checkpointed state of a parameter lives in this rank's buffers.
 * A checkpoint holds, per rank, the rank's owned slice of every parameter
 * (zs__plan_owned_range) for every state: stage 0 keeps full state but saves
 * only its slice too, so a checkpoint's content does not depend on the stage. */
#include <stdio.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "core/error.h"

int zs__checkpoint_states(const zs_ctx *zs, zs__ckpt_state *states) {
    int n = 0;
    states[n++] = ZS_CKPT_STATE_MASTER;
    if (zs->settings.optimizer.kind == ZS_OPTIMIZER_SGD) {
        if (zs->optim_m.ptr) states[n++] = ZS_CKPT_STATE_MOMENTUM;
    } else {
        states[n++] = ZS_CKPT_STATE_EXP_AVG;
        states[n++] = ZS_CKPT_STATE_EXP_AVG_SQ;
    }
    return n;
}

float *zs__checkpoint_state_at(const zs_ctx *zs, zs__ckpt_state state, int param, int64_t first) {
    const zs__plan *plan = zs->plan;
    const zs__plan_param *pp = &plan->params[param];
    const zs__plan_unit *pu = &plan->units[pp->unit];
    const int stage = zs->settings.zero.stage;
    const int64_t full_index = pu->full_offset + pp->offset + first;
    const int64_t shard_index =
        pu->shard_offset + pp->offset + first - (int64_t)zs->rank * pu->shard_numel;
    const int64_t state_index = stage == 0 ? full_index : shard_index;
    switch (state) {
    case ZS_CKPT_STATE_MASTER:
        /* fp32 training: the parameters are the master weights. */
        if (zs->master.ptr) return zs__buf_at(&zs->master, state_index);
        return stage < 3 ? zs__buf_at(&zs->params_full, full_index)
                         : zs__buf_at(&zs->params_shard, shard_index);
    case ZS_CKPT_STATE_EXP_AVG:
    case ZS_CKPT_STATE_MOMENTUM:
        return zs->optim_m.ptr ? zs__buf_at(&zs->optim_m, state_index) : NULL;
    case ZS_CKPT_STATE_EXP_AVG_SQ:
        return zs->optim_v.ptr ? zs__buf_at(&zs->optim_v, state_index) : NULL;
    case ZS_CKPT_STATE_USER_GLOBAL:
    case ZS_CKPT_STATE_USER_RANK:
        break;
    }
    return NULL;
}

int zs__checkpoint_is_step_name(const char *name) {
    if (strncmp(name, ZS_CKPT_STEP_PREFIX, strlen(ZS_CKPT_STEP_PREFIX)) != 0) return 0;
    const char *digits = name + strlen(ZS_CKPT_STEP_PREFIX);
    for (int i = 0; i < 8; i++)
        if (digits[i] < '0' || digits[i] > '9') return 0;
    return digits[8] == '\0';
}

zs_status zs__checkpoint_join(char *out, size_t capacity, const char *dir, const char *name) {
    int n = snprintf(out, capacity, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= capacity)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "path '%s/%s' is longer than %zu bytes", dir, name,
                        capacity - 1);
    return ZS_OK;
}
