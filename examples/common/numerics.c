/* The examples' numerics line and check (numerics.h). */
#include "numerics.h"

#include <stdio.h>
#include <string.h>

#include "cpu_blas.h"

zs_status ex_numerics_check(zs_ctx *zs, int require) {
    const int cuda = strcmp(zs_backend_name(zs), "cuda") == 0;
    char threading[160], gpu[128];
    ex_blas_threading(threading, sizeof threading);
    ex_gpu_model(zs, gpu, sizeof gpu);
    if (zs_rank(zs) == 0) {
        if (cuda)
            printf("numerics: cuBLAS on %s; runtime CPU kernels %s\n", gpu, zs_cpu_kernels());
        else
            printf("numerics: BLAS kernel %s, %s; runtime CPU kernels %s\n", ex_blas_kernel(),
                   threading, zs_cpu_kernels());
        fflush(stdout);
    }
    if (cuda)
        return zs_agree_kernels(zs, "GPU models (cuBLAS picks its kernels by model)", gpu, require,
                                "train on one GPU model for bitwise equal runs, or set "
                                "app.require_same_kernels = true to refuse such a run");
    return zs_agree_kernels(zs, "BLAS kernels", ex_blas_kernel(), require,
                            "forward what picks the kernel to every host (mpirun -x "
                            "OPENBLAS_CORETYPE, see docs/MULTIHOST.md), or set "
                            "app.require_same_kernels = true to refuse such a run");
}
