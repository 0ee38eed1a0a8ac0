/* The small model the reliability programs train (misbehave.c, preempt.c):
 * `count` units "block.u", each of one parameter "block.u.weight" of
 * first + step * u elements (sizes chosen to divide by nothing), initialized
 * normal with std 0.02. */
#ifndef ZS_TESTS_BLOCKS_H
#define ZS_TESTS_BLOCKS_H

#include <stdint.h>

#include "zeroshard.h"

/* Describes the units (not zs_build): fills units[], params[] and numel[]
 * (count entries each). ZS_OK, or the failing call's status with its
 * message in zs_last_error and its name in *what. */
zs_status blocks_describe(zs_ctx *zs, int count, int64_t first, int64_t step, zs_unit **units,
                          zs_param **params, int64_t *numel, const char **what);

#endif
