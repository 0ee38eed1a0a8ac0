/* Ranks comparing what decides their bits (kernels_agree.c): zs_agree_kernels
 * and zs_cpu_kernels are its public side. */
#ifndef ZS_ZERO_KERNELS_AGREE_H
#define ZS_ZERO_KERNELS_AGREE_H

#include <stddef.h>

#include "zeroshard.h"

/* Collective: all-gathers every rank's `kernel` name; *differ = 1 when they
 * are not all equal, and `groups` then lists every name with its ranks
 * ("ranks 0-1: 'Zen'; rank 2: 'Haswell'"). */
zs_status zs__kernels_compare(zs_ctx *zs, const char *what, const char *kernel, char *groups,
                              size_t cap, int *differ);

#endif
