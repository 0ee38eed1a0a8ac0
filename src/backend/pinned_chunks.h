/* Page-locked host memory registered in chunks, and copies cut where they
 * cross a chunk boundary: one rule for the CUDA backend and the simulated
 * device (sim/), so that a copy crosses a boundary on sim exactly as it
 * would on a GPU.
 *
 * Why chunks: registering host memory locks its pages on one thread at
 * about 2 GB/s; a large model's offloaded state registers much faster in
 * chunks on several threads. Each chunk is then a registration of its own,
 * and one asynchronous copy over two registrations is not a copy from one
 * page-locked allocation (CUDA's driver refuses it or falls back to a
 * pageable, synchronous copy), so every copy is cut where it crosses a
 * chunk boundary on either side. An allocation of several chunks starts at
 * a multiple of the chunk size, so the boundaries are the multiples of it
 * in the address space and a copy finds them from its addresses alone. The
 * chunk size is ZS_CUDA_PIN_CHUNK_BYTES (a power of two; tests make it
 * small to cross boundaries with small buffers). */
#ifndef ZS_BACKEND_PINNED_CHUNKS_H
#define ZS_BACKEND_PINNED_CHUNKS_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard.h"

#define ZS__PIN_CHUNK_DEFAULT ((size_t)1 << 30)
#define ZS__PIN_PAGE ((size_t)4096)

/* The chunk size from ZS_CUDA_PIN_CHUNK_BYTES (default 1 GiB): a power of
 * two of at least a page, else ZS_ERR_INVALID_ARGUMENT saying why. */
zs_status zs__pin_chunk_read(size_t *out);

/* Chunks of a page-rounded allocation of `bytes`. */
static inline size_t zs__pin_chunk_count(size_t bytes, size_t chunk) {
    return (bytes + chunk - 1) / chunk;
}

/* The length of the next piece of a copy of `left` bytes from src to dst:
 * at most `left`, and crossing a multiple of `chunk` (a power of two) on
 * neither side. Device addresses do not care: a device copy is cut only
 * where a boundary happens to lie. */
static inline size_t zs__pin_piece(uintptr_t dst, uintptr_t src, size_t left, size_t chunk) {
    const size_t to_d = chunk - (size_t)(dst & (chunk - 1));
    const size_t to_s = chunk - (size_t)(src & (chunk - 1));
    size_t n = left;
    if (n > to_d) n = to_d;
    if (n > to_s) n = to_s;
    return n;
}

#endif
