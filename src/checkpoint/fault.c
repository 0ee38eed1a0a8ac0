/* ZS_FAULT: a test hook that kills the process at a named point of the save
 * protocol, so tests can prove that a crash anywhere leaves the previous
 * checkpoint loadable. It never runs unless the variable is set. (Its
 * companion ZS_FAULT_ERRNO, which fails a file-system call, is in
 * fs_fault.c, next to the file-system steps that call it.) */
#include <signal.h>
#include <stdio.h>

#include "checkpoint/checkpoint.h"
#include "core/env.h"

void zs__checkpoint_fault(const char *point, int rank, int64_t step) {
    if (!zs__env_fault_matches(ZS_ENV_FAULT, point, rank, step)) return;
    fprintf(stderr, "zeroshard: rank %d: ZS_FAULT=%s: killing this process at '%s' of step %lld\n",
            rank, zs__env_text(ZS_ENV_FAULT), point, (long long)step);
    fflush(stderr);
    raise(SIGKILL);
}
