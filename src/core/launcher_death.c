/* The parent-death signal (see launcher_death.h). */
#include "core/launcher_death.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

static int g_users;
static int g_armed;
static int g_previous; /* the process's own PR_GET_PDEATHSIG before arming */

int zs__launcher_death_arm(void) {
    if (g_users++ > 0) return g_armed;
#ifdef __linux__
    /* Launched by mpirun (Open MPI sets OMPI_COMM_WORLD_RANK) or by any
     * PMIx launcher (srun --mpi=pmix, prterun): the parent is the launcher
     * or its daemon. A program started by hand or by another tool keeps
     * the death of its parent to itself. */
    if (!getenv("OMPI_COMM_WORLD_RANK") && !getenv("PMIX_RANK")) return 0;
    const pid_t parent = getppid();
    if (prctl(PR_GET_PDEATHSIG, &g_previous) != 0) g_previous = 0;
    /* SIGKILL, not SIGTERM: SIGTERM is the runtime's own signal to try an
     * agreed checkpoint within job.term_grace_s, and the program may catch
     * or ignore it. With the launcher gone nobody collects the output or the
     * exit codes, a relaunch may already be running on the same checkpoint
     * root, and the peers are going too: nothing is worth waiting for. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return 0;
    g_armed = 1;
    /* The launcher may have died between fork and the prctl above: then the
     * process was already handed to another parent and no signal will come.
     * The parent read before arming tells. */
    if (getppid() != parent) raise(SIGKILL);
    return 1;
#else
    return 0;
#endif
}

void zs__launcher_death_disarm(void) {
    if (g_users <= 0 || --g_users > 0) return;
#ifdef __linux__
    if (g_armed) (void)prctl(PR_SET_PDEATHSIG, g_previous);
#endif
    g_armed = 0;
}
