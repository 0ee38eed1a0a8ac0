/* Reduce-scatter and all-gather bandwidth of both implementations (ring over
 * MPI point-to-point, and MPI's own collectives), measured in one run so the
 * ring/mpi ratio is not at the mercy of a shared machine's drift.
 *
 *   mpirun -np N bench_comm [--min-bytes B] [--max-bytes B] [--factor F]
 *                           [--iters I] [--warmup W] [--segment-bytes S]
 *                           [--dtype fp32|fp16|bf16]
 *
 * bytes is the whole buffer (size chunks); time is the median over
 * iterations of the slowest rank's time; algbw = bytes / time and
 * busbw = algbw * (n-1)/n as in nccl-tests for reduce-scatter and all-gather.
 * The implementations alternate iteration by iteration. A third row, "raw",
 * calls MPI_Reduce_scatter_block / MPI_Allgather once on the whole buffer,
 * in place, without zeroshard: the MPI collective used the plain way, to show
 * what the segmenting and packing of the "mpi" implementation cost.
 * All-gathers get a fourth row, "auto": comm.all_gather = "auto" after its
 * measurement (zs__comm_all_gather_measure) ran on this run's chunk sizes,
 * with auto/best = its time over the faster of ring and mpi at that size
 * (1.00 when it picked the faster one).
 *
 * --dtype picks the element type (default fp32). fp16 and bf16 move half the
 * bytes, and their reduce-scatter adds in fp32 with one rounding per add
 * (src/comm/reduce.c); the raw row then uses a user MPI_Op on MPI_UINT16_T
 * around the same add, as the "mpi" implementation does.
 *
 * The buffer holds normal numbers in [0.5, 1) with varied mantissas, copied
 * in again before every call (outside the timing) because sums grow towards
 * fp16's overflow: normal numbers take the conversions' common path, as
 * gradients do, where zeros would take a shortcut. */
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/stats.h"
#include "backend/backend.h"
#include "comm/comm.h"
#include "comm/reduce.h"
#include "core/number.h"
#include "kernels/convert.h"

typedef struct options {
    size_t min_bytes, max_bytes;
    int factor, iters, warmup;
    int64_t segment_bytes;
    zs_dtype dtype;
    int backend_add; /* ring adds through the CPU backend's SIMD accumulate, as in the runtime */
} options;

static int parse(int argc, char **argv, options *o) {
    for (int i = 1; i < argc; i++) {
        const char *key = argv[i];
        if (i + 1 >= argc) return 0;
        if (strcmp(key, "--dtype") == 0) {
            const char *name = argv[++i];
            if (strcmp(name, "fp32") == 0) o->dtype = ZS_DTYPE_FP32;
            else if (strcmp(name, "fp16") == 0) o->dtype = ZS_DTYPE_FP16;
            else if (strcmp(name, "bf16") == 0) o->dtype = ZS_DTYPE_BF16;
            else return 0;
            continue;
        }
        if (strcmp(key, "--add") == 0) {
            const char *name = argv[++i];
            if (strcmp(name, "backend") == 0) o->backend_add = 1;
            else if (strcmp(name, "portable") == 0) o->backend_add = 0;
            else return 0;
            continue;
        }
        /* Sizes take units (64K, 256MiB); counts are whole ints, the factor at least 2. */
        const char *text = argv[++i];
        int64_t value = 0;
        zs_status st = strstr(key, "-bytes") ? zs__number_option_size(key, text, 1, INT64_MAX, &value)
                       : zs__number_option_int64(key, text, strcmp(key, "--factor") == 0 ? 2 : 1,
                                                 INT_MAX, &value);
        if (st != ZS_OK) {
            int rank = 0;
            MPI_Comm_rank(MPI_COMM_WORLD, &rank);
            if (rank == 0) fprintf(stderr, "bench_comm: %s\n", zs_last_error());
            return 0;
        }
        if (strcmp(key, "--min-bytes") == 0) o->min_bytes = (size_t)value;
        else if (strcmp(key, "--max-bytes") == 0) o->max_bytes = (size_t)value;
        else if (strcmp(key, "--factor") == 0) o->factor = (int)value;
        else if (strcmp(key, "--iters") == 0) o->iters = (int)value;
        else if (strcmp(key, "--warmup") == 0) o->warmup = (int)value;
        else if (strcmp(key, "--segment-bytes") == 0) o->segment_bytes = value;
        else return 0;
    }
    return o->min_bytes <= o->max_bytes;
}

/* What the raw row needs to reduce a dtype with MPI's own collective. */
typedef struct raw_type {
    MPI_Datatype type;
    MPI_Op sum;
} raw_type;

static void raw_sum_fp16(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    zs__comm_sum_into(inout, in, (size_t)*len, ZS_DTYPE_FP16);
}

static void raw_sum_bf16(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    zs__comm_sum_into(inout, in, (size_t)*len, ZS_DTYPE_BF16);
}

/* The whole buffer in one MPI call (its count must fit in an int). */
static zs_status raw_call(zs_comm_op op, unsigned char *buf, size_t count, size_t esize,
                          const raw_type *raw) {
    int size = 1, rank = 0, rc;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (op == ZS_COMM_REDUCE_SCATTER) {
        /* In place, the result lands in the first chunk; move it to ours. */
        rc = MPI_Reduce_scatter_block(MPI_IN_PLACE, buf, (int)count, raw->type, raw->sum,
                                      MPI_COMM_WORLD);
        if (rank > 0) memmove(buf + (size_t)rank * count * esize, buf, count * esize);
    } else {
        rc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)count, raw->type,
                           MPI_COMM_WORLD);
    }
    return rc == MPI_SUCCESS ? ZS_OK : ZS_ERR_COMM;
}

/* One timed call (comm NULL: raw MPI) on a fresh copy of `pristine`: the
 * slowest rank's seconds, known on every rank. */
static double timed(zs__comm *comm, zs_comm_op op, unsigned char *buf,
                    const unsigned char *pristine, size_t count, zs_dtype dtype,
                    const raw_type *raw) {
    const size_t esize = zs_dtype_size(dtype);
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    memcpy(buf, pristine, count * esize * (size_t)size);
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    zs_status status = !comm ? raw_call(op, buf, count, esize, raw)
                       : op == ZS_COMM_REDUCE_SCATTER
                           ? zs__comm_reduce_scatter(comm, buf, count, dtype, "bench")
                           : zs__comm_all_gather(comm, buf, count, dtype, "bench");
    double seconds = MPI_Wtime() - start;
    if (status != ZS_OK) {
        fprintf(stderr, "bench_comm: %s\n", zs_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    double slowest = 0;
    MPI_Allreduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

int main(int argc, char **argv) {
    int provided = 0, rank = 0, size = 1;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    /* 1 MiB to 256 MiB in powers of 2, 9 timed iterations: about 20 s at 4
     * ranks on 2 cores. The segment default is the config's (4 MiB). */
    options o = {1u << 20, 256u << 20, 2, 9, 2, 4 << 20, ZS_DTYPE_FP32, 1};
    if (!parse(argc, argv, &o)) {
        if (rank == 0)
            fprintf(stderr, "usage: bench_comm [--min-bytes B] [--max-bytes B] [--factor F] "
                            "[--iters I] [--warmup W] [--segment-bytes S] "
                            "[--dtype fp32|fp16|bf16] [--add backend|portable]\n");
        MPI_Finalize();
        return 2;
    }

    enum { IMPLS = 4 }; /* the fourth, auto, runs for all-gathers only */
    const char *impl_names[IMPLS] = {"ring", "mpi", "raw", "auto"};
    zs__comm *comms[IMPLS] = {NULL, NULL, NULL, NULL};
    zs__mem mems[IMPLS], backend_mem;
    memset(&backend_mem, 0, sizeof backend_mem);
    zs__backend *backend = NULL;
    if (o.backend_add && zs__cpu_backend_create(&backend_mem, &backend) != ZS_OK) {
        fprintf(stderr, "bench_comm: rank %d: %s\n", rank, zs_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int k = 0; k < IMPLS; k++) {
        if (k == 2) continue; /* raw: MPI called directly */
        zs__settings settings;
        memset(&settings, 0, sizeof settings);
        settings.comm.reduce_scatter = k == 0 ? ZS_COMM_IMPL_RING : ZS_COMM_IMPL_MPI;
        settings.comm.all_gather = k == 3 ? ZS_COMM_IMPL_AUTO : settings.comm.reduce_scatter;
        settings.comm.segment_bytes = o.segment_bytes;
        settings.comm.timeout_s = 600;
        memset(&mems[k], 0, sizeof mems[k]);
        if (zs__comm_create_mpi(MPI_COMM_WORLD, &settings, &mems[k], &comms[k]) != ZS_OK) {
            fprintf(stderr, "bench_comm: rank %d: %s\n", rank, zs_last_error());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        zs__comm_use_backend(comms[k], backend);
    }

    const size_t esize = zs_dtype_size(o.dtype);
    raw_type raw = {MPI_FLOAT, MPI_SUM};
    if (o.dtype != ZS_DTYPE_FP32) {
        raw.type = MPI_UINT16_T;
        MPI_Op_create(o.dtype == ZS_DTYPE_FP16 ? raw_sum_fp16 : raw_sum_bf16, 1, &raw.sum);
    }

    /* Every call starts from `pristine` (see the header); touching both
     * buffers here keeps page faults out of the timing. */
    unsigned char *buf = malloc(o.max_bytes), *pristine = malloc(o.max_bytes);
    double *samples = malloc(sizeof(double) * (size_t)o.iters * IMPLS);
    if (o.max_bytes / esize > INT_MAX) {
        fprintf(stderr, "bench_comm: --max-bytes must stay below %zu for the raw rows\n",
                (size_t)INT_MAX * esize);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (!buf || !pristine || !samples) {
        fprintf(stderr, "bench_comm: cannot allocate 2 x %zu bytes\n", o.max_bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t i = 0; i < o.max_bytes / esize; i++) {
        /* In [0.5, 1) with 10 varied mantissa bits: exact in every dtype but
         * bf16, which rounds them once here. */
        float v = 0.5f + (float)((i * 7919u + (size_t)rank * 104729u) % 1024u) / 2048.0f;
        if (o.dtype == ZS_DTYPE_FP32) memcpy(pristine + i * esize, &v, sizeof v);
        else {
            uint16_t h = o.dtype == ZS_DTYPE_FP16 ? zs_k_fp32_to_fp16(v) : zs_k_fp32_to_bf16(v);
            memcpy(pristine + i * esize, &h, sizeof h);
        }
    }
    memcpy(buf, pristine, o.max_bytes);
    /* auto: measured on the chunk sizes the all-gather rows use. */
    size_t chunks[64];
    int nchunks = 0;
    for (size_t target = o.min_bytes; target <= o.max_bytes && nchunks < 64;
         target *= (size_t)o.factor) {
        const size_t count = target / (esize * (size_t)size);
        if (count > 0) chunks[nchunks++] = count * esize;
        if (target > o.max_bytes / (size_t)o.factor) break;
    }
    if (zs__comm_all_gather_measure(comms[3], buf, chunks, nchunks) != ZS_OK) {
        fprintf(stderr, "bench_comm: rank %d: %s\n", rank, zs_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 0) {
        const size_t from = zs__comm_all_gather_mpi_from(comms[3], NULL);
        if (from == SIZE_MAX) printf("# auto: the ring at every size\n");
        else printf("# auto: MPI's all-gather from %zu bytes per rank\n", from);
    }

    if (rank == 0) {
        printf("# bench_comm: %d ranks, %s, segment_bytes %lld, %d iterations after %d warm-up, "
               "ring add: %s, time = median of max over ranks\n",
               size, zs_dtype_name(o.dtype), (long long)o.segment_bytes, o.iters, o.warmup,
               o.backend_add ? "backend (SIMD)" : "portable");
        printf("%-15s %-5s %12s %12s %10s %10s %9s %9s %9s\n", "op", "impl", "bytes", "time_us",
               "algbw_GBs", "busbw_GBs", "ring/mpi", "ring/raw", "auto/best");
    }
    const zs_comm_op ops[2] = {ZS_COMM_REDUCE_SCATTER, ZS_COMM_ALL_GATHER};
    double started = MPI_Wtime();
    for (int p = 0; p < 2; p++) {
        for (size_t target = o.min_bytes; target <= o.max_bytes; target *= (size_t)o.factor) {
            size_t count = target / (esize * (size_t)size);
            if (count == 0) continue;
            size_t bytes = count * esize * (size_t)size;
            const int impls = ops[p] == ZS_COMM_ALL_GATHER ? IMPLS : IMPLS - 1;
            for (int w = 0; w < o.warmup; w++)
                for (int k = 0; k < impls; k++)
                    timed(comms[k], ops[p], buf, pristine, count, o.dtype, &raw);
            for (int it = 0; it < o.iters; it++)
                for (int k = 0; k < impls; k++)
                    samples[k * o.iters + it] =
                        timed(comms[k], ops[p], buf, pristine, count, o.dtype, &raw);
            double median[IMPLS], busbw[IMPLS], algbw[IMPLS];
            for (int k = 0; k < impls; k++) {
                qsort(samples + k * o.iters, (size_t)o.iters, sizeof(double), bench_compare_double);
                median[k] = samples[k * o.iters + o.iters / 2];
                algbw[k] = (double)bytes / median[k] / 1e9;
                busbw[k] = algbw[k] * (size - 1) / size;
            }
            if (rank == 0)
                for (int k = 0; k < impls; k++) {
                    const double best = median[0] < median[1] ? median[0] : median[1];
                    printf("%-15s %-5s %12zu %12.1f %10.3f %10.3f %9.2f %9.2f", zs_comm_op_name(ops[p]),
                           impl_names[k], bytes, median[k] * 1e6, algbw[k], busbw[k],
                           busbw[0] / busbw[1], busbw[0] / busbw[2]);
                    if (k == 3) printf(" %9.2f", median[3] / best);
                    printf("\n");
                }
            if (rank == 0) fflush(stdout);
            if (target > o.max_bytes / (size_t)o.factor) break;
        }
    }
    if (rank == 0) printf("# total %.1f s\n", MPI_Wtime() - started);

    free(samples);
    free(buf);
    free(pristine);
    if (raw.sum != MPI_SUM) MPI_Op_free(&raw.sum);
    for (int k = 0; k < IMPLS; k++) zs__comm_destroy(comms[k]);
    zs__backend_destroy(backend);
    MPI_Finalize();
    return 0;
}
