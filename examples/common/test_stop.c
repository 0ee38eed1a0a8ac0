/* EX_TEST_STOP: see test_stop.h. SIGSTOP rather than a sleep or an exit:
 * the process stays alive and silent, holding its connections, which is the
 * case MPI's own collectives never notice. */
#define _POSIX_C_SOURCE 200809L /* kill */

#include "test_stop.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void ex_test_stop(const char *program, const char *point, int rank) {
    const char *spec = getenv("EX_TEST_STOP");
    if (!spec || !*spec) return;
    char name[32];
    int want_rank = -1;
    if (sscanf(spec, "%31[a-z_]:%d", name, &want_rank) != 2 || strcmp(name, point) != 0 ||
        want_rank != rank)
        return;
    fprintf(stderr, "%s: rank %d (pid %ld): EX_TEST_STOP=%s: stopping at '%s'\n", program, rank,
            (long)getpid(), spec, point);
    fflush(stderr);
    raise(SIGSTOP);
}
