/* Stages 1-2: the full parameters made whole after an update (full_params.c),
 * each rank gathering the others' owned slices, unit by unit or all. */
#ifndef ZS_ZERO_FULL_PARAMS_H
#define ZS_ZERO_FULL_PARAMS_H

#include "zeroshard.h"

/* Stages 1-2 keep full parameters that each rank updates only in its owned
 * slices: every rank gathers the others' slices of unit u, or of every
 * unit. A no-op in stages 0 and 3. Collective. */
zs_status zs__gather_unit_params(zs_ctx *zs, int unit);
zs_status zs__gather_full_params(zs_ctx *zs);

#endif
