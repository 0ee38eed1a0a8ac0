#include "comm/mpi_host.h"

#include <stdio.h>

#include "core/error.h"

zs_status zs__mpi_fail(const zs__comm *comm, const zs__comm_call *call, const char *function,
                       int rc) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error code %d", rc);
    return zs__fail(ZS_ERR_COMM,
                    "%s #%llu of '%s' failed on rank %d: %s: %s; check that every rank made the "
                    "same calls (ZS_LOG_LEVEL=debug logs every collective)",
                    call->op, (unsigned long long)call->seq, call->label, comm->rank, function,
                    text);
}

#define HOST_CHECK(comm, call, function, expr)                                   \
    do {                                                                         \
        int host_check_rc_ = (expr);                                             \
        if (host_check_rc_ != MPI_SUCCESS) {                                     \
            zs__error_breadcrumb(__FILE__, __LINE__);                            \
            return zs__mpi_fail((comm), (call), (function), host_check_rc_);     \
        }                                                                        \
    } while (0)

zs_status zs__mpi_all_gather_pieces(const zs__comm *comm, MPI_Comm mpi, const unsigned char *mine,
                                    unsigned char *all, size_t chunk_bytes, size_t piece,
                                    const zs__comm_call *call) {
    if (chunk_bytes <= piece) {
        HOST_CHECK(comm, call, "MPI_Allgather",
                   MPI_Allgather(mine ? (const void *)mine : MPI_IN_PLACE,
                                 mine ? (int)chunk_bytes : 0, MPI_BYTE, all, (int)chunk_bytes,
                                 MPI_BYTE, mpi));
        return ZS_OK;
    }
    for (size_t off = 0; off < chunk_bytes; off += piece) {
        size_t len = chunk_bytes - off < piece ? chunk_bytes - off : piece;
        MPI_Datatype contiguous, strided;
        HOST_CHECK(comm, call, "MPI_Type_contiguous",
                   MPI_Type_contiguous((int)len, MPI_BYTE, &contiguous));
        int rc = MPI_Type_create_resized(contiguous, 0, (MPI_Aint)chunk_bytes, &strided);
        MPI_Type_free(&contiguous);
        if (rc != MPI_SUCCESS) return zs__mpi_fail(comm, call, "MPI_Type_create_resized", rc);
        rc = MPI_Type_commit(&strided);
        if (rc == MPI_SUCCESS)
            rc = MPI_Allgather(mine ? (const void *)(mine + off) : MPI_IN_PLACE,
                               mine ? (int)len : 0, MPI_BYTE, all + off, 1, strided, mpi);
        MPI_Type_free(&strided);
        if (rc != MPI_SUCCESS) return zs__mpi_fail(comm, call, "MPI_Allgather", rc);
    }
    return ZS_OK;
}

zs_status zs__mpi_all_reduce_scalars(const zs__comm *comm, MPI_Comm mpi, double *values, int n,
                                     zs__reduce_op op, const zs__comm_call *call) {
    HOST_CHECK(comm, call, "MPI_Allreduce",
               MPI_Allreduce(MPI_IN_PLACE, values, n, MPI_DOUBLE,
                             op == ZS_REDUCE_MAX ? MPI_MAX : MPI_SUM, mpi));
    return ZS_OK;
}

zs_status zs__mpi_broadcast(const zs__comm *comm, MPI_Comm mpi, void *buf, size_t bytes, int root,
                            size_t piece, const zs__comm_call *call) {
    for (size_t off = 0; off < bytes; off += piece) {
        size_t len = bytes - off < piece ? bytes - off : piece;
        HOST_CHECK(comm, call, "MPI_Bcast",
                   MPI_Bcast((unsigned char *)buf + off, (int)len, MPI_BYTE, root, mpi));
    }
    return ZS_OK;
}

zs_status zs__mpi_barrier(const zs__comm *comm, MPI_Comm mpi, const zs__comm_call *call) {
    HOST_CHECK(comm, call, "MPI_Barrier", MPI_Barrier(mpi));
    return ZS_OK;
}
