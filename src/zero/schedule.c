/* Learning-rate schedules, evaluated once per step on the host.
 *
 * Floor (src/floors.txt): Owns nothing; calls nothing of zero/ (a leaf above
 * the ground).
 */
#include <math.h>

#include "zero/ground.h"
#include "zero/schedule.h"

double zs__schedule_lr(const zs__settings *s, int64_t t) {
    const double peak = s->optimizer.lr;
    if (s->scheduler.kind == ZS_SCHEDULE_CONSTANT) return peak;
    /* warmup_cosine: linear from peak/warmup at step 1 to peak at step
     * warmup, then half a cosine from peak down to min_lr at total_steps,
     * and min_lr after that. */
    const int64_t warmup = s->scheduler.warmup_steps;
    const int64_t total = s->scheduler.total_steps;
    const double floor_lr = s->scheduler.min_lr;
    if (t <= warmup) return peak * (double)t / (double)warmup;
    if (t >= total) return floor_lr;
    double progress = (double)(t - warmup) / (double)(total - warmup);
    return floor_lr + 0.5 * (peak - floor_lr) * (1.0 + cos(3.14159265358979323846 * progress));
}
