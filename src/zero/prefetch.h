/* Stage-3 prefetch (prefetch.c): the fetch orders, recorded per kind of
 * pass, and the gathers ahead that follow them. The room owns its state
 * (struct zs__prefetch, private). */
#ifndef ZS_ZERO_PREFETCH_H
#define ZS_ZERO_PREFETCH_H

#include "zeroshard.h"

/* Prefetch (prefetch.c): called by zs_fetch before (zs__prefetch_check) and
 * after (zs__prefetch_ahead) a fetch; zs__prefetch_taken when the program
 * fetches a unit that was gathered ahead; zs__prefetch_cancel waits for the
 * units gathered ahead and returns them; zs__prefetch_pass_end at the end of
 * a pass (zs_step for training, zs_eval_end). */
zs_status zs__prefetch_check(zs_ctx *zs, zs_unit *unit);
void zs__prefetch_ahead(zs_ctx *zs);
void zs__prefetch_taken(zs_ctx *zs, zs_unit *unit);
zs_status zs__prefetch_cancel(zs_ctx *zs);
int zs__prefetch_pending(const zs_ctx *zs); /* units gathered ahead and not fetched */
zs_status zs__prefetch_pass_end(zs_ctx *zs);
/* The fetch orders' room, at zs_build (zs__residency_create). */
zs_status zs__prefetch_create(zs_ctx *zs);
void zs__prefetch_destroy(zs_ctx *zs);
/* An evaluation pass is open (zs_eval_begin .. zs_eval_end): it has no
 * gradients and no micro-step may end in it. */
int zs__prefetch_in_eval(const zs_ctx *zs);

#endif
