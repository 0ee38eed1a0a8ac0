/* Where each checkpointed state of a parameter lives in this rank's buffers.
 * A checkpoint holds, per rank, the rank's owned slice of every parameter
 * (zs__plan_owned_range) for every state: stage 0 keeps full state but saves
 * only its slice too, so a checkpoint's content does not depend on the stage. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "core/error.h"

int zs__checkpoint_states(const zs_ctx *zs, zs__ckpt_state *states) {
    int n = 0;
    states[n++] = ZS_CKPT_STATE_MASTER;
    if (zs->settings.optimizer.kind == ZS_OPTIMIZER_SGD) {
        if (zs->settings.optimizer.momentum > 0) states[n++] = ZS_CKPT_STATE_MOMENTUM;
    } else {
        states[n++] = ZS_CKPT_STATE_EXP_AVG;
        states[n++] = ZS_CKPT_STATE_EXP_AVG_SQ;
    }
    return n;
}

zs__state_array zs__checkpoint_state_array(zs__ckpt_state state) {
    switch (state) {
    case ZS_CKPT_STATE_EXP_AVG:
    case ZS_CKPT_STATE_MOMENTUM: return ZS_STATE_M;
    case ZS_CKPT_STATE_EXP_AVG_SQ: return ZS_STATE_V;
    default: return ZS_STATE_MASTER;
    }
}

void zs__checkpoint_step_name(char *out, size_t cap, int64_t step) {
    snprintf(out, cap, ZS_CKPT_STEP_PREFIX "%08" PRId64, step);
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
