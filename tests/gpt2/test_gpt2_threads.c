/*
 * The examples' threading is what docs/README.md ("Threads and binding")
 * says, whatever the user set: run with OMP_NUM_THREADS=2 and
 * OPENBLAS_NUM_THREADS=2 in the environment (ctest sets them), which before
 * made OpenBLAS's threads and OpenMP's fight over the cores.
 *   - after the CPU backend is created OpenBLAS runs single-threaded, and
 *     the threading line says OpenMP drives it;
 *   - ex_sgemm (fixed tiles of one single-threaded BLAS call each, spread
 *     over OpenMP's threads) computes op(A) op(B) for every transpose, with
 *     row tiles and column tiles and ragged edges, within float rounding of
 *     a double-precision reference, and gives the same bits with 1, 2 and 3
 *     threads, also on shapes whose threaded OpenBLAS result changes with
 *     the thread count;
 *   - a whole GPT-2 step gives the same bits with 1, 2 and 3 threads.
 */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <dlfcn.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_blas.h"
#include "gpt2_backend.h"
#include "model_check.h"
#include "gpt2_test_model.h"

typedef int (*get_threads_fn)(void);

static float value(uint64_t *state) { return (float)(mt_uniform(state) - 0.5); }

/* C = op(A) op(B) + C0 with ex_sgemm on `threads` threads. */
static void product(int ta, int tb, int M, int N, int K, const float *A, const float *B,
                    const float *C0, float *C, int threads) {
    omp_set_num_threads(threads);
    memcpy(C, C0, sizeof(float) * (size_t)M * (size_t)N);
    ex_sgemm(ta, tb, M, N, K, 1.0f, A, ta ? M : K, B, tb ? K : N, 1.0f, C, N);
}

static void test_sgemm(int M, int N, int K) {
    uint64_t state = (uint64_t)M * 1000003u + (uint64_t)N * 1009u + (uint64_t)K;
    float *A = malloc(sizeof(float) * (size_t)M * K), *B = malloc(sizeof(float) * (size_t)K * N);
    float *C0 = malloc(sizeof(float) * (size_t)M * N);
    float *C[3];
    for (int t = 0; t < 3; t++) C[t] = malloc(sizeof(float) * (size_t)M * N);
    REQUIRE(A && B && C0 && C[0] && C[1] && C[2]);
    for (size_t i = 0; i < (size_t)M * K; i++) A[i] = value(&state);
    for (size_t i = 0; i < (size_t)K * N; i++) B[i] = value(&state);
    for (size_t i = 0; i < (size_t)M * N; i++) C0[i] = value(&state);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            for (int t = 0; t < 3; t++) product(ta, tb, M, N, K, A, B, C0, C[t], t + 1);
            CHECK_MSG(memcmp(C[0], C[1], sizeof(float) * (size_t)M * N) == 0 &&
                          memcmp(C[0], C[2], sizeof(float) * (size_t)M * N) == 0,
                      "ex_sgemm %dx%dx%d (trans %d %d): 1, 2 and 3 threads differ", M, N, K, ta, tb);
            /* A sample of elements against double precision: K products of
             * magnitude < 1/4, so the float error stays below K * 2^-22. */
            double worst = 0;
            for (int e = 0; e < 97; e++) {
                const int i = (int)((size_t)e * 7919u % (size_t)M), j = (int)((size_t)e * 104729u % (size_t)N);
                double want = C0[(size_t)i * N + j];
                for (int k = 0; k < K; k++) {
                    const double a = ta ? A[(size_t)k * M + i] : A[(size_t)i * K + k];
                    const double b = tb ? B[(size_t)j * K + k] : B[(size_t)k * N + j];
                    want += a * b;
                }
                worst = fmax(worst, fabs(want - C[0][(size_t)i * N + j]));
            }
            CHECK_MSG(worst <= K * ldexp(1.0, -22), "ex_sgemm %dx%dx%d (trans %d %d): error %.3g",
                      M, N, K, ta, tb, worst);
        }
    omp_set_num_threads(1);
    free(A);
    free(B);
    free(C0);
    for (int t = 0; t < 3; t++) free(C[t]);
}

int main(void) {
    gpt2_backend *be = gpt2_cpu_backend_create();
    REQUIRE(be != NULL);
    get_threads_fn blas_threads =
        (get_threads_fn)(void (*)(void))dlsym(RTLD_DEFAULT, "openblas_get_num_threads");
    if (blas_threads)
        CHECK_MSG(blas_threads() == 1, "OpenBLAS runs %d threads beside OpenMP's; the CPU backend "
                  "must make it single-threaded", blas_threads());
    char line[256];
    omp_set_num_threads(2);
    ex_blas_threading(line, sizeof line);
    CHECK_MSG(strncmp(line, "2 OpenMP threads over single-threaded ", 38) == 0,
              "threading line: \"%s\"", line);
    printf("threading: %s; BLAS kernel: %s\n", line, ex_blas_kernel());

    test_sgemm(7, 5, 3);         /* one tile */
    test_sgemm(200, 130, 70);    /* ragged row tiles, column tiles */
    test_sgemm(33, 1000, 65);    /* few rows: column tiles */
    test_sgemm(1024, 768, 192);  /* row tiles only */
    test_sgemm(256, 3141, 768);  /* where threaded OpenBLAS changed bits with its thread count */

    const gpt2_dims d = {.n_layer = 2, .n_head = 4, .n_embd = 128, .vocab = 203,
                         .block_size = 48};
    mt_step_result r[3];
    for (int t = 0; t < 3; t++) REQUIRE(gpt2_tm_run_step(be, &d, 3, 40, 48, t + 1, &r[t]) == 0);
    char diff[256];
    CHECK_MSG(mt_step_result_compare(&r[0], &r[1], diff, sizeof diff) == 0,
              "GPT-2 step, 1 vs 2 threads: %s", diff);
    CHECK_MSG(mt_step_result_compare(&r[0], &r[2], diff, sizeof diff) == 0,
              "GPT-2 step, 1 vs 3 threads: %s", diff);
    for (int t = 0; t < 3; t++) mt_step_result_free(&r[t]);
    be->ops->destroy(be);
    return model_check_finish("test_gpt2_threads");
}
