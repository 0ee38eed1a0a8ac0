/*
 * bench_gpu_peaks — what this GPU reaches on its own, measured in the same
 * call as the trainers it is compared with (scripts/gpu-check.sh):
 *
 *   - bf16 GEMMs through cuBLASLt (bf16 operands and result, fp32
 *     accumulation: CUBLAS_COMPUTE_32F, the trainer's setting) at 8192^3 and
 *     at GPT-2 124M's shapes for B x T = 16384 tokens, each the best of the
 *     heuristic's first algorithms, on random data (zeros run faster and
 *     would flatter the peak). The largest is the "cuBLASLt peak" that MFU
 *     is also reported against: a trainer cannot beat the library it calls,
 *     so step FLOP/s over it says how much of the GEMMs' speed survives.
 *   - page-locked host <-> device copies (cudaMemcpyAsync of 256 MiB from
 *     cudaHostAlloc memory), the rate the offload bound's PCIe term uses.
 *
 *   bench_gpu_peaks [--quick]
 *
 * --quick: 8192^3 and the GPT-2 shapes once each with fewer repetitions.
 * Prints one line per measurement, then
 *   gemm peak: X TFLOP/s (M x N x K)
 *   pcie host->device: X GB/s
 *   pcie device->host: X GB/s
 * Without a usable device it prints SKIP and exits 77.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#define CK(call)                                                                         \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) {                                                         \
            fprintf(stderr, "bench_gpu_peaks: %s failed: %s (%s)\n", #call,              \
                    cudaGetErrorString(e_), cudaGetErrorName(e_));                       \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)
#define LT(call)                                                                         \
    do {                                                                                 \
        cublasStatus_t s_ = (call);                                                      \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                               \
            fprintf(stderr, "bench_gpu_peaks: %s failed: cublas status %d\n", #call,     \
                    (int)s_);                                                            \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

/* The trainer's cuBLASLt workspace (examples/gpt2/gpt2_cuda.cu). */
#define WORKSPACE ((size_t)32 << 20)
/* Algorithms of the heuristic's list tried per shape. */
#define ALGOS 4

typedef struct shape {
    const char *name;
    int m, n, k; /* D[m x n] = A[m x k] B[k x n] */
} shape;

/* Random bf16 values in [-1, 1): the top half of a float's bits. */
static void fill_random(uint16_t *h, size_t n, uint64_t seed) {
    uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        float f = (float)((double)(x >> 11) * 0x1.0p-53 * 2.0 - 1.0);
        uint32_t u;
        memcpy(&u, &f, 4);
        h[i] = (uint16_t)(u >> 16);
    }
}

/* The best TFLOP/s of the heuristic's first ALGOS algorithms on one shape,
 * each timed over `reps` products after 2 warm-ups; 0 if none ran. */
static double time_gemm(cublasLtHandle_t lt, cudaStream_t stream, const shape *s, void *a,
                        void *b, void *d, void *ws, int reps) {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    /* Column-major: D^T[n x m] = B^T[n x k] A^T[k x m], with A and B
     * row-major as the trainer stores them; B used transposed (weights
     * [n x k], the forward's layout). */
    const cublasOperation_t opa = CUBLAS_OP_T, opb = CUBLAS_OP_N;
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, (uint64_t)s->k, (uint64_t)s->n, s->k));
    LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, (uint64_t)s->k, (uint64_t)s->m, s->k));
    LT(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, (uint64_t)s->n, (uint64_t)s->m, s->n));
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t wsb = WORKSPACE;
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                            sizeof wsb));
    cublasLtMatmulHeuristicResult_t res[ALGOS];
    int found = 0;
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, ALGOS, res,
                                                       &found);
    const float alpha = 1.0f, beta = 0.0f;
    double best = 0.0;
    int best_i = -1;
    cudaEvent_t t0, t1;
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));
    for (int i = 0; hs == CUBLAS_STATUS_SUCCESS && i < found; i++) {
        cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
        for (int w = 0; w < 2 && st == CUBLAS_STATUS_SUCCESS; w++)
            st = cublasLtMatmul(lt, desc, &alpha, b, la, a, lb, &beta, d, ld, d, ld,
                                &res[i].algo, ws, WORKSPACE, stream);
        if (st != CUBLAS_STATUS_SUCCESS) continue;
        CK(cudaEventRecord(t0, stream));
        for (int r = 0; r < reps; r++)
            LT(cublasLtMatmul(lt, desc, &alpha, b, la, a, lb, &beta, d, ld, d, ld, &res[i].algo,
                              ws, WORKSPACE, stream));
        CK(cudaEventRecord(t1, stream));
        CK(cudaEventSynchronize(t1));
        float ms = 0.0f;
        CK(cudaEventElapsedTime(&ms, t0, t1));
        const double tflops = 2.0 * s->m * (double)s->n * s->k * reps / (ms * 1e-3) / 1e12;
        if (tflops > best) {
            best = tflops;
            best_i = i;
        }
    }
    printf("gemm bf16 %-12s %5d x %5d x %5d: %7.1f TFLOP/s (best of %d algorithms%s)\n", s->name,
           s->m, s->n, s->k, best, found, best_i < 0 ? ", none ran" : "");
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
    return best;
}

/* GB/s of `reps` copies of `bytes` each way between page-locked host memory
 * and the device, after one warm-up each way. */
static void time_pcie(cudaStream_t stream, size_t bytes, int reps) {
    void *h = NULL, *d = NULL;
    CK(cudaHostAlloc(&h, bytes, cudaHostAllocPortable));
    memset(h, 1, bytes);
    CK(cudaMalloc(&d, bytes));
    cudaEvent_t t0, t1;
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));
    for (int dir = 0; dir < 2; dir++) {
        void *dst = dir == 0 ? d : h;
        const void *src = dir == 0 ? h : d;
        const enum cudaMemcpyKind kind = dir == 0 ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
        CK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
        CK(cudaEventRecord(t0, stream));
        for (int r = 0; r < reps; r++) CK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
        CK(cudaEventRecord(t1, stream));
        CK(cudaEventSynchronize(t1));
        float ms = 0.0f;
        CK(cudaEventElapsedTime(&ms, t0, t1));
        printf("pcie %s: %.1f GB/s (%d copies of %zu MiB from cudaHostAlloc memory)\n",
               dir == 0 ? "host->device" : "device->host",
               (double)bytes * reps / (ms * 1e-3) / 1e9, reps, bytes >> 20);
    }
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    cudaFree(d);
    cudaFreeHost(h);
}

int main(int argc, char **argv) {
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else {
            fprintf(stderr, "usage: bench_gpu_peaks [--quick]\n");
            return 2;
        }
    }
    int devices = 0;
    cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess || devices == 0) {
        printf("SKIP: no usable CUDA device: %s\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0 devices");
        return 77;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    /* GPT-2 124M's products at B x T = 16384 (C 768, 4C 3072, the head's
     * vocabulary padded to 50304 as llm.c pads it). */
    const int bt = 16384;
    const shape shapes[] = {
        {"square", 8192, 8192, 8192},      {"gpt2 qkv", bt, 2304, 768},
        {"gpt2 attproj", bt, 768, 768},    {"gpt2 fc", bt, 3072, 768},
        {"gpt2 fcproj", bt, 768, 3072},    {"gpt2 head", bt, 50304, 768},
    };
    const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    size_t max_a = 0, max_b = 0, max_d = 0;
    for (int i = 0; i < nshapes; i++) {
        const size_t a = (size_t)shapes[i].m * shapes[i].k, b = (size_t)shapes[i].k * shapes[i].n,
                     d = (size_t)shapes[i].m * shapes[i].n;
        if (a > max_a) max_a = a;
        if (b > max_b) max_b = b;
        if (d > max_d) max_d = d;
    }
    const size_t max_ab = max_a > max_b ? max_a : max_b;
    uint16_t *host = malloc(max_ab * sizeof *host);
    if (!host) {
        fprintf(stderr, "bench_gpu_peaks: out of host memory\n");
        return 1;
    }
    void *a = NULL, *b = NULL, *d = NULL, *ws = NULL;
    CK(cudaMalloc(&a, max_a * 2));
    CK(cudaMalloc(&b, max_b * 2));
    CK(cudaMalloc(&d, max_d * 2));
    CK(cudaMalloc(&ws, WORKSPACE));
    fill_random(host, max_a, 1);
    CK(cudaMemcpy(a, host, max_a * 2, cudaMemcpyHostToDevice));
    fill_random(host, max_b, 2);
    CK(cudaMemcpy(b, host, max_b * 2, cudaMemcpyHostToDevice));
    free(host);
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cublasLtHandle_t lt;
    LT(cublasLtCreate(&lt));
    double peak = 0.0;
    int at = 0;
    for (int i = 0; i < nshapes; i++) {
        const double t = time_gemm(lt, stream, &shapes[i], a, b, d, ws, quick ? 5 : 20);
        if (t > peak) {
            peak = t;
            at = i;
        }
    }
    printf("gemm peak: %.1f TFLOP/s (%d x %d x %d, bf16 in and out, fp32 accumulation)\n", peak,
           shapes[at].m, shapes[at].n, shapes[at].k);
    fflush(stdout);
    time_pcie(stream, (size_t)256 << 20, quick ? 3 : 10);
    cublasLtDestroy(lt);
    cudaStreamDestroy(stream);
    cudaFree(a);
    cudaFree(b);
    cudaFree(d);
    cudaFree(ws);
    return peak > 0.0 ? 0 : 1;
}
