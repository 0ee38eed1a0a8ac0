/* zeroshard on a communicator of the program's choosing. Kept apart from
 * zeroshard.h so that programs which only use MPI_COMM_WORLD do not need
 * mpi.h to include the main header. */
#ifndef ZEROSHARD_MPI_H
#define ZEROSHARD_MPI_H

#include <mpi.h>

#include "zeroshard.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Like zs_create, on `comm` (which the context duplicates: the program may
 * free its own handle afterwards). MPI must already be initialized. */
zs_status zs_create_with_comm(const zs_config *cfg, MPI_Comm comm, zs_ctx **out);

#ifdef __cplusplus
}
#endif
#endif
