/* The fused optimizer pass on the CPU: checks the arguments, then runs the
 * kernels of the active instruction-set level (cpu_kernels_impl.h) over
 * contiguous ranges, one per OpenMP task. Elements are independent, so the
 * split changes no result. */
#include "backend/cpu_isa.h"
#include "backend/cpu_ops.h"
#include "core/error.h"

static zs_status check_args(const zs__update_args *a) {
    if (a->count < 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "cpu backend: optimizer update of %lld "
                        "elements; the count must be >= 0", (long long)a->count);
    if (!zs__cpu_dtype_valid(a->grad_dtype) || (a->param && !zs__cpu_dtype_valid(a->param_dtype)))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "cpu backend: optimizer update with gradient "
                        "dtype %d and parameter dtype %d: each must be fp32, fp16 or bf16",
                        (int)a->grad_dtype, (int)a->param_dtype);
    switch (a->kind) {
    case ZS_K_OPTIM_ADAM:
    case ZS_K_OPTIM_ADAMW:
        if (a->count > 0 && (!a->m || !a->v))
            return zs__fail(ZS_ERR_INTERNAL, "cpu backend: Adam update without %s state",
                            !a->m ? "first-moment" : "second-moment");
        break;
    case ZS_K_OPTIM_SGD:
        break;
    default:
        return zs__fail(ZS_ERR_INTERNAL, "cpu backend: unknown optimizer kind %d", (int)a->kind);
    }
    if (a->count > 0 && (!a->master || !a->grad))
        return zs__fail(ZS_ERR_INTERNAL, "cpu backend: optimizer update without %s",
                        !a->master ? "master weights" : "gradient");
    return ZS_OK;
}

zs_status zs__cpu_optimizer_update(zs__backend *be, const zs__update_args *args) {
    (void)be;
    ZS_CHECK(check_args(args));
    const zs__cpu_kernels *k = zs__cpu_kernels_get();
    const int64_t count = args->count;
    const int64_t tasks = (count + ZS_CPU_TASK - 1) / ZS_CPU_TASK;
#pragma omp parallel for schedule(static) if (count > ZS_CPU_PARALLEL_MIN)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t begin = t * ZS_CPU_TASK;
        k->update(args, begin, count - begin < ZS_CPU_TASK ? count - begin : ZS_CPU_TASK);
    }
    return ZS_OK;
}
