/* The learning-rate schedule (schedule.c). */
#ifndef ZS_ZERO_SCHEDULE_H
#define ZS_ZERO_SCHEDULE_H

#include <stdint.h>
#include "core/config.h"

/* Learning rate of optimizer step t (1-based) under the configured schedule. */
double zs__schedule_lr(const zs__settings *settings, int64_t t);

#endif
