/* The optimizer step's mechanism under the public zs_step (step.c; src/api.c
 * adds the checkpoint policy: a save every checkpoint.every steps, the
 * agreed stop). zs__step_run ends a micro-step and, at a boundary, runs the
 * optimizer step, filling *info (never NULL) in either case. */
#ifndef ZS_ZERO_STEP_H
#define ZS_ZERO_STEP_H

#include "zeroshard.h"

zs_status zs__step_run(zs_ctx *zs, zs_step_info *info);
/* zs_build: what a step computes the gradient's norm with (local: the
 * caller agrees); zs__step_destroy frees it (safe when never created). */
zs_status zs__step_create(zs_ctx *zs);
void zs__step_destroy(zs_ctx *zs);

#endif
