/* zs_all_reduce_host and zs_all_gather_host: a program's own agreements
 * (its losses, flags and reports) under the runtime's deadline. Programs
 * used MPI's blocking collectives on MPI_COMM_WORLD for these, and one
 * stopped rank there hung the job forever, outside comm.timeout_s. These run
 * the runtime's host collectives (comm/mpi_host.c: point-to-point rounds
 * whose every wait has the deadline and knows the peer it waits for) on the
 * context's communicator, so a stopped rank becomes a report that names the
 * collective and the rank.
 *
 * The all-reduce gathers every rank's values and combines them here, in
 * rank order: every rank gets the same bits, integers are exact (a double
 * all-reduce would round an int64 above 2^53), and the collective itself
 * stays the one byte exchange every communicator already has.
 *
 * Floor (src/floors.txt): Public, over the ground's communicator; calls
 * nothing of zero/.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "zero/ground.h"

/* The longest `what`: comm.check_collectives compares labels of 63 bytes. */
#define HOST_WHAT_MAX 63

static size_t type_size(zs_host_type type) {
    switch (type) {
    case ZS_HOST_TYPE_DOUBLE: return sizeof(double);
    case ZS_HOST_TYPE_FLOAT: return sizeof(float);
    case ZS_HOST_TYPE_INT32: return sizeof(int32_t);
    case ZS_HOST_TYPE_INT64: return sizeof(int64_t);
    }
    return 0;
}

static const char *type_name(zs_host_type type) {
    switch (type) {
    case ZS_HOST_TYPE_DOUBLE: return "double";
    case ZS_HOST_TYPE_FLOAT: return "float";
    case ZS_HOST_TYPE_INT32: return "int32";
    case ZS_HOST_TYPE_INT64: return "int64";
    }
    return "unknown";
}

static const char *op_name(zs_reduce_op op) {
    switch (op) {
    case ZS_REDUCE_OP_SUM: return "sum";
    case ZS_REDUCE_OP_MAX: return "max";
    case ZS_REDUCE_OP_MIN: return "min";
    }
    return "unknown";
}

/* Checks what both calls need. The checks are local: a rank that passes a
 * NULL buffer fails here alone and the others wait for it with the deadline,
 * as for any rank that skips a collective; a rank that passes another `what`
 * is found by comm.check_collectives. */
static zs_status check_call(const char *function, const zs_ctx *zs, const char *what) {
    if (!zs) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: the context is NULL", function);
    if (!what)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s on rank %d: `what` is NULL; name the collective (e.g. \"validation "
                        "loss\"): timeout reports and comm.check_collectives show it",
                        function, zs->rank);
    const size_t length = strlen(what);
    if (length == 0 || length > HOST_WHAT_MAX)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s on rank %d: `what` ('%.40s%s') has %zu bytes; name the collective in "
                        "1..%d bytes",
                        function, zs->rank, what, length > 40 ? "..." : "", length,
                        HOST_WHAT_MAX);
    return ZS_OK;
}

/* Folds rank r's values into `acc` (rank 0's, then 1's, ...). A NaN wins a
 * max or a min, as it would a sum: a non-finite loss on one rank must not
 * vanish from the agreed value. */
#define FOLD_FLOATING(T)                                                                   \
    static void fold_##T(T *acc, const T *in, size_t count, zs_reduce_op op) {             \
        for (size_t i = 0; i < count; i++) {                                               \
            const T x = in[i];                                                             \
            if (op == ZS_REDUCE_OP_SUM) acc[i] = acc[i] + x;                               \
            else if (acc[i] != acc[i]) continue;                                           \
            else if (x != x || (op == ZS_REDUCE_OP_MAX ? x > acc[i] : x < acc[i])) acc[i] = x; \
        }                                                                                  \
    }
FOLD_FLOATING(double)
FOLD_FLOATING(float)
#undef FOLD_FLOATING

/* Integers are exact; a sum that leaves the type fails (the same way on
 * every rank, since every rank folds the same values in the same order)
 * instead of wrapping into a plausible wrong count. Returns the index of the
 * overflowing element, or SIZE_MAX. */
#define FOLD_INTEGER(T, LOW, HIGH)                                                         \
    static size_t fold_##T(T *acc, const T *in, size_t count, zs_reduce_op op) {           \
        for (size_t i = 0; i < count; i++) {                                               \
            const T x = in[i];                                                             \
            if (op == ZS_REDUCE_OP_SUM) {                                                  \
                if ((x > 0 && acc[i] > HIGH - x) || (x < 0 && acc[i] < LOW - x)) return i; \
                acc[i] = (T)(acc[i] + x);                                                  \
            } else if (op == ZS_REDUCE_OP_MAX ? x > acc[i] : x < acc[i]) {                 \
                acc[i] = x;                                                                \
            }                                                                              \
        }                                                                                  \
        return SIZE_MAX;                                                                   \
    }
FOLD_INTEGER(int32_t, INT32_MIN, INT32_MAX)
FOLD_INTEGER(int64_t, INT64_MIN, INT64_MAX)
#undef FOLD_INTEGER

/* The fold of every rank's row of `all` in rank order, into row 0; values
 * are written only when it succeeds (an overflow leaves them as they were). */
static zs_status combine(const zs_ctx *zs, void *values, unsigned char *all, size_t count,
                         zs_host_type type, zs_reduce_op op, const char *what) {
    const size_t row = count * type_size(type);
    for (int r = 1; r < zs->world_size; r++) {
        const void *in = all + (size_t)r * row;
        size_t bad = SIZE_MAX;
        switch (type) {
        case ZS_HOST_TYPE_DOUBLE: fold_double((double *)all, in, count, op); break;
        case ZS_HOST_TYPE_FLOAT: fold_float((float *)all, in, count, op); break;
        case ZS_HOST_TYPE_INT32: bad = fold_int32_t((int32_t *)all, in, count, op); break;
        case ZS_HOST_TYPE_INT64: bad = fold_int64_t((int64_t *)all, in, count, op); break;
        }
        if (bad != SIZE_MAX)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "zs_all_reduce_host('%s') on rank %d: the %s sum of element %zu "
                            "overflows when rank %d's value is added; reduce a wider type "
                            "(ZS_HOST_TYPE_INT64 or ZS_HOST_TYPE_DOUBLE)",
                            what, zs->rank, type_name(type), bad, r);
    }
    memcpy(values, all, row);
    return ZS_OK;
}

zs_status zs_all_reduce_host(zs_ctx *zs, void *values, size_t count, zs_host_type type,
                             zs_reduce_op op, const char *what) {
    static const char function[] = "zs_all_reduce_host";
    ZS_CHECK(check_call(function, zs, what));
    const size_t size = type_size(type);
    if (size == 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s('%s') on rank %d: unknown element type %d; use a ZS_HOST_TYPE_* value",
                        function, what, zs->rank, (int)type);
    if (op != ZS_REDUCE_OP_SUM && op != ZS_REDUCE_OP_MAX && op != ZS_REDUCE_OP_MIN)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s('%s') on rank %d: unknown reduction %d; use ZS_REDUCE_OP_SUM, _MAX "
                        "or _MIN",
                        function, what, zs->rank, (int)op);
    size_t bytes = 0, all_bytes = 0;
    if (!zs__mul_size(count, size, &bytes) ||
        !zs__mul_size(bytes, (size_t)zs->world_size, &all_bytes))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s('%s') on rank %d: %zu %s values from each of %d ranks overflow the "
                        "address space",
                        function, what, zs->rank, count, type_name(type), zs->world_size);
    if (count > 0 && !values)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s('%s') on rank %d: values is NULL for %zu %s "
                        "values", function, what, zs->rank, count, type_name(type));
    /* A direct collective: the engine's queue must be empty first. */
    if (zs->engine) ZS_CHECK(zs__engine_drain(zs->engine));
    unsigned char *all = NULL;
    ZS_CHECK(zs__mem_host_alloc(&zs->mem, ZS_MEM_COMM, all_bytes, (void **)&all));
    char described[64];
    snprintf(described, sizeof described, "%zu %s value%s (%s)", count, type_name(type),
             count == 1 ? "" : "s", op_name(op));
    /* Element type and op in the fingerprint, so comm.check_collectives
     * catches ranks that reduce the same name differently. */
    const int kind = 100 + 4 * (int)type + (int)op;
    zs_status st = zs__comm_all_reduce_gathered(zs->comm, values, bytes, all, kind, described, what);
    if (st == ZS_OK && count > 0) st = combine(zs, values, all, count, type, op, what);
    zs__mem_host_free(&zs->mem, ZS_MEM_COMM, all, all_bytes);
    return st;
}

zs_status zs_all_gather_host(zs_ctx *zs, const void *mine, size_t bytes, void *all,
                             const char *what) {
    static const char function[] = "zs_all_gather_host";
    ZS_CHECK(check_call(function, zs, what));
    size_t all_bytes = 0;
    if (!zs__mul_size(bytes, (size_t)zs->world_size, &all_bytes))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s('%s') on rank %d: %zu bytes from each of %d ranks overflow the "
                        "address space",
                        function, what, zs->rank, bytes, zs->world_size);
    if (bytes > 0 && (!mine || !all))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s('%s') on rank %d: %s is NULL for %zu bytes",
                        function, what, zs->rank, !mine ? "mine" : "all", bytes);
    const uintptr_t m = (uintptr_t)mine, a = (uintptr_t)all;
    if (bytes > 0 && m < a + all_bytes && a < m + bytes)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s('%s') on rank %d: mine and all overlap; gather into another buffer",
                        function, what, zs->rank);
    if (zs->engine) ZS_CHECK(zs__engine_drain(zs->engine));
    return zs__comm_all_gather_bytes(zs->comm, mine, bytes, all, what);
}
