/* The model as the program describes it and the build that lays it out
 * (model.c): zs_unit_begin, zs_param_create, zs_unit_end are its public
 * side; zs__build_model is what the public zs_build (src/api.c, which adds
 * the resume) calls. It lays out, allocates and initializes the model,
 * creating the rooms that live from zs_build on (residency, ZeRO++, the
 * optimizer pass) in order. */
#ifndef ZS_ZERO_MODEL_H
#define ZS_ZERO_MODEL_H

#include "zeroshard.h"

zs_status zs__build_model(zs_ctx *zs);

#endif
