/* ZS_STEP_FAULT (ctx.h): a test hook that makes one rank fail at a named
 * point of the optimizer step, so tests can prove that every rank then fails
 * together with that rank's cause instead of waiting for it. It never runs
 * unless the variable is set. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "zero/ctx.h" /* its declaration */

zs_status zs__step_fault(int rank, int64_t step, const char *point) {
    const char *spec = getenv("ZS_STEP_FAULT");
    if (!spec || !*spec) return ZS_OK;
    char name[32];
    int want_rank = -1;
    long long want_step = -1;
    const int fields = sscanf(spec, "%31[a-z]:%d:%lld", name, &want_rank, &want_step);
    if (fields < 2 || strcmp(name, point) != 0 || want_rank != rank) return ZS_OK;
    if (fields == 3 && want_step != step) return ZS_OK;
    return zs__fail(ZS_ERR_INTERNAL, "rank %d: failure at '%s' of step %lld injected by "
                    "ZS_STEP_FAULT=%s", rank, point, (long long)step, spec);
}
