/* The one monotonic clock of the runtime and its tools: deadlines, spans,
 * metrics and start-up times all read CLOCK_MONOTONIC through it, so times
 * taken in different layers can be subtracted from each other. */
#ifndef ZS_CORE_CLOCK_H
#define ZS_CORE_CLOCK_H

#include <stdint.h>

/* Nanoseconds since an arbitrary fixed point (the same for the process). */
uint64_t zs__clock_ns(void);

/* The same instant in seconds. */
static inline double zs__clock_s(void) { return 1e-9 * (double)zs__clock_ns(); }

#endif
