/* Agreement among ranks (agree.c): the collective helpers every room above
 * uses to fail together, on the context's communicator. A floor just above
 * the ground; it calls only the comm layer. */
#ifndef ZS_ZERO_AGREE_H
#define ZS_ZERO_AGREE_H

#include <stddef.h>
#include <stdint.h>
#include "zeroshard.h"

/* Every rank contributes a 64-bit digest; fails on every rank (ZS_ERR_MISMATCH)
 * if any differs from rank 0's, naming the first differing rank and `what`. */
zs_status zs__agree_u64(zs_ctx *zs, uint64_t value, const char *what, const char *advice);

/* Agreement after a phase that may fail on some ranks only: every rank
 * returns the lowest failing rank's status and message ("... (reported by
 * rank r)"), or ZS_OK when all succeeded. Collective. */
zs_status zs__agree_status(zs_ctx *zs, zs_status local, const char *what);
/* zs__calloc agreed on before the collective that needs the memory:
 * ZS_ERR_OUT_OF_MEMORY naming `what` on every rank if any rank's failed
 * (nothing then stays allocated). Collective. */
zs_status zs__calloc_agreed(zs_ctx *zs, size_t count, size_t size, const char *what,
                            void **out);
/* Every rank learns rank `from`'s status and message. Collective. */
zs_status zs__share_outcome(zs_ctx *zs, zs_status local, int from, const char *what);

#endif
