/* Agreement among ranks (agree.h): every rank returns the same status and
 * message after a phase that may fail on some ranks only. A floor above
 * the ground; calls only the comm layer. */
#include "zero/agree.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/alloc.h"
#include "core/error.h"
#include "zero/ground.h"

zs_status zs__agree_u64(zs_ctx *zs, uint64_t value, const char *what, const char *advice) {
    /* Rank 0's value goes to every rank, which compares its own: no memory
     * per rank, so nothing here can fail on one rank only. */
    uint64_t first = value;
    ZS_CHECK(zs__comm_broadcast(zs->comm, &first, sizeof first, 0, what));
    const zs_status local =
        first == value ? ZS_OK
                       : zs__fail(ZS_ERR_MISMATCH, "ranks disagree on the %s: rank %d has %016llx "
                                  "but rank 0 has %016llx; %s", what, zs->rank,
                                  (unsigned long long)value, (unsigned long long)first, advice);
    return zs__agree_status(zs, local, what);
}

/* Room for a shared error message (a failing rank's zs_last_error). */
#define ZS_SHARED_MESSAGE_BYTES 1024

zs_status zs__share_outcome(zs_ctx *zs, zs_status local, int from, const char *what) {
    char message[ZS_SHARED_MESSAGE_BYTES];
    int64_t code = local;
    snprintf(message, sizeof message, "%s", local == ZS_OK ? "" : zs_last_error());
    ZS_CHECK(zs__comm_broadcast(zs->comm, &code, sizeof code, from, what));
    ZS_CHECK(zs__comm_broadcast(zs->comm, message, sizeof message, from, what));
    if (code == ZS_OK) return ZS_OK;
    if (zs->rank == from) return (zs_status)code;
    return zs__fail((zs_status)code, "%s (reported by rank %d)", message, from);
}

zs_status zs__calloc_agreed(zs_ctx *zs, size_t count, size_t size, const char *what,
                            void **out) {
    void *ptr = zs__calloc(count, size);
    const zs_status local =
        ptr ? ZS_OK
            : zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes of host memory on "
                       "rank %d", what, count * size, zs->rank);
    const zs_status agreed = zs__agree_status(zs, local, what);
    if (agreed != ZS_OK) {
        free(ptr);
        ptr = NULL;
    }
    *out = ptr;
    return agreed;
}

zs_status zs__agree_status(zs_ctx *zs, zs_status local, const char *what) {
    /* The maximum of -rank over failing ranks is the lowest failing rank. */
    double key = local == ZS_OK ? -1e300 : -(double)zs->rank;
    ZS_CHECK(zs__comm_all_reduce_scalars(zs->comm, &key, 1, ZS_REDUCE_MAX, what));
    if (key <= -1e299) return ZS_OK;
    return zs__share_outcome(zs, local, (int)(-key), what);
}
