/* The checkpoint protocol inside the runtime (zs_save / zs_load are public in
 * zeroshard.h). Files:
 *   save.c        writing a step directory with the commit protocol, retention
 *   load.c        choosing, verifying and loading a step directory (any world size/stage)
 *   state_map.c   where each saved state lives in this rank's buffers
 *   user_state.c  zs_user_state_set / zs_user_state_get
 *   fault.c       the ZS_FAULT test hook */
#ifndef ZS_CHECKPOINT_CHECKPOINT_H
#define ZS_CHECKPOINT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint/manifest.h"
#include "zero/ground.h"

/* Names inside a checkpoint root. */
#define ZS_CKPT_LATEST "latest"
#define ZS_CKPT_MANIFEST "manifest.json"
#define ZS_CKPT_MANIFEST_HASH "manifest.json.xxh3"
#define ZS_CKPT_STEP_PREFIX "step_"       /* step_%08lld */
#define ZS_CKPT_TMP_PREFIX ".tmp_step_"   /* .tmp_step_%08lld_<nonce>: being written */
#define ZS_CKPT_OLD_PREFIX ".old_step_"   /* .old_step_%08lld_<nonce>: being replaced */

/* Called by zs_build: applies checkpoint.resume ("none", "auto", or a step
 * directory). Collective. */
zs_status zs__checkpoint_resume(zs_ctx *zs);

/* The optimizer states a context keeps, in save order: master always, then
 * exp_avg and exp_avg_sq (Adam/AdamW) or momentum (SGD with momentum). */
int zs__checkpoint_states(const zs_ctx *zs, zs__ckpt_state *states);

/* The optimizer-state array (offload/store.h) that holds a checkpointed state;
 * zs__state_read/write and zs__state_ptr reach it wherever it lives. */
zs__state_array zs__checkpoint_state_array(zs__ckpt_state state);

/* out = dir + "/" + name, or ZS_ERR_INVALID_ARGUMENT if it does not fit. */
zs_status zs__checkpoint_join(char *out, size_t capacity, const char *dir, const char *name);

/* The step directory of `step`: "step_" and 8 digits (cap >= 16; a step
 * beyond 8 digits gets more, which is_step_name then does not accept). */
void zs__checkpoint_step_name(char *out, size_t cap, int64_t step);

/* 1 if `name` is "step_" followed by exactly 8 digits (a committed step directory). */
int zs__checkpoint_is_step_name(const char *name);

/* Kills the process with SIGKILL when ZS_FAULT names this point, this rank and
 * (if given) this step: ZS_FAULT=<point>:<rank>[:<step>]. Points, in protocol
 * order: write (a shard file half written), shard (this rank's files complete
 * in the temporary directory), manifest (rank 0: manifest written, step
 * directory not yet renamed), rename (step directory renamed, latest not
 * updated), latest (latest updated, retention not run). Test hook only. */
void zs__checkpoint_fault(const char *point, int rank, int64_t step);

#endif
