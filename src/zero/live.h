/* The live-memory budget (zero.live_bytes, DESIGN §9): one buffer allocated
 * once at zs_build, from which stage-3 gathered parameters and stage-2/3
 * transient unit gradients are carved at their exact sizes.
 *
 * Why one budget in bytes rather than slots of the largest unit: real models
 * have units of very different sizes (GPT-2's embedding unit is 5.6x a
 * block), so slots sized for the largest unit waste most of what they hold.
 *
 * Placement: parameters take the lowest gap that holds them, gradients the
 * highest (at its top), so the two kinds grow from opposite ends; blocks
 * never move, because the program holds pointers into them between fetch
 * and release. A request can therefore fail for fragmentation although enough
 * bytes are free in total; the message says so.
 *
 * Accounting: the whole buffer is charged when it is allocated, to
 * live_free; a carve moves its exact bytes from live_free to live_params or
 * live_grads and a release moves them back, so the tags always add up to the
 * bytes really held. Carves are placed at ZS__LIVE_ALIGN-byte offsets; the
 * rounding stays in live_free. Pure bookkeeping over a backend buffer: no
 * collectives, no knowledge of stages. */
#ifndef ZS_ZERO_LIVE_H
#define ZS_ZERO_LIVE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

/* Offsets of carved blocks are multiples of this (vector loads, and the
 * 256-byte alignment cudaMalloc gives). */
#define ZS__LIVE_ALIGN 256

typedef enum zs__live_kind {
    ZS__LIVE_PARAMS = 0, /* a unit's gathered parameters (stage 3) */
    ZS__LIVE_GRAD = 1    /* a unit's transient full gradient (stages 2-3) */
} zs__live_kind;

typedef struct zs__live_block {
    size_t offset;       /* from the start of the buffer; a multiple of ZS__LIVE_ALIGN */
    size_t bytes;        /* as requested (charged) */
    size_t span;         /* bytes rounded up to ZS__LIVE_ALIGN (occupied) */
    const char *owner;   /* the unit's name, for messages; must outlive the block */
    zs__live_kind kind;
} zs__live_block;

typedef struct zs__live {
    zs__backend *backend;
    zs__buf storage;     /* `capacity` bytes, charged to live_free while uncarved */
    size_t capacity;
    zs__live_block *blocks; /* sorted by offset */
    int count, capacity_blocks;
    size_t carved;       /* exact bytes carved now */
    size_t carved_peak;
} zs__live;

/* The bytes a carve of `bytes` occupies (rounded up to ZS__LIVE_ALIGN); 0 on overflow. */
size_t zs__live_span(size_t bytes);

/* Allocates the buffer (capacity may be 0: nothing is live in stages 0-1).
 * max_blocks bounds how many carves exist at once (the caller's count
 * limits). */
zs_status zs__live_create(zs__live *live, zs__backend *be, size_t capacity, int max_blocks);
void zs__live_destroy(zs__live *live);

/* Carves `bytes` for `owner`. On failure returns ZS_ERR_OUT_OF_MEMORY with a
 * message that names the request, the budget, every block held (owner, kind,
 * size) and, when the free bytes would suffice, the largest free extent; the
 * caller adds what the program should do. */
zs_status zs__live_take(zs__live *live, const char *owner, zs__live_kind kind, size_t bytes,
                        void **out);
/* Returns the block that starts at ptr (from zs__live_take). */
void zs__live_give(zs__live *live, void *ptr);

#endif
