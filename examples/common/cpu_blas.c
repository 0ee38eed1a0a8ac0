/* The examples' CPU matrix products (cpu_blas.h). */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "cpu_blas.h"

#include <dlfcn.h>
#include <omp.h>
#include <stdio.h>

#include <cblas.h>

/* Tiles of a product: blocks of EX_TILE_ROWS rows by EX_TILE_COLS columns of
 * C, the last ones smaller. Constants of the layout, not tuning knobs of the
 * run: they fix which elements each BLAS call computes, hence the bits,
 * whatever the number of threads. Their size is a trade: each call packs
 * its block of op(B) (K x cols) and of op(A) (rows x K) again, which costs
 * about 1/rows + 1/cols of the call's arithmetic, so small tiles are slow
 * on one thread (64-row tiles cost a rank 5-10% of its step), and few tiles
 * leave threads idle; 256 x 256 measured as fast as one sgemm call on one
 * thread (bench_gpt2_model, the demo's shapes) and still gives GPT-2's
 * products (B*T rows, 3C or 4C columns) tens of tiles. */
#define EX_TILE_ROWS 256
#define EX_TILE_COLS 256

/* OpenBLAS's entry points, looked up at run time so that the examples link
 * with any BLAS (find_package(BLAS)) and the program still runs with
 * another one. */
typedef void (*set_threads_fn)(int);
typedef char *(*corename_fn)(void);
typedef int (*parallel_fn)(void);

void ex_blas_init(void) {
    set_threads_fn set = (set_threads_fn)(void (*)(void))dlsym(RTLD_DEFAULT,
                                                               "openblas_set_num_threads");
    if (!set) return;
    /* An OpenMP build of OpenBLAS up to 0.3.21 implements this with
     * omp_set_num_threads(1), which would leave every OpenMP loop of the
     * program (ours, the runtime's) on one thread: the program's count is
     * restored, and OpenBLAS keeps its own count of 1. */
    const int threads = omp_get_max_threads();
    set(1);
    if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
}

const char *ex_blas_kernel(void) {
    corename_fn core = (corename_fn)(void (*)(void))dlsym(RTLD_DEFAULT, "openblas_get_corename");
    if (core) {
        const char *name = core();
        return name && *name ? name : "OpenBLAS (unknown core)";
    }
    return "not OpenBLAS";
}

void ex_blas_threading(char *out, int capacity) {
    parallel_fn parallel = (parallel_fn)(void (*)(void))dlsym(RTLD_DEFAULT, "openblas_get_parallel");
    const char *build = !parallel            ? "a BLAS that is not OpenBLAS"
                        : parallel() == 0    ? "OpenBLAS (sequential build)"
                        : parallel() == 1    ? "OpenBLAS (pthreads build)"
                                             : "OpenBLAS (OpenMP build)";
    snprintf(out, (size_t)capacity, "%d OpenMP thread%s over single-threaded %s",
             omp_get_max_threads(), omp_get_max_threads() == 1 ? "" : "s", build);
}

void ex_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
              int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    const int row_tiles = (M + EX_TILE_ROWS - 1) / EX_TILE_ROWS;
    const int col_tiles = (N + EX_TILE_COLS - 1) / EX_TILE_COLS;
    const int tiles = row_tiles * col_tiles;
    const enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
    const enum CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
#pragma omp parallel for schedule(static) if (tiles > 1 && !omp_in_parallel())
    for (int t = 0; t < tiles; t++) {
        const int r0 = t / col_tiles * EX_TILE_ROWS, c0 = t % col_tiles * EX_TILE_COLS;
        const int rows = M - r0 < EX_TILE_ROWS ? M - r0 : EX_TILE_ROWS;
        const int cols = N - c0 < EX_TILE_COLS ? N - c0 : EX_TILE_COLS;
        /* Row r of op(A) and column c of op(B). */
        const float *a = trans_a ? A + r0 : A + (size_t)r0 * (size_t)lda;
        const float *b = trans_b ? B + (size_t)c0 * (size_t)ldb : B + c0;
        cblas_sgemm(CblasRowMajor, ta, tb, rows, cols, K, alpha, a, lda, b, ldb, beta,
                    C + (size_t)r0 * (size_t)ldc + c0, ldc);
    }
}
