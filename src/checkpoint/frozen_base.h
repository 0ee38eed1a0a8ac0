/* A fine-tune's frozen base (zs_set_frozen_base): its declaration, its
 * content hash, and its import by zs_build. Checkpoints of a run whose
 * frozen values are the base's record it (manifest.h: zs__manifest.base)
 * instead of copying the values; zs-ckpt reads the base back from there. */
#ifndef ZS_CHECKPOINT_FROZEN_BASE_H
#define ZS_CHECKPOINT_FROZEN_BASE_H

#include <stdint.h>

#include "zeroshard.h"

/* The base's hash from its frozen tensors' own hashes (XXH3-64 of each
 * tensor's bytes in its file): XXH3-64 over (name, NUL, hash as 8
 * little-endian bytes) for the tensors sorted by parameter name, so that
 * the registration order, the world size and the stage do not enter.
 * names[i] is the parameter's name (without the file's prefix). 0 with
 * *out unset when out of memory. */
int zs__frozen_base_digest(int n, const char *const *names, const uint64_t *hashes,
                           uint64_t *out);

/* zs_build's step: the declared base imported into the frozen parameters
 * and hashed, zs->base.current set. Nothing without a declared base.
 * Collective. (hf_import.c, which reads the files.) */
zs_status zs__frozen_base_import(zs_ctx *zs);

#endif
