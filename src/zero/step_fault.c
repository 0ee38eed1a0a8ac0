/* ZS_STEP_FAULT (step_fault.h): a test hook that makes one rank fail at a named
 * point of the optimizer step, so tests can prove that every rank then fails
 * together with that rank's cause instead of waiting for it. It never runs
 * unless the variable is set.
 *
 * Floor (src/floors.txt): Owns nothing; calls nothing of zero/.
 */
#include "core/env.h"
#include "core/error.h"
#include "zero/ground.h" /* its declaration */
#include "zero/step_fault.h"

zs_status zs__step_fault(int rank, int64_t step, const char *point) {
    if (!zs__env_fault_matches(ZS_ENV_STEP_FAULT, point, rank, step)) return ZS_OK;
    return zs__fail(ZS_ERR_INTERNAL, "rank %d: failure at '%s' of step %lld injected by "
                    "ZS_STEP_FAULT=%s", rank, point, (long long)step,
                    zs__env_text(ZS_ENV_STEP_FAULT));
}
