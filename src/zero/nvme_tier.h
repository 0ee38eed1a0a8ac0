/* The NVMe tier's names (nvme_tier.c). */
#ifndef ZS_ZERO_NVME_TIER_H
#define ZS_ZERO_NVME_TIER_H

#include <stddef.h>
#include "zeroshard.h"

/* offload.optimizer = "nvme" (nvme_tier.c): the per-run directory's name,
 * rank 0's, on every rank (collective), and the namer of the tier's chunks. */
zs_status zs__nvme_runid(zs_ctx *zs, char *runid, size_t cap);
void zs__nvme_tier_named(zs_ctx *zs);

#endif
