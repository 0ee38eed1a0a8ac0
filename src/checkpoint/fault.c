/* ZS_FAULT: a test hook that kills the process at a named point of the save
 * protocol, so tests can prove that a crash anywhere leaves the previous
 * checkpoint loadable. It never runs unless the variable is set. (Its
 * companion ZS_FAULT_ERRNO, which fails a file-system call, is in
 * fs_fault.c, next to the file-system steps that call it.) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"

void zs__checkpoint_fault(const char *point, int rank, int64_t step) {
    const char *spec = getenv("ZS_FAULT");
    if (!spec || !*spec) return;
    char name[32];
    int want_rank = -1;
    long long want_step = -1;
    int fields = sscanf(spec, "%31[a-z]:%d:%lld", name, &want_rank, &want_step);
    if (fields < 2 || strcmp(name, point) != 0 || want_rank != rank) return;
    if (fields == 3 && want_step != step) return;
    fprintf(stderr, "zeroshard: rank %d: ZS_FAULT=%s: killing this process at '%s' of step %lld\n",
            rank, spec, point, (long long)step);
    fflush(stderr);
    raise(SIGKILL);
}

