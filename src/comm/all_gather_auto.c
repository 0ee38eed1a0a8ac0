/* comm.all_gather = "auto": which all-gather algorithm runs at which message
 * size, measured once on the model's own message sizes (comm.h).
 *
 * Why measure: on one node Open MPI's MPI_Allgather beat our ring by
 * 1.27-1.38x at 64 MiB and more, the ring was as fast or faster below
 * (bench/comm), and across a network the order can flip. The choice cannot
 * change results, because an all-gather moves bits without arithmetic; it
 * must only be the same on every rank, so that every rank runs the same
 * algorithm (their messages would not match otherwise). Hence each
 * algorithm's time at a size is the slowest rank's (an all-reduce of
 * maxima), and every rank derives the threshold from the same numbers.
 *
 * Reduce-scatter gets no such choice: its algorithm fixes the order of the
 * sums, and a choice by timing would make the bits depend on the machine's
 * mood.
 *
 * The sizes measured are the units' chunks in the compute dtype (zs_build
 * passes them). Stage 0's all-reduces in fp32 (reduce_dtype) and bucketed
 * reductions move other sizes; they get the choice of the nearest measured
 * size below or above, which is an extrapolation, not a measurement.
 *
 * Floor (src/floors.txt): calls the front (comm.c) below it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "comm/wait.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"

/* Each algorithm runs this many times per size, alternating, after one
 * untimed round (first-touch of the buffer, connection set-up); the fastest
 * run counts: noise on a shared machine only ever adds time. */
#define ZS_AG_TRIALS 3
/* MPI's must be faster by this factor to be chosen: the ring is the
 * default whose speed the benchmarks track, and near-ties are noise. */
#define ZS_AG_MARGIN 0.95

size_t zs__comm_all_gather_threshold(const size_t *chunk_bytes, const double *ring_s,
                                     const double *mpi_s, int n) {
    /* From the largest size down, while MPI's wins. */
    size_t from = SIZE_MAX;
    for (int i = n - 1; i >= 0; i--) {
        if (!(mpi_s[i] < ZS_AG_MARGIN * ring_s[i])) break;
        from = chunk_bytes[i];
    }
    return from;
}

/* One timed all-gather with `impl`, between barriers so that every rank
 * starts it together. */
static zs_status timed(zs__comm *comm, void *buf, size_t chunk, zs__comm_impl impl,
                       double *seconds) {
    ZS_CHECK(zs__comm_barrier(comm, "all-gather measurement"));
    const double start = zs__clock_s();
    ZS_CHECK(zs__comm_all_gather_as(comm, buf, chunk / 4, ZS_DTYPE_FP32, impl,
                                    "all-gather measurement"));
    *seconds = zs__clock_s() - start;
    return ZS_OK;
}

zs_status zs__comm_all_gather_measure(zs__comm *comm, void *buf, const size_t *chunk_bytes,
                                      int n) {
    if (comm->all_gather_impl != ZS_COMM_IMPL_AUTO || comm->all_gather_mpi_from != SIZE_MAX ||
        comm->all_gather_measured || comm->size < 2 || n <= 0 ||
        strcmp(comm->ops->name, "mpi") != 0)
        return ZS_OK;
    /* Per size and trial: the ring's time, then MPI's. */
    const size_t values = (size_t)n * ZS_AG_TRIALS * 2;
    double *t = zs__calloc(values, sizeof *t);
    size_t *sizes = zs__calloc((size_t)n, sizeof *sizes);
    double *ring = zs__calloc((size_t)n, sizeof *ring), *mpi = zs__calloc((size_t)n, sizeof *mpi);
    zs_status st = ZS_OK;
    if (!t || !sizes || !ring || !mpi) {
        st = zs__fail(ZS_ERR_OUT_OF_MEMORY, "comm.all_gather = \"auto\": cannot allocate the "
                      "measurement's %d results", n);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        /* Whole fp32 elements; the algorithms move bytes either way. */
        sizes[i] = chunk_bytes[i] - chunk_bytes[i] % 4;
        if (sizes[i] == 0) sizes[i] = 4;
    }
    for (int i = 0; i < n && st == ZS_OK; i++) {
        double ignored;
        st = timed(comm, buf, sizes[i], ZS_COMM_IMPL_RING, &ignored);
        if (st == ZS_OK) st = timed(comm, buf, sizes[i], ZS_COMM_IMPL_MPI, &ignored);
        for (int k = 0; k < ZS_AG_TRIALS && st == ZS_OK; k++) {
            double *slot = &t[((size_t)i * ZS_AG_TRIALS + (size_t)k) * 2];
            st = timed(comm, buf, sizes[i], ZS_COMM_IMPL_RING, &slot[0]);
            if (st == ZS_OK) st = timed(comm, buf, sizes[i], ZS_COMM_IMPL_MPI, &slot[1]);
        }
    }
    if (st == ZS_OK)
        st = zs__comm_all_reduce_scalars(comm, t, (int)values, ZS_REDUCE_MAX,
                                         "all-gather measurement");
    if (st != ZS_OK) goto done;
    for (int i = 0; i < n; i++) {
        ring[i] = mpi[i] = 1e300;
        for (int k = 0; k < ZS_AG_TRIALS; k++) {
            const double *slot = &t[((size_t)i * ZS_AG_TRIALS + (size_t)k) * 2];
            if (slot[0] < ring[i]) ring[i] = slot[0];
            if (slot[1] < mpi[i]) mpi[i] = slot[1];
        }
    }
    comm->all_gather_mpi_from = zs__comm_all_gather_threshold(sizes, ring, mpi, n);
    comm->all_gather_measured = 1;
    if (comm->rank == 0 && zs__log_enabled(ZS_LOG_INFO)) {
        char line[1024], size_text[32];
        int used = 0;
        for (int i = 0; i < n && used < (int)sizeof line; i++)
            used += snprintf(line + used, sizeof line - (size_t)used, "%s%s ring %.3f ms / mpi %.3f ms",
                             i ? ", " : "", zs__bytes_text(size_text, sizeof size_text, (double)sizes[i]),
                             1e3 * ring[i], 1e3 * mpi[i]);
        if (comm->all_gather_mpi_from == SIZE_MAX)
            ZS_INFO("comm.all_gather = \"auto\": the ring at every size (measured per rank on "
                    "%d ranks: %s)", comm->size, line);
        else
            ZS_INFO("comm.all_gather = \"auto\": MPI's all-gather from %s per rank, the ring "
                    "below (measured per rank on %d ranks: %s)",
                    zs__bytes_text(size_text, sizeof size_text,
                                   (double)comm->all_gather_mpi_from),
                    comm->size, line);
    }
done:
    free(t);
    free(sizes);
    free(ring);
    free(mpi);
    return st;
}
