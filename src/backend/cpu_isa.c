/* Run-time choice of the CPU kernels' instruction-set level (see cpu_isa.h).
 *
 * The active table is one atomic pointer: the first caller resolves it and
 * publishes it with a compare-and-swap, so concurrent first calls agree on one
 * table and only the winner logs. Resolving is cheap and has no side effect
 * besides that log line. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_isa.h"
#include "core/env.h"
#include "core/error.h"
#include "core/log.h"

static _Atomic(const zs__cpu_kernels *) active_kernels;

const char *zs__cpu_isa_name(zs__cpu_isa isa) {
    switch (isa) {
    case ZS_CPU_ISA_AUTO: return "auto";
    case ZS_CPU_ISA_SCALAR: return "scalar";
    case ZS_CPU_ISA_AVX2: return "avx2";
    case ZS_CPU_ISA_AVX512: return "avx512";
    case ZS_CPU_ISA_COUNT: break;
    }
    return "unknown";
}

int zs__cpu_isa_supported(zs__cpu_isa isa) {
    switch (isa) {
    case ZS_CPU_ISA_SCALAR:
        return 1;
#if ZS_CPU_X86
    case ZS_CPU_ISA_AVX2:
        /* __builtin_cpu_supports also checks that the OS saves the AVX state. */
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    case ZS_CPU_ISA_AVX512:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
               __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
#endif
    default:
        return 0;
    }
}

zs__cpu_isa zs__cpu_isa_best(void) {
    for (int level = ZS_CPU_ISA_COUNT - 1; level > ZS_CPU_ISA_SCALAR; level--)
        if (zs__cpu_isa_supported((zs__cpu_isa)level)) return (zs__cpu_isa)level;
    return ZS_CPU_ISA_SCALAR;
}

static const zs__cpu_kernels *table_of(zs__cpu_isa isa) {
    switch (isa) {
#if ZS_CPU_X86
    case ZS_CPU_ISA_AVX2: return &zs__cpu_kernels_avx2;
    case ZS_CPU_ISA_AVX512: return &zs__cpu_kernels_avx512;
#endif
    default: return &zs__cpu_kernels_scalar;
    }
}

/* The level ZS_CPU_ISA asks for, clamped to what the CPU supports. A problem
 * with the variable is described in `why` (empty when there is none). */
static zs__cpu_isa resolve(char *why, size_t capacity) {
    why[0] = '\0';
    zs__cpu_isa best = zs__cpu_isa_best();
    const char *env = zs__env_text(ZS_ENV_CPU_ISA);
    if (!env || strcmp(env, "auto") == 0) return best;
    int wanted = -1;
    for (int level = 0; level < ZS_CPU_ISA_COUNT; level++)
        if (strcmp(env, zs__cpu_isa_name((zs__cpu_isa)level)) == 0) wanted = level;
    if (wanted < 0) {
        snprintf(why, capacity, "ZS_CPU_ISA=\"%s\" is not one of scalar, avx2, avx512, auto; "
                 "using %s", env, zs__cpu_isa_name(best));
        return best;
    }
    if (wanted > (int)best) {
        snprintf(why, capacity, "ZS_CPU_ISA=%s: this CPU or build lacks it; using %s", env,
                 zs__cpu_isa_name(best));
        return best;
    }
    return (zs__cpu_isa)wanted;
}

const zs__cpu_kernels *zs__cpu_kernels_get(void) {
    const zs__cpu_kernels *k = atomic_load_explicit(&active_kernels, memory_order_acquire);
    if (k) return k;
    char why[256];
    const zs__cpu_kernels *chosen = table_of(resolve(why, sizeof why));
    const zs__cpu_kernels *expected = NULL;
    if (atomic_compare_exchange_strong_explicit(&active_kernels, &expected, chosen,
                                                memory_order_acq_rel, memory_order_acquire)) {
        if (why[0]) ZS_WARN("cpu backend: %s", why);
        ZS_DEBUG("cpu backend: %s kernels", zs__cpu_isa_name(chosen->isa));
        return chosen;
    }
    return expected; /* another thread published first */
}

zs_status zs__cpu_set_isa(zs__cpu_isa isa) {
    if (isa == ZS_CPU_ISA_AUTO) {
        char why[256];
        atomic_store_explicit(&active_kernels, table_of(resolve(why, sizeof why)),
                              memory_order_release);
        if (why[0]) ZS_WARN("cpu backend: %s", why);
        return ZS_OK;
    }
    if (isa < 0 || isa >= ZS_CPU_ISA_COUNT)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "cpu backend: unknown instruction-set level %d",
                        (int)isa);
    if (!zs__cpu_isa_supported(isa))
        return zs__fail(ZS_ERR_UNSUPPORTED, "cpu backend: this CPU or build does not support "
                        "the %s kernels", zs__cpu_isa_name(isa));
    atomic_store_explicit(&active_kernels, table_of(isa), memory_order_release);
    return ZS_OK;
}
