/* The NCCL communicator's entry point in builds without CUDA (CMake compiles
 * this file only then); see src/comm/nccl/ for the real one.
 *
 * Floor (src/floors.txt): calls nothing of comm/.
 */
#include "comm/comm.h"
#include "core/error.h"

zs_status zs__comm_create_nccl(MPI_Comm comm, const zs__settings *settings, zs__mem *mem,
                               zs__backend *backend, zs__comm **out) {
    (void)comm;
    (void)settings;
    (void)mem;
    (void)backend;
    (void)out;
    return zs__fail(ZS_ERR_UNSUPPORTED, "NCCL collectives are not in this build of zeroshard "
                                        "(configured without CUDA); use backend = \"cpu\"");
}
