/* Collectives over MPI (src/comm): results, determinism, segmentation,
 * counters and staging memory, for the implementation named on the command
 * line ("ring" or "mpi"); the other implementation is created too so the two
 * can be compared in one run.
 *
 *   mpirun -np N test_comm ring|mpi
 *
 * Exact checks use "exactly summable" data: small integers times powers of
 * two, with the same power for every rank at a given element, so any
 * summation order gives the same float and the reference is exact.
 *
 * fp16 and bf16 sums (widened to fp32, added, rounded once per add) are
 * checked on exact data (subnormals included), against a simulation of the
 * ring's hop order with one rounding per hop, against the exact sum within
 * half an ulp per hop, for repeatability, all_reduce == reduce_scatter +
 * all_gather, overflow to infinity and NaN propagation.
 *
 * Host staging (zs__comm_stage_through, the path of comm.impl = "mpi" on a
 * GPU) is run here on the CPU backend: every collective, in pieces far
 * smaller than the chunks, gives the unstaged bits; the staging is charged
 * to the comm tag and too small a buffer is refused on every rank. And
 * comm.all_gather = "auto": the threshold rule, and a measurement whose
 * result every rank shares. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "kernels/convert.h"
#include "test_util.h"

static int g_rank, g_size;

/* Rank r's contribution to element i: an integer in [-8, 8] times 2^-(i%5). */
static float exact_value(int rank, size_t i) {
    int k = (int)((i * 7 + (size_t)rank * 13) % 17) - 8;
    return ldexpf((float)k, -(int)(i % 5));
}

/* A fixed pseudo-random float in [0.5, 1.5): sums of these round, so they
 * show whether two summation orders agree. Positive, so no cancellation. */
static float rough_value(int rank, size_t i) {
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull + (uint64_t)rank * 0xBF58476D1CE4E5B9ull + 1;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    return 0.5f + (float)(x >> 40) / (float)(1u << 24);
}

static float *alloc_floats(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    ZT_REQUIRE(p != NULL);
    return p;
}

static void fill(float *buf, size_t total, float (*value)(int, size_t)) {
    for (size_t i = 0; i < total; i++) buf[i] = value(g_rank, i);
}

/* The counters moved by exactly one call of `op` with `bytes`. */
static void check_delta(const char *what, const zs_comm_stats *before, const zs__comm *comm,
                        zs_comm_op op, uint64_t bytes) {
    zs_comm_stats after;
    zs__comm_stats(comm, &after);
    for (int o = 0; o < ZS_COMM_OP_COUNT; o++) {
        uint64_t calls = after.calls[o] - before->calls[o];
        uint64_t moved = after.bytes[o] - before->bytes[o];
        ZT_CHECK_MSG(calls == (o == (int)op ? 1u : 0u), "%s: %s calls went up by %llu", what,
                     zs_comm_op_name((zs_comm_op)o), (unsigned long long)calls);
        ZT_CHECK_MSG(moved == (o == (int)op ? bytes : 0u), "%s: %s bytes went up by %llu, not %llu",
                     what, zs_comm_op_name((zs_comm_op)o), (unsigned long long)moved,
                     (unsigned long long)(o == (int)op ? bytes : 0u));
        /* No topology here: every peer counts as on this rank's node. */
        ZT_CHECK_MSG(after.bytes_intra[o] - before->bytes_intra[o] == moved &&
                         after.bytes_inter[o] == before->bytes_inter[o],
                     "%s: %s bytes by link: intra +%llu, inter +%llu, of %llu", what,
                     zs_comm_op_name((zs_comm_op)o),
                     (unsigned long long)(after.bytes_intra[o] - before->bytes_intra[o]),
                     (unsigned long long)(after.bytes_inter[o] - before->bytes_inter[o]),
                     (unsigned long long)moved);
    }
}

static uint64_t ring_bytes(size_t count, size_t esize) {
    return (uint64_t)(g_size - 1) * count * esize;
}

/* Reduce-scatter of exact data equals the exact sum; counters follow comm.h. */
static void check_reduce_scatter_exact(zs__comm *comm, size_t count) {
    size_t total = count * (size_t)g_size;
    float *buf = alloc_floats(total);
    fill(buf, total, exact_value);
    zs_comm_stats before;
    zs__comm_stats(comm, &before);
    ZT_OK(zs__comm_reduce_scatter(comm, buf, count, ZS_DTYPE_FP32, "exact"));
    check_delta("reduce_scatter", &before, comm, ZS_COMM_REDUCE_SCATTER,
                ring_bytes(count, sizeof(float)));
    size_t bad = 0, first = 0;
    double first_ref = 0;
    for (size_t i = (size_t)g_rank * count; i < (size_t)(g_rank + 1) * count; i++) {
        double ref = 0;
        for (int r = 0; r < g_size; r++) ref += exact_value(r, i);
        if (buf[i] != (float)ref && bad++ == 0) {
            first = i;
            first_ref = ref;
        }
    }
    ZT_CHECK_MSG(bad == 0, "count %zu: %zu wrong sums, first at element %zu: got %g, want %g",
                 count, bad, first, bad ? (double)buf[first] : 0.0, first_ref);
    free(buf);
}

/* All-gather puts every owner's chunk in place; the dtype does not matter. */
static void check_all_gather(zs__comm *comm, size_t count, zs_dtype dtype) {
    size_t esize = zs_dtype_size(dtype);
    size_t chunk = count * esize, total = chunk * (size_t)g_size;
    unsigned char *buf = malloc(total ? total : 1);
    ZT_REQUIRE(buf != NULL);
    memset(buf, 0xA5, total);
    for (size_t b = 0; b < chunk; b++)
        buf[(size_t)g_rank * chunk + b] = (unsigned char)(b * 31 + (size_t)g_rank * 7 + 1);
    zs_comm_stats before;
    zs__comm_stats(comm, &before);
    ZT_OK(zs__comm_all_gather(comm, buf, count, dtype, "gather"));
    check_delta("all_gather", &before, comm, ZS_COMM_ALL_GATHER, ring_bytes(count, esize));
    size_t bad = 0;
    for (int r = 0; r < g_size; r++)
        for (size_t b = 0; b < chunk; b++)
            bad += buf[(size_t)r * chunk + b] != (unsigned char)(b * 31 + (size_t)r * 7 + 1);
    ZT_CHECK_MSG(bad == 0, "all_gather of %zu %s elements: %zu wrong bytes", count,
                 zs_dtype_name(dtype), bad);
    free(buf);
}

/* All-reduce of exact data is exact everywhere; on rough data it equals
 * reduce_scatter + all_gather bit for bit, and every rank holds the same bits. */
static void check_all_reduce(zs__comm *comm, size_t count) {
    size_t total = count * (size_t)g_size;
    float *a = alloc_floats(total), *b = alloc_floats(total), *root = alloc_floats(total);

    fill(a, total, exact_value);
    zs_comm_stats before;
    zs__comm_stats(comm, &before);
    ZT_OK(zs__comm_all_reduce(comm, a, count, ZS_DTYPE_FP32, "exact"));
    check_delta("all_reduce", &before, comm, ZS_COMM_ALL_REDUCE,
                2 * ring_bytes(count, sizeof(float)));
    size_t bad = 0;
    for (size_t i = 0; i < total; i++) {
        double ref = 0;
        for (int r = 0; r < g_size; r++) ref += exact_value(r, i);
        bad += a[i] != (float)ref;
    }
    ZT_CHECK_MSG(bad == 0, "all_reduce of %zu: %zu wrong sums", count, bad);

    fill(a, total, rough_value);
    fill(b, total, rough_value);
    ZT_OK(zs__comm_all_reduce(comm, a, count, ZS_DTYPE_FP32, "rough"));
    ZT_OK(zs__comm_reduce_scatter(comm, b, count, ZS_DTYPE_FP32, "rough"));
    ZT_OK(zs__comm_all_gather(comm, b, count, ZS_DTYPE_FP32, "rough"));
    ZT_CHECK_MSG(memcmp(a, b, total * sizeof(float)) == 0,
                 "all_reduce differs from reduce_scatter + all_gather (count %zu)", count);

    memcpy(root, a, total * sizeof(float));
    MPI_Bcast(root, (int)(total * sizeof(float)), MPI_BYTE, 0, MPI_COMM_WORLD);
    ZT_CHECK_MSG(memcmp(a, root, total * sizeof(float)) == 0,
                 "all_reduce result differs from rank 0's (count %zu)", count);
    free(a);
    free(b);
    free(root);
}

/* Two reduce-scatters of the same rough data give the same bits. */
static void check_determinism(zs__comm *comm, size_t count) {
    size_t total = count * (size_t)g_size, own = (size_t)g_rank * count;
    float *a = alloc_floats(total), *b = alloc_floats(total);
    fill(a, total, rough_value);
    fill(b, total, rough_value);
    ZT_OK(zs__comm_reduce_scatter(comm, a, count, ZS_DTYPE_FP32, "first"));
    ZT_OK(zs__comm_reduce_scatter(comm, b, count, ZS_DTYPE_FP32, "second"));
    ZT_CHECK_MSG(memcmp(a + own, b + own, count * sizeof(float)) == 0,
                 "two reduce-scatters of the same data differ (count %zu)", count);
    free(a);
    free(b);
}

/* Ring and MPI agree on exact data bit for bit, and on rough data within
 * 1e-6 relative (they may add in different orders). Returns whether the rough
 * results were also bitwise identical, for the log. */
static int compare_impls(zs__comm *ring, zs__comm *mpi, size_t count) {
    size_t total = count * (size_t)g_size, own = (size_t)g_rank * count;
    float *a = alloc_floats(total), *b = alloc_floats(total);
    fill(a, total, exact_value);
    fill(b, total, exact_value);
    ZT_OK(zs__comm_reduce_scatter(ring, a, count, ZS_DTYPE_FP32, "ring"));
    ZT_OK(zs__comm_reduce_scatter(mpi, b, count, ZS_DTYPE_FP32, "mpi"));
    ZT_CHECK_MSG(memcmp(a + own, b + own, count * sizeof(float)) == 0,
                 "ring and mpi differ on exactly summable data (count %zu)", count);

    fill(a, total, rough_value);
    fill(b, total, rough_value);
    ZT_OK(zs__comm_reduce_scatter(ring, a, count, ZS_DTYPE_FP32, "ring"));
    ZT_OK(zs__comm_reduce_scatter(mpi, b, count, ZS_DTYPE_FP32, "mpi"));
    double worst = 0;
    for (size_t i = own; i < own + count; i++) {
        double rel = fabs((double)a[i] - (double)b[i]) / fabs((double)b[i]);
        if (rel > worst) worst = rel;
    }
    ZT_CHECK_MSG(worst <= 1e-6, "ring and mpi differ by %g relative (count %zu)", worst, count);
    int same = memcmp(a + own, b + own, count * sizeof(float)) == 0;
    free(a);
    free(b);
    return same;
}

/* ------------------------------------------------------ fp16 and bf16 sums */

static uint16_t to_half(zs_dtype dtype, float value) {
    return dtype == ZS_DTYPE_FP16 ? zs_k_fp32_to_fp16(value) : zs_k_fp32_to_bf16(value);
}

static float from_half(zs_dtype dtype, uint16_t bits) {
    return dtype == ZS_DTYPE_FP16 ? zs_k_fp16_to_fp32(bits) : zs_k_bf16_to_fp32(bits);
}

/* What one hop of the ring does to an element: widen, add in fp32, round. */
static uint16_t half_add(zs_dtype dtype, uint16_t a, uint16_t b) {
    return to_half(dtype, from_half(dtype, a) + from_half(dtype, b));
}

static uint16_t *alloc_halves(size_t n) {
    uint16_t *p = malloc((n ? n : 1) * sizeof(uint16_t));
    ZT_REQUIRE(p != NULL);
    return p;
}

/* exact_value's integers, and every sixth element scaled far down, into the
 * dtype's subnormals (fp16: below 2^-14; bf16: below 2^-126), where the
 * conversions take their rarest paths. Partial sums stay within 6
 * significant bits, so every order and every rounding is exact. */
static uint16_t half_exact(zs_dtype dtype, int rank, size_t i) {
    float v = exact_value(rank, i); /* an integer in [-8, 8] times 2^-(i%5) */
    if (i % 6 == 5) v = ldexpf((float)((int)((i * 7 + (size_t)rank * 13) % 17) - 8),
                               dtype == ZS_DTYPE_FP16 ? -20 : -130);
    return to_half(dtype, v);
}

static double half_exact_sum(zs_dtype dtype, size_t i) {
    double sum = 0;
    for (int r = 0; r < g_size; r++) sum += from_half(dtype, half_exact(dtype, r, i));
    return sum;
}

/* rough_value rounded to the dtype: sums of these round at every hop. */
static uint16_t half_rough(zs_dtype dtype, int rank, size_t i) {
    return to_half(dtype, rough_value(rank, i));
}

static void fill_halves(uint16_t *buf, size_t total, zs_dtype dtype,
                        uint16_t (*value)(zs_dtype, int, size_t)) {
    for (size_t i = 0; i < total; i++) buf[i] = value(dtype, g_rank, i);
}

/* The spacing of the dtype's values at positive x (normal range). */
static double half_ulp(zs_dtype dtype, double x) {
    int e = 0;
    frexp(x, &e); /* x = m * 2^e, m in [0.5, 1) */
    return ldexp(1.0, e - (dtype == ZS_DTYPE_FP16 ? 11 : 8));
}

/* Exact data: reduce-scatter and all-reduce give the exact sum, bit for bit,
 * and count bytes of the dtype's size; ring and mpi agree. */
static void check_half_exact(zs__comm *comm, zs__comm *other, size_t count, zs_dtype dtype) {
    const char *name = zs_dtype_name(dtype);
    size_t total = count * (size_t)g_size, own = (size_t)g_rank * count;
    uint16_t *a = alloc_halves(total), *b = alloc_halves(total);
    fill_halves(a, total, dtype, half_exact);
    fill_halves(b, total, dtype, half_exact);
    zs_comm_stats before;
    zs__comm_stats(comm, &before);
    ZT_OK(zs__comm_reduce_scatter(comm, a, count, dtype, "exact"));
    check_delta("reduce_scatter", &before, comm, ZS_COMM_REDUCE_SCATTER,
                ring_bytes(count, sizeof(uint16_t)));
    ZT_OK(zs__comm_reduce_scatter(other, b, count, dtype, "exact"));
    size_t bad = 0, first = 0;
    for (size_t i = own; i < own + count; i++)
        if (a[i] != to_half(dtype, (float)half_exact_sum(dtype, i)) && bad++ == 0) first = i;
    ZT_CHECK_MSG(bad == 0, "%s count %zu: %zu wrong sums, first at element %zu: got %g (0x%04x), "
                 "want %g", name, count, bad, first, (double)from_half(dtype, a[first]),
                 (unsigned)a[first], half_exact_sum(dtype, first));
    ZT_CHECK_MSG(memcmp(a + own, b + own, count * sizeof(uint16_t)) == 0,
                 "%s: ring and mpi differ on exactly summable data (count %zu)", name, count);

    fill_halves(a, total, dtype, half_exact);
    zs__comm_stats(comm, &before);
    ZT_OK(zs__comm_all_reduce(comm, a, count, dtype, "exact"));
    check_delta("all_reduce", &before, comm, ZS_COMM_ALL_REDUCE,
                2 * ring_bytes(count, sizeof(uint16_t)));
    bad = 0;
    for (size_t i = 0; i < total; i++)
        bad += a[i] != to_half(dtype, (float)half_exact_sum(dtype, i));
    ZT_CHECK_MSG(bad == 0, "%s all_reduce of %zu: %zu wrong sums", name, count, bad);
    free(a);
    free(b);
}

/* Rough data, where every hop rounds: the ring matches a simulation of its
 * own hop order bit for bit (chunk c is summed c+1, c+2, ..., c, rounding
 * after each add); both implementations are within half an ulp per hop of
 * the exact sum (round to nearest; the data is positive, so no partial sum
 * has a larger ulp than the result); two calls agree bit for bit; all_reduce equals reduce_scatter +
 * all_gather bit for bit and is the same on every rank. */
static void check_half_rough(zs__comm *comm, zs__comm_impl impl, size_t count, zs_dtype dtype) {
    const char *name = zs_dtype_name(dtype);
    size_t total = count * (size_t)g_size, own = (size_t)g_rank * count;
    uint16_t *a = alloc_halves(total), *b = alloc_halves(total), *root = alloc_halves(total);
    fill_halves(a, total, dtype, half_rough);
    fill_halves(b, total, dtype, half_rough);
    ZT_OK(zs__comm_reduce_scatter(comm, a, count, dtype, "first"));
    ZT_OK(zs__comm_reduce_scatter(comm, b, count, dtype, "second"));
    ZT_CHECK_MSG(memcmp(a + own, b + own, count * sizeof(uint16_t)) == 0,
                 "%s: two reduce-scatters of the same data differ (count %zu)", name, count);

    size_t off_ring = 0, off_bound = 0, first_ring = 0, first_bound = 0, rounded = 0;
    double worst = 0;
    for (size_t i = own; i < own + count; i++) {
        const int c = g_rank;
        uint16_t acc = half_rough(dtype, (c + 1) % g_size, i);
        for (int k = 2; k <= g_size; k++)
            acc = half_add(dtype, half_rough(dtype, (c + k) % g_size, i), acc);
        if (impl == ZS_COMM_IMPL_RING && a[i] != acc && off_ring++ == 0) first_ring = i;

        double exact = 0;
        for (int r = 0; r < g_size; r++) exact += from_half(dtype, half_rough(dtype, r, i));
        double got = from_half(dtype, a[i]), err = fabs(got - exact);
        double ulp = fmax(half_ulp(dtype, got), half_ulp(dtype, exact));
        rounded += err != 0;
        if (err / ulp > worst) worst = err / ulp;
        if (err > 0.5 * (g_size - 1) * ulp && off_bound++ == 0) first_bound = i;
    }
    ZT_CHECK_MSG(off_ring == 0, "%s ring count %zu: %zu sums differ from the hop-order "
                 "simulation, first at element %zu", name, count, off_ring, first_ring);
    ZT_CHECK_MSG(off_bound == 0, "%s count %zu: %zu sums further than %g ulp from the exact "
                 "sum, first at element %zu (worst %.2f ulp)", name, count, off_bound,
                 0.5 * (g_size - 1), first_bound, worst);
    /* With 1000 elements and 2+ ranks some sums must round, or the data
     * would not test the rounding at all. */
    if (g_size > 1 && count >= 1000)
        ZT_CHECK_MSG(rounded > 0, "%s count %zu: no sum rounded; the rough data is too tame",
                     name, count);

    fill_halves(a, total, dtype, half_rough);
    fill_halves(b, total, dtype, half_rough);
    ZT_OK(zs__comm_all_reduce(comm, a, count, dtype, "rough"));
    ZT_OK(zs__comm_reduce_scatter(comm, b, count, dtype, "rough"));
    ZT_OK(zs__comm_all_gather(comm, b, count, dtype, "rough"));
    ZT_CHECK_MSG(memcmp(a, b, total * sizeof(uint16_t)) == 0,
                 "%s: all_reduce differs from reduce_scatter + all_gather (count %zu)", name,
                 count);
    memcpy(root, a, total * sizeof(uint16_t));
    MPI_Bcast(root, (int)(total * sizeof(uint16_t)), MPI_BYTE, 0, MPI_COMM_WORLD);
    ZT_CHECK_MSG(memcmp(a, root, total * sizeof(uint16_t)) == 0,
                 "%s: all_reduce result differs from rank 0's (count %zu)", name, count);
    free(a);
    free(b);
    free(root);
}

/* Overflow, infinities and NaNs, six elements per chunk, each rank's
 * contribution by slot:
 *   0: big from every rank          -> +inf from 2 ranks on (fp16: 40000 each)
 *   1: -big from every rank         -> -inf
 *   2: NaN on rank 0, 1 elsewhere   -> NaN
 *   3: +inf on rank 0, -inf on 1    -> NaN from 2 ranks on
 *   4: the largest finite on rank 0 -> itself (no false overflow)
 *   5: largest on rank 0, half its ulp on rank 1 -> +inf (the tie rounds to even, up)
 * A loss scaler relies on exactly this: overflow is an infinity, never a
 * saturated or wrapped value, and a NaN anywhere stays a NaN. */
static uint16_t special_value(zs_dtype dtype, int rank, size_t i) {
    const int fp16 = dtype == ZS_DTYPE_FP16;
    const float big = fp16 ? 40000.0f : ldexpf(1.0f, 127);
    const uint16_t largest = fp16 ? 0x7bffu : 0x7f7fu, nan = fp16 ? 0x7e00u : 0x7fc0u;
    const uint16_t inf = fp16 ? 0x7c00u : 0x7f80u;
    switch (i % 6) {
    case 0: return to_half(dtype, big);
    case 1: return to_half(dtype, -big);
    case 2: return rank == 0 ? nan : to_half(dtype, 1.0f);
    case 3: return rank == 0 ? inf : rank == 1 ? (uint16_t)(inf | 0x8000u) : 0;
    case 4: return rank == 0 ? largest : 0;
    default:
        return rank == 0 ? largest
               : rank == 1 ? to_half(dtype, fp16 ? 16.0f : ldexpf(1.0f, 119))
                           : 0;
    }
}

static void check_half_specials(zs__comm *comm, zs_dtype dtype) {
    const char *name = zs_dtype_name(dtype);
    const int fp16 = dtype == ZS_DTYPE_FP16, many = g_size > 1;
    const uint16_t inf = fp16 ? 0x7c00u : 0x7f80u, largest = fp16 ? 0x7bffu : 0x7f7fu;
    const size_t count = 12, total = count * (size_t)g_size;
    uint16_t *buf = alloc_halves(total);
    for (int pass = 0; pass < 2; pass++) {
        /* Pass 0 reduce-scatters (the owned chunk is final), pass 1
         * all-reduces (every chunk is). */
        fill_halves(buf, total, dtype, special_value);
        if (pass == 0) ZT_OK(zs__comm_reduce_scatter(comm, buf, count, dtype, "specials"));
        else ZT_OK(zs__comm_all_reduce(comm, buf, count, dtype, "specials"));
        size_t lo = pass == 0 ? (size_t)g_rank * count : 0;
        size_t hi = pass == 0 ? lo + count : total;
        for (size_t i = lo; i < hi; i++) {
            const uint16_t got = buf[i];
            const int is_nan = isnan(from_half(dtype, got));
            uint16_t want = 0;
            int want_nan = 0;
            switch (i % 6) {
            case 0: want = many ? inf : special_value(dtype, 0, i); break;
            case 1: want = many ? (uint16_t)(inf | 0x8000u) : special_value(dtype, 0, i); break;
            case 2: want_nan = 1; break;
            case 3: want_nan = many; want = inf; break;
            case 4: want = largest; break;
            default: want = many ? inf : largest; break;
            }
            if (want_nan)
                ZT_CHECK_MSG(is_nan, "%s %s, element %zu (slot %zu): got 0x%04x (%g), want a NaN",
                             name, pass ? "all_reduce" : "reduce_scatter", i, i % 6,
                             (unsigned)got, (double)from_half(dtype, got));
            else
                ZT_CHECK_MSG(got == want, "%s %s, element %zu (slot %zu): got 0x%04x (%g), "
                             "want 0x%04x (%g)", name, pass ? "all_reduce" : "reduce_scatter", i,
                             i % 6, (unsigned)got, (double)from_half(dtype, got), (unsigned)want,
                             (double)from_half(dtype, want));
        }
    }
    free(buf);
}

static void check_small_collectives(zs__comm *comm, size_t segment) {
    zs_comm_stats before;

    /* Scalars: sum and max of exact values. */
    double v[3] = {g_rank + 1.0, -g_rank * 0.5, 2.0};
    zs__comm_stats(comm, &before);
    ZT_OK(zs__comm_all_reduce_scalars(comm, v, 3, ZS_REDUCE_SUM, "sum"));
    check_delta("all_reduce_scalars", &before, comm, ZS_COMM_ALL_REDUCE,
                2 * (uint64_t)(g_size - 1) * 3 * 8 / (uint64_t)g_size);
    double n = g_size;
    ZT_CHECK(v[0] == n * (n + 1) / 2 && v[1] == -0.25 * n * (n - 1) && v[2] == 2.0 * n);
    double m[2] = {(double)g_rank, -(double)g_rank};
    ZT_OK(zs__comm_all_reduce_scalars(comm, m, 2, ZS_REDUCE_MAX, "max"));
    ZT_CHECK(m[0] == g_size - 1 && m[1] == 0.0);

    /* Bytes from every rank, more than one segment so the pieces path runs. */
    size_t bytes = segment + 999;
    unsigned char *mine = malloc(bytes), *all = malloc(bytes * (size_t)g_size);
    ZT_REQUIRE(mine && all);
    for (size_t b = 0; b < bytes; b++) mine[b] = (unsigned char)(b + (size_t)g_rank * 3);
    zs__comm_stats(comm, &before);
    ZT_OK(zs__comm_all_gather_bytes(comm, mine, bytes, all, "bytes"));
    check_delta("all_gather_bytes", &before, comm, ZS_COMM_ALL_GATHER,
                (uint64_t)(g_size - 1) * bytes);
    size_t bad = 0;
    for (int r = 0; r < g_size; r++)
        for (size_t b = 0; b < bytes; b++)
            bad += all[(size_t)r * bytes + b] != (unsigned char)(b + (size_t)r * 3);
    ZT_CHECK_MSG(bad == 0, "all_gather_bytes: %zu wrong bytes", bad);

    /* Broadcast from the last rank, longer than a segment. */
    int root = g_size - 1;
    for (size_t b = 0; b < bytes; b++)
        mine[b] = g_rank == root ? (unsigned char)(b * 5 + 3) : 0;
    zs__comm_stats(comm, &before);
    ZT_OK(zs__comm_broadcast(comm, mine, bytes, root, "bcast"));
    check_delta("broadcast", &before, comm, ZS_COMM_BROADCAST,
                g_rank == root && g_size > 1 ? bytes : 0);
    bad = 0;
    for (size_t b = 0; b < bytes; b++) bad += mine[b] != (unsigned char)(b * 5 + 3);
    ZT_CHECK_MSG(bad == 0, "broadcast: %zu wrong bytes", bad);
    free(mine);
    free(all);

    zs__comm_stats(comm, &before);
    ZT_OK(zs__comm_barrier(comm, "barrier"));
    check_delta("barrier", &before, comm, ZS_COMM_BARRIER, 0);

    /* Zero elements: counted, nothing moved. */
    zs__comm_stats(comm, &before);
    ZT_OK(zs__comm_reduce_scatter(comm, NULL, 0, ZS_DTYPE_FP32, "empty"));
    check_delta("empty reduce_scatter", &before, comm, ZS_COMM_REDUCE_SCATTER, 0);

    /* An unknown dtype is refused before anything moves or is counted. */
    uint16_t half[8] = {0};
    zs__comm_stats(comm, &before);
    ZT_FAILS_WITH(zs__comm_reduce_scatter(comm, half, 1, (zs_dtype)7, "grads"),
                  ZS_ERR_INVALID_ARGUMENT, "unknown dtype 7");
    ZT_FAILS_WITH(zs__comm_all_reduce(comm, half, 1, (zs_dtype)-1, "grads"),
                  ZS_ERR_INVALID_ARGUMENT, "unknown dtype");
    zs_comm_stats after;
    zs__comm_stats(comm, &after);
    ZT_CHECK(memcmp(&before, &after, sizeof before) == 0);
}

static zs__comm *create(zs__comm_impl impl, int64_t segment, zs__mem *mem) {
    zs__settings settings;
    memset(&settings, 0, sizeof settings);
    settings.comm.reduce_scatter = impl;
    settings.comm.all_gather = impl;
    settings.comm.segment_bytes = segment;
    settings.comm.timeout_s = 600;
    zs__comm *comm = NULL;
    ZT_OK(zs__comm_create_mpi(MPI_COMM_WORLD, &settings, mem, &comm));
    ZT_REQUIRE(comm != NULL);
    ZT_EQ_INT(zs__comm_rank(comm), g_rank);
    ZT_EQ_INT(zs__comm_size(comm), g_size);
    /* The staging buffer is exactly the configured segment (none at size 1). */
    ZT_EQ_U64(mem->current[ZS_MEM_COMM], g_size > 1 ? (uint64_t)segment : 0);
    return comm;
}

/* The ring adds through the backend's SIMD accumulate when the runtime sets
 * one (zs__comm_use_backend): the sums must be the portable loop's, bit for
 * bit, for every dtype, on rough data where every hop rounds. */
static void check_backend_add(zs__comm_impl impl, size_t count) {
    zs__mem mem[3];
    memset(mem, 0, sizeof mem);
    zs__backend *be = NULL;
    ZT_OK(zs__cpu_backend_create(&mem[0], &be));
    zs__comm *portable = create(impl, 12345, &mem[1]);
    zs__comm *simd = create(impl, 12345, &mem[2]);
    zs__comm_use_backend(simd, be);
    const size_t total = count * (size_t)g_size;
    for (int h = 0; h < 2; h++) {
        const zs_dtype half = h == 0 ? ZS_DTYPE_FP16 : ZS_DTYPE_BF16;
        uint16_t *a = alloc_halves(total), *b = alloc_halves(total);
        fill_halves(a, total, half, half_rough);
        memcpy(b, a, total * sizeof *a);
        ZT_OK(zs__comm_reduce_scatter(portable, a, count, half, "portable add"));
        ZT_OK(zs__comm_reduce_scatter(simd, b, count, half, "backend add"));
        ZT_CHECK_MSG(memcmp(a + (size_t)g_rank * count, b + (size_t)g_rank * count,
                            count * sizeof *a) == 0,
                     "%s sums through the backend differ from the portable loop",
                     zs_dtype_name(half));
        free(a);
        free(b);
    }
    float *x = alloc_floats(total), *y = alloc_floats(total);
    fill(x, total, rough_value);
    memcpy(y, x, total * sizeof *x);
    ZT_OK(zs__comm_reduce_scatter(portable, x, count, ZS_DTYPE_FP32, "portable add"));
    ZT_OK(zs__comm_reduce_scatter(simd, y, count, ZS_DTYPE_FP32, "backend add"));
    ZT_CHECK_MSG(memcmp(x + (size_t)g_rank * count, y + (size_t)g_rank * count,
                        count * sizeof *x) == 0,
                 "fp32 sums through the backend differ from the portable loop");
    free(x);
    free(y);
    zs__comm_destroy(portable);
    zs__comm_destroy(simd);
    zs__backend_destroy(be);
}

/* Collectives through host staging of `staging` bytes equal the unstaged
 * ones bit for bit, for every collective and dtype, with counts that fill
 * many pieces and a last short one. */
static void check_staged(zs__comm_impl impl, size_t staging, size_t count) {
    zs__mem mem[3];
    memset(mem, 0, sizeof mem);
    zs__backend *be = NULL;
    ZT_OK(zs__cpu_backend_create(&mem[0], &be));
    zs__comm *plain = create(impl, 4096, &mem[1]);
    zs__comm *staged = create(impl, 4096, &mem[2]);
    zs__comm_use_backend(plain, be);
    ZT_OK(zs__comm_stage_through(staged, be, staging));
    /* The staging is the backend's allocation, charged to its accountant
     * (one and the same in the runtime). */
    ZT_EQ_U64(mem[2].current[ZS_MEM_COMM], g_size > 1 ? 4096 : 0);
    ZT_EQ_U64(mem[0].current[ZS_MEM_COMM], g_size > 1 ? (uint64_t)staging : 0);
    const size_t total = count * (size_t)g_size;
    for (int d = 0; d < 3; d++) {
        const zs_dtype dtype = d == 0 ? ZS_DTYPE_FP32 : d == 1 ? ZS_DTYPE_FP16 : ZS_DTYPE_BF16;
        const size_t esize = zs_dtype_size(dtype);
        unsigned char *a = malloc(total * esize), *b = malloc(total * esize);
        ZT_REQUIRE(a && b);
        for (int op = 0; op < 3; op++) {
            if (dtype == ZS_DTYPE_FP32) fill((float *)a, total, rough_value);
            else fill_halves((uint16_t *)a, total, dtype, half_rough);
            memcpy(b, a, total * esize);
            const char *name = op == 0 ? "reduce_scatter" : op == 1 ? "all_gather" : "all_reduce";
            if (op == 0) {
                ZT_OK(zs__comm_reduce_scatter(plain, a, count, dtype, "unstaged"));
                ZT_OK(zs__comm_reduce_scatter(staged, b, count, dtype, "staged"));
            } else if (op == 1) {
                ZT_OK(zs__comm_all_gather(plain, a, count, dtype, "unstaged"));
                ZT_OK(zs__comm_all_gather(staged, b, count, dtype, "staged"));
            } else {
                ZT_OK(zs__comm_all_reduce(plain, a, count, dtype, "unstaged"));
                ZT_OK(zs__comm_all_reduce(staged, b, count, dtype, "staged"));
            }
            /* reduce-scatter: only this rank's chunk is defined. */
            const size_t from = op == 0 ? (size_t)g_rank * count * esize : 0;
            const size_t bytes = op == 0 ? count * esize : total * esize;
            ZT_CHECK_MSG(memcmp(a + from, b + from, bytes) == 0,
                         "%s of %zu %s elements through %zu bytes of staging differs from the "
                         "unstaged one", name, count, zs_dtype_name(dtype), staging);
        }
        free(a);
        free(b);
    }
    zs__comm_destroy(plain);
    zs__comm_destroy(staged);
    ZT_EQ_U64(mem[2].current[ZS_MEM_COMM], 0);
    ZT_EQ_U64(mem[0].current[ZS_MEM_COMM], 0);
    /* Too small for one element per rank: refused alike on every rank. */
    if (g_size > 1) {
        zs__comm *tiny = create(impl, 4096, &mem[2]);
        ZT_FAILS_WITH(zs__comm_stage_through(tiny, be, (size_t)g_size * 4 - 1), ZS_ERR_CONFIG,
                      "comm.staging_bytes");
        zs__comm_destroy(tiny);
    }
    zs__backend_destroy(be);
}

/* The threshold rule of comm.all_gather = "auto", on made-up timings. */
static void check_threshold_rule(void) {
    const size_t sizes[4] = {1024, 65536, 1u << 20, 16u << 20};
    const double ring[4] = {1.0, 2.0, 4.0, 8.0};
    const double faster[4] = {2.0, 2.5, 3.0, 6.0};  /* MPI's wins from 1 MiB on */
    ZT_EQ_U64(zs__comm_all_gather_threshold(sizes, ring, faster, 4), 1u << 20);
    const double gap[4] = {0.5, 1.0, 9.0, 6.0};     /* wins below, loses at 1 MiB: only the top */
    ZT_EQ_U64(zs__comm_all_gather_threshold(sizes, ring, gap, 4), 16u << 20);
    const double slower[4] = {2.0, 3.0, 5.0, 9.0};  /* never */
    ZT_EQ_U64(zs__comm_all_gather_threshold(sizes, ring, slower, 4), SIZE_MAX);
    const double always[4] = {0.5, 1.0, 2.0, 4.0};
    ZT_EQ_U64(zs__comm_all_gather_threshold(sizes, ring, always, 4), 1024);
    const double near[4] = {0.5, 1.0, 2.0, 7.9};    /* within the 5% margin at the top */
    ZT_EQ_U64(zs__comm_all_gather_threshold(sizes, ring, near, 4), SIZE_MAX);
}

/* A measurement: every rank ends with the same threshold, marked measured,
 * and all-gathers afterwards still deliver every rank's chunk. */
static void check_all_gather_measure(void) {
    zs__mem mem;
    memset(&mem, 0, sizeof mem);
    zs__settings settings;
    memset(&settings, 0, sizeof settings);
    settings.comm.reduce_scatter = ZS_COMM_IMPL_RING;
    settings.comm.all_gather = ZS_COMM_IMPL_AUTO;
    settings.comm.segment_bytes = 4096;
    settings.comm.timeout_s = 600;
    zs__comm *comm = NULL;
    ZT_OK(zs__comm_create_mpi(MPI_COMM_WORLD, &settings, &mem, &comm));
    const size_t sizes[3] = {64, 4096, 1u << 16};
    float *buf = alloc_floats((size_t)g_size * (1u << 14));
    ZT_OK(zs__comm_all_gather_measure(comm, buf, sizes, 3));
    int measured = 0;
    const size_t from = zs__comm_all_gather_mpi_from(comm, &measured);
    ZT_EQ_INT(measured, g_size > 1);
    unsigned long long mine = (unsigned long long)from, lowest = 0, highest = 0;
    MPI_Allreduce(&mine, &lowest, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&mine, &highest, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    ZT_CHECK_MSG(lowest == highest, "ranks chose different all-gather thresholds (%llu .. %llu)",
                 lowest, highest);
    ZT_CHECK(from == SIZE_MAX || from == 64 || from == 4096 || from == (1u << 16));
    for (size_t c = 1; c <= (1u << 14); c *= 32) check_all_gather(comm, c, ZS_DTYPE_FP32);
    free(buf);
    zs__comm_destroy(comm);
}

int main(int argc, char **argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    zt_rank = g_rank;
    ZT_REQUIRE(argc == 2 && (strcmp(argv[1], "ring") == 0 || strcmp(argv[1], "mpi") == 0));
    const zs__comm_impl impl = strcmp(argv[1], "ring") == 0 ? ZS_COMM_IMPL_RING : ZS_COMM_IMPL_MPI;
    const zs__comm_impl other = impl == ZS_COMM_IMPL_RING ? ZS_COMM_IMPL_MPI : ZS_COMM_IMPL_RING;

    /* The smallest segment the config allows, and an odd one that is not a
     * multiple of the alignment or of the rank count, to exercise the edges
     * of the segmentation. 5000 and 1000003 elements span many segments. */
    const int64_t segments[] = {4096, 12345};
    const size_t counts[] = {1, 7, 1000, 5000, 1000003};
    int identical = 1;
    for (size_t s = 0; s < sizeof segments / sizeof segments[0]; s++) {
        zs__mem mem, other_mem;
        memset(&mem, 0, sizeof mem);
        memset(&other_mem, 0, sizeof other_mem);
        zs__comm *comm = create(impl, segments[s], &mem);
        zs__comm *cmp = create(other, segments[s], &other_mem);
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            check_reduce_scatter_exact(comm, counts[c]);
            check_all_gather(comm, counts[c], ZS_DTYPE_FP32);
            check_all_gather(comm, counts[c], ZS_DTYPE_FP16);
            check_all_reduce(comm, counts[c]);
            check_determinism(comm, counts[c]);
            identical &= impl == ZS_COMM_IMPL_RING ? compare_impls(comm, cmp, counts[c])
                                                   : compare_impls(cmp, comm, counts[c]);
            for (int h = 0; h < 2; h++) {
                const zs_dtype half = h == 0 ? ZS_DTYPE_FP16 : ZS_DTYPE_BF16;
                check_half_exact(comm, cmp, counts[c], half);
                check_half_rough(comm, impl, counts[c], half);
            }
        }
        check_half_specials(comm, ZS_DTYPE_FP16);
        check_half_specials(comm, ZS_DTYPE_BF16);
        check_small_collectives(comm, (size_t)segments[s]);
        ZT_EQ_U64(mem.current[ZS_MEM_COMM], g_size > 1 ? (uint64_t)segments[s] : 0);
        zs__comm_destroy(comm);
        zs__comm_destroy(cmp);
        ZT_EQ_U64(mem.current[ZS_MEM_COMM], 0);
        ZT_EQ_U64(other_mem.current[ZS_MEM_COMM], 0);
    }
    zs__comm_destroy(NULL);
    check_backend_add(impl, 1000003);
    check_backend_add(impl, 7);
    /* Pieces of 1, 2 and 61 elements per rank and chunk (staging of
     * g_size * 4, 64 and 1000 bytes at g_size <= 4). */
    check_staged(impl, (size_t)g_size * 4, 7);
    check_staged(impl, 64, 1000);
    check_staged(impl, 1000, 5000);
    check_threshold_rule();
    check_all_gather_measure();

    /* Settings the communicator cannot honour fail on every rank alike. */
    zs__mem mem;
    memset(&mem, 0, sizeof mem);
    zs__settings bad;
    memset(&bad, 0, sizeof bad);
    bad.comm.reduce_scatter = impl;
    bad.comm.segment_bytes = 16;
    bad.comm.timeout_s = 600;
    zs__comm *never = NULL;
    ZT_FAILS_WITH(zs__comm_create_mpi(MPI_COMM_WORLD, &bad, &mem, &never), ZS_ERR_CONFIG,
                  "comm.segment_bytes");
    ZT_CHECK(never == NULL);
    ZT_EQ_U64(mem.current[ZS_MEM_COMM], 0);

    if (g_rank == 0)
        fprintf(stderr, "test_comm %s on %d ranks: ring and mpi reduce-scatter are %s on rough data\n",
                argv[1], g_size, identical ? "bitwise identical" : "not bitwise identical");
    int failed = zt_finish("test_comm");
    MPI_Finalize();
    return failed;
}
