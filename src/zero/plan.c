/* The partition plan (plan.h). Floor (src/floors.txt): pure arithmetic, no
 * context; owns nothing beyond the plan it returns, calls nothing of zero/.
 */
#include "zero/plan.h"
#include "zero/quant_record.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/alloc.h"
#include "core/error.h"

static int is_power_of_two(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

/* Rounds x up to a multiple of m (m > 0); returns 0 on overflow. */
static int round_up(int64_t x, int64_t m, int64_t *out) {
    int64_t r = x % m;
    if (r == 0) {
        *out = x;
        return 1;
    }
    return !__builtin_add_overflow(x, m - r, out);
}

zs_status zs__plan_create(int world_size, int64_t align, int unit_count,
                          const int *params_per_unit, const int64_t *param_numel,
                          zs__plan **out) {
    return zs__plan_create_replicated(world_size, 1, align, unit_count, params_per_unit,
                                      param_numel, out);
}

zs_status zs__plan_create_replicated(int world_size, int replicas, int64_t align,
                                     int unit_count, const int *params_per_unit,
                                     const int64_t *param_numel, zs__plan **out) {
    if (world_size < 1)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "partition plan: world size %d must be >= 1",
                        world_size);
    if (replicas < 1)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "partition plan: %d replicas; must be >= 1",
                        replicas);
    if (!is_power_of_two(align))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "partition plan: align = %lld elements must be a power of two",
                        (long long)align);
    if (unit_count < 1)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "partition plan: the model has no units; register at least one "
                        "with zs_unit_begin/zs_param_create/zs_unit_end");
    /* Replicated, each slice is further all-reduced between the replicas
     * in equal parts: units pad to world size x replicas x align. */
    int64_t granule;
    if (__builtin_mul_overflow((int64_t)world_size * replicas, align, &granule))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "partition plan: world size x align overflows");

    int param_count = 0;
    for (int u = 0; u < unit_count; u++) {
        if (params_per_unit[u] < 1)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "partition plan: unit %d has no parameters; every unit needs at "
                            "least one", u);
        if (__builtin_add_overflow(param_count, params_per_unit[u], &param_count))
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "partition plan: too many parameters");
    }

    zs__plan *plan = zs__calloc(1, sizeof *plan);
    if (!plan) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "partition plan: out of host memory");
    plan->units = zs__calloc((size_t)unit_count, sizeof *plan->units);
    plan->params = zs__calloc((size_t)param_count, sizeof *plan->params);
    if (!plan->units || !plan->params) {
        zs__plan_destroy(plan);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "partition plan: out of host memory");
    }
    plan->world_size = world_size;
    plan->replicas = replicas;
    plan->align = align;
    plan->unit_count = unit_count;
    plan->param_count = param_count;

    int p = 0;
    for (int u = 0; u < unit_count; u++) {
        zs__plan_unit *unit = &plan->units[u];
        unit->first_param = p;
        unit->param_count = params_per_unit[u];
        int64_t cursor = 0;
        for (int i = 0; i < unit->param_count; i++, p++) {
            int64_t n = param_numel[p];
            if (n < 1) {
                zs__plan_destroy(plan);
                return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                                "partition plan: parameter %d of unit %d has %lld elements; "
                                "sizes must be positive", i, u, (long long)n);
            }
            int64_t start, end;
            if (!round_up(cursor, align, &start) || __builtin_add_overflow(start, n, &end) ||
                __builtin_add_overflow(plan->numel, n, &plan->numel)) {
                zs__plan_destroy(plan);
                return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                                "partition plan: unit %d is too large (int64 overflow)", u);
            }
            plan->params[p] = (zs__plan_param){.unit = u, .numel = n, .offset = start};
            cursor = end;
        }
        unit->used_numel = cursor;
        if (!round_up(cursor, granule, &unit->padded_numel) ||
            __builtin_add_overflow(plan->padded_numel, unit->padded_numel, &plan->padded_numel)) {
            zs__plan_destroy(plan);
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "partition plan: the model is too large (int64 overflow)");
        }
        unit->shard_numel = unit->padded_numel / world_size;
        unit->full_offset = plan->padded_numel - unit->padded_numel;
        unit->shard_offset = plan->shard_numel;
        plan->shard_numel += unit->shard_numel;
        if (unit->padded_numel > plan->max_unit_padded_numel)
            plan->max_unit_padded_numel = unit->padded_numel;
    }
    zs__plan_freeze(plan, NULL);
    *out = plan;
    return ZS_OK;
}

void zs__plan_freeze(zs__plan *plan, const unsigned char *unit_frozen) {
    plan->store_padded_numel = plan->padded_numel;
    plan->store_shard_numel = plan->shard_numel;
    plan->grad_padded_numel = plan->grad_shard_numel = plan->max_grad_unit_padded_numel = 0;
    plan->frozen_padded_numel = plan->frozen_shard_numel = 0;
    plan->frozen_units = 0;
    for (int u = 0; u < plan->unit_count; u++) {
        zs__plan_unit *unit = &plan->units[u];
        unit->frozen = unit_frozen != NULL && unit_frozen[u] != 0;
        /* Sums of the padded units' lengths, already checked against
         * overflow: their parts cannot overflow. */
        if (unit->frozen) {
            unit->grad_full_offset = unit->grad_shard_offset = -1;
            plan->frozen_padded_numel += unit->padded_numel;
            plan->frozen_shard_numel += unit->shard_numel;
            plan->frozen_units++;
            continue;
        }
        unit->grad_full_offset = plan->grad_padded_numel;
        unit->grad_shard_offset = plan->grad_shard_numel;
        plan->grad_padded_numel += unit->padded_numel;
        plan->grad_shard_numel += unit->shard_numel;
        if (unit->padded_numel > plan->max_grad_unit_padded_numel)
            plan->max_grad_unit_padded_numel = unit->padded_numel;
    }
}

void zs__plan_destroy(zs__plan *plan) {
    if (!plan) return;
    free(plan->units);
    free(plan->params);
    free(plan);
}

int zs__plan_owned_range(const zs__plan *plan, int param, int rank, int64_t *begin, int64_t *end) {
    const zs__plan_param *pp = &plan->params[param];
    const zs__plan_unit *unit = &plan->units[pp->unit];
    int64_t lo = (int64_t)rank * unit->shard_numel;
    int64_t hi = lo + unit->shard_numel;
    int64_t b = pp->offset > lo ? pp->offset : lo;
    int64_t e = pp->offset + pp->numel < hi ? pp->offset + pp->numel : hi;
    if (b >= e) {
        *begin = *end = 0;
        return 0;
    }
    *begin = b - pp->offset;
    *end = e - pp->offset;
    return 1;
}

zs_status zs__plan_freeze_flags(zs__plan *plan, const unsigned *param_flags,
                                const char *const *unit_names, const char *const *param_names) {
    if (!param_flags) {
        zs__plan_freeze(plan, NULL);
        return ZS_OK;
    }
    unsigned char *frozen = zs__calloc((size_t)plan->unit_count, 1);
    if (!frozen) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "partition plan: out of host memory");
    int all = 1;
    for (int u = 0; u < plan->unit_count; u++) {
        const zs__plan_unit *unit = &plan->units[u];
        int first_frozen = -1, first_trained = -1;
        for (int i = unit->first_param; i < unit->first_param + unit->param_count; i++) {
            if (param_flags[i] & ZS_PARAM_FROZEN) {
                if (first_frozen < 0) first_frozen = i;
            } else if (first_trained < 0) {
                first_trained = i;
            }
        }
        if (first_frozen >= 0 && first_trained >= 0) {
            char un[32], fn[32], tn[32];
            snprintf(un, sizeof un, "#%d", u);
            snprintf(fn, sizeof fn, "#%d", first_frozen);
            snprintf(tn, sizeof tn, "#%d", first_trained);
            free(frozen);
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "unit '%s' mixes frozen and trainable parameters ('%s' is "
                            "ZS_PARAM_FROZEN, '%s' is not): a unit is reduced and updated as "
                            "one, so freeze all of it or register the trainable parameters in "
                            "a unit of their own",
                            unit_names ? unit_names[u] : un,
                            param_names ? param_names[first_frozen] : fn,
                            param_names ? param_names[first_trained] : tn);
        }
        frozen[u] = first_frozen >= 0;
        all = all && frozen[u];
    }
    if (all && plan->unit_count > 0) {
        free(frozen);
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "every unit is frozen (ZS_PARAM_FROZEN): nothing would train; leave "
                        "at least one unit's parameters trainable");
    }
    zs__plan_freeze(plan, frozen);
    free(frozen);
    return ZS_OK;
}

/* The name of unit u or parameter i for a message: the given name, or its index. */
static const char *name_of(const char *const *names, int i, char *buf, size_t cap) {
    if (names) return names[i];
    snprintf(buf, cap, "#%d", i);
    return buf;
}

void zs__plan_double_quant(zs__plan *plan, int double_quant) {
    plan->quant_double = double_quant;
}

zs_status zs__plan_quantize(zs__plan *plan, const unsigned *param_flags, int bits, int64_t block,
                            const char *const *unit_names, const char *const *param_names) {
    plan->quant_bits = 0;
    plan->quant_block = block;
    const int double_quant = plan->quant_double;
    plan->quantized_units = 0;
    plan->quantized_record_bytes = plan->max_record_bytes = 0;
    char a[32], b[32];
    for (int u = 0; u < plan->unit_count; u++) {
        zs__plan_unit *unit = &plan->units[u];
        unit->quantized = 0;
        unit->record_bytes = 0;
        int marked = -1, unmarked = -1;
        for (int i = unit->first_param; param_flags && i < unit->first_param + unit->param_count;
             i++) {
            if (!(param_flags[i] & ZS_PARAM_QUANTIZE)) {
                if (unmarked < 0) unmarked = i;
                continue;
            }
            if (!(param_flags[i] & ZS_PARAM_FROZEN))
                return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                                "parameter '%s' is ZS_PARAM_QUANTIZE but not ZS_PARAM_FROZEN: "
                                "only frozen parameters are stored quantized",
                                name_of(param_names, i, a, sizeof a));
            if (marked < 0) marked = i;
        }
        if (marked >= 0 && unmarked >= 0)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "unit '%s' mixes quantized and unquantized frozen parameters ('%s' "
                            "is ZS_PARAM_QUANTIZE, '%s' is not): a unit is stored in one "
                            "format, so register the parameters kept in the compute dtype "
                            "(norms, embeddings) in a unit of their own",
                            name_of(unit_names, u, a, sizeof a),
                            name_of(param_names, marked, b, sizeof b),
                            param_names ? param_names[unmarked] : "another");
        if (marked < 0 || bits == 0) continue;
        if (plan->align % block != 0)
            return zs__fail(ZS_ERR_INTERNAL, "partition plan: align %lld is not a multiple of "
                            "the quantization block %lld", (long long)plan->align,
                            (long long)block);
        unit->quantized = 1;
        unit->record_bytes = zs__frozen_record_bytes(unit->shard_numel, block, bits, double_quant);
        plan->quantized_units++;
        plan->quantized_record_bytes += unit->record_bytes;
        if (unit->record_bytes > plan->max_record_bytes)
            plan->max_record_bytes = unit->record_bytes;
        plan->frozen_padded_numel -= unit->padded_numel;
        plan->frozen_shard_numel -= unit->shard_numel;
    }
    if (plan->quantized_units > 0) plan->quant_bits = bits;
    /* The parameter buffers without the quantized units. */
    plan->store_padded_numel = plan->store_shard_numel = 0;
    for (int u = 0; u < plan->unit_count; u++) {
        zs__plan_unit *unit = &plan->units[u];
        if (unit->quantized) {
            unit->full_offset = unit->shard_offset = -1;
            continue;
        }
        unit->full_offset = plan->store_padded_numel;
        unit->shard_offset = plan->store_shard_numel;
        plan->store_padded_numel += unit->padded_numel;
        plan->store_shard_numel += unit->shard_numel;
    }
    return ZS_OK;
}

int64_t zs__plan_unit_bytes(const zs__plan *plan, int u, size_t elem) {
    const zs__plan_unit *unit = &plan->units[u];
    if (unit->quantized) return (int64_t)plan->world_size * unit->record_bytes;
    return unit->padded_numel * (int64_t)elem;
}

int64_t zs__plan_frozen_scales_numel(const zs__plan *plan) {
    if (!plan->quant_double || plan->quantized_units == 0) return 0;
    int64_t most = 0;
    for (int u = 0; u < plan->unit_count; u++)
        if (plan->units[u].quantized &&
            zs_k_quant_blocks(plan->units[u].shard_numel, plan->quant_block) > most)
            most = zs_k_quant_blocks(plan->units[u].shard_numel, plan->quant_block);
    return most + ZS_FROZEN_SCALE_GROUP;
}
