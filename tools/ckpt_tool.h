/* Shared parts of zs-ckpt: finding the step directory the user means, with
 * the same rule and the same verification as the runtime's zs_load
 * (src/checkpoint/select.h, verify.h). The commands (info, verify, export)
 * are in zs_ckpt.c and ckpt_export.c. Every function returns a zs_status
 * whose message (zs_last_error) names the file and what is wrong with it. */
#ifndef ZS_TOOLS_CKPT_TOOL_H
#define ZS_TOOLS_CKPT_TOOL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "checkpoint/manifest.h"
#include "checkpoint/verify.h"
#include "progress.h"
#include "zeroshard.h"

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

/* out = dir + "/" + name; fails (naming both) if the result does not fit. */
zs_status zs__tool_join(char *out, size_t capacity, const char *dir, const char *name);

/* Opens what the user named. A step directory (it holds manifest.json) is
 * opened as it is, with its manifest checked (zs__ckpt_step_open); its shard
 * files are left to the command. A checkpoint root is resolved with
 * zs__ckpt_candidates_list and zs__ckpt_select, each candidate checked with
 * zs__ckpt_step_open and zs__ckpt_verify_files (everything), exactly as
 * zs_load chooses: the result is the step the runtime would resume from.
 * *from_root (may be NULL) says which case it was. Close *out with
 * zs__ckpt_step_close. */
zs_status zs__tool_open(const char *arg, zs__ckpt_step *out, int *from_root);

/* Writes the full, unsharded model of the step directory to out_path as one
 * safetensors file (see ckpt_export.c). buffer_bytes bounds the data buffers.
 * Long runs show a progress line on stderr (progress.h) unless quiet. */
zs_status zs__tool_export(const zs__ckpt_step *step, zs_dtype dtype, uint64_t buffer_bytes,
                          const char *out_path, int quiet, uint64_t *out_bytes);

/* Adapts zs__ckpt_verify_files_progress's callback to a zs__progress whose
 * work starts with the verification (user = the zs__progress). */
void zs__tool_verify_progress(void *user, uint64_t bytes_read);

/* The smallest --buffer-bytes export accepts: room for one fp32 element and
 * its narrowed copy, rounded up to something that is not absurd. */
#define ZS_TOOL_MIN_BUFFER_BYTES 16u

#endif
