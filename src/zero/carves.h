/* The live budget and the units holding carves of it (carves.c): the lower
 * floor of the residency room, which owns the budget (zero/live.h), the
 * counts of units whose parameters or gradients are carved, and the
 * gradients a submitted reduction still holds. Prefetch (a gather ahead)
 * and residency (the program's fetch, release and grads_ready) stand on
 * it; it calls the unit's collectives and the buckets below it. The loop
 * that makes room for a carve that does not fit (held reductions first,
 * then what was gathered ahead) is residency.c's, because it drops
 * prefetched units, a room above this one. */
#ifndef ZS_ZERO_CARVES_H
#define ZS_ZERO_CARVES_H

#include <stddef.h>

#include "backend/backend.h"
#include "zero/live.h"
#include "zeroshard.h"

typedef struct zs__carves zs__carves;

/* zs_build: the budget of `budget` bytes on `be` (at most `max_blocks`
 * carves at once) and the held list. zs__carves_destroy frees them (safe
 * on a context never built). */
zs_status zs__carves_create(zs_ctx *zs, zs__backend *be, size_t budget, int max_blocks);
void zs__carves_destroy(zs_ctx *zs);

/* The budget's buffer, for a measurement at zs_build before anything is
 * carved (NULL and 0 when there is none). */
void zs__carves_scratch(const zs_ctx *zs, void **ptr, size_t *bytes);
/* For zs_memory_report: units whose parameters are carved now and at most,
 * the budget and its peak. Zeros before zs_build. */
void zs__carves_report(const zs_ctx *zs, int *live_units, int *live_units_peak,
                       size_t *budget, size_t *carved_peak);

/* Units whose parameters are carved (fetched or gathered ahead), gradients
 * carved (OPEN to IN_FLIGHT), and gradients a reduction still holds. */
int zs__carves_live_units(const zs_ctx *zs);
int zs__carves_open_grads(const zs_ctx *zs);
int zs__carves_held(const zs_ctx *zs);
/* "'a', 'b'": the units holding gathered parameters (params = 1) or an open
 * gradient (params = 0), for the messages of the count bounds. */
void zs__carves_holders(const zs_ctx *zs, int params, char *out, size_t cap);

/* Carves the unit's bytes of `kind` from the budget; fails at once when
 * they do not fit, with the budget's message (zero/live.h). */
zs_status zs__carve_take(zs_ctx *zs, zs_unit *unit, zs__live_kind kind, void **out);
/* Gives a carve back that was never handed to a unit (a failed zeroing). */
void zs__carve_give(zs_ctx *zs, void *carve);

/* Stage 3: the unit's parameters into the carve `full`, counted, and their
 * gather submitted. zs__params_gather takes the carve first and fails at
 * once when it does not fit (a gather ahead). zs__params_return gives the
 * carve back and uncounts it. */
void zs__params_place(zs_ctx *zs, zs_unit *unit, void *full);
zs_status zs__params_gather(zs_ctx *zs, zs_unit *unit);
void zs__params_return(zs_ctx *zs, zs_unit *unit);

/* Stages 2-3: the unit's gradient opens in the carve `grad` (zeroed by the
 * caller), counted among the open gradients; zs__grad_hold hands it to its
 * submitted reduction, which holds it until zs__reclaim_oldest. */
void zs__grad_opened(zs_ctx *zs, zs_unit *unit, void *grad);
void zs__grad_hold(zs_ctx *zs, zs_unit *unit);
/* Waits for the oldest held reduction and returns its carve to the budget
 * (the unit's gradient is then DONE). */
zs_status zs__reclaim_oldest(zs_ctx *zs);

#endif
