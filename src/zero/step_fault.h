/* A test hook of the optimizer step (step_fault.c). */
#ifndef ZS_ZERO_STEP_FAULT_H
#define ZS_ZERO_STEP_FAULT_H

#include <stdint.h>
#include "zeroshard.h"

/* ZS_STEP_FAULT=<point>:<rank>[:<step>] (tests only; step_fault.c): a local
 * failure (ZS_ERR_INTERNAL, "injected by ZS_STEP_FAULT") on that rank at a
 * point of the optimizer step: "ready" (before the step's agreement),
 * "update" (the update, or its hand-over to the host), "host" (the host
 * update of a unit), "gather" (a unit's stage-1/2 gather after the update,
 * which the rank still runs), for `step`, the optimizer step being taken
 * (1 for the first). ZS_OK when not named. */
zs_status zs__step_fault(int rank, int64_t step, const char *point);

#endif
