/* The examples' CPU matrix products: one threading layer, and the name of
 * the BLAS kernel that decides their bits.
 *
 * Threads. OpenBLAS (pthreads build, Debian's default) starts its own
 * threads, and the examples' row loops run on OpenMP's; both kinds spin
 * while they wait for work, so with more than one of each on the same cores
 * they take turns stealing the CPU from the thread that has work (measured:
 * one rank with 2 OpenMP + 2 OpenBLAS threads stepped 3x slower than with
 * one thread). Here OpenMP is the only layer: ex_blas_init() makes the BLAS
 * single-threaded, and ex_sgemm() cuts each product into tiles that OpenMP
 * threads compute with one single-threaded BLAS call each.
 *
 * Bits. The tiles depend only on the product's shape, never on the number
 * of threads, so a run gives the same bits with any OMP_NUM_THREADS. (A
 * threaded OpenBLAS does not: its split changes with the thread count, and
 * with it, on Haswell-class kernels, the last bits of the sums.) The BLAS
 * kernel does change bits: ex_blas_kernel() names it, so ranks on hosts
 * whose OpenBLAS picked different kernels can be told (docs/MULTIHOST.md). */
#ifndef EX_CPU_BLAS_H
#define EX_CPU_BLAS_H

/* Makes the BLAS single-threaded (OpenBLAS found at run time; another BLAS
 * is left as it is and said so by ex_blas_threading). Idempotent. */
void ex_blas_init(void);

/* The BLAS's kernel ("Haswell", "Zen", "SkylakeX" for OpenBLAS; the
 * library's name otherwise), a static string. */
const char *ex_blas_kernel(void);

/* One line for logs: who threads what, e.g. "OpenMP 2 threads over
 * single-threaded OpenBLAS (pthreads build)". Written into out. */
void ex_blas_threading(char *out, int capacity);

/* C = alpha * op(A) . op(B) + beta * C, row-major (cblas_sgemm's arguments;
 * trans_a/trans_b: 0 no, 1 yes). Runs on the OpenMP threads of the caller
 * (or on the calling thread inside a parallel region). */
void ex_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
              int lda, const float *B, int ldb, float beta, float *C, int ldc);

#endif
