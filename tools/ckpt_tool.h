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
#include "checkpoint/safetensors.h"
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

/* The parameters of a step read back in full from its master shards, for
 * the exports (ckpt_export.c): opening verifies every master and user file,
 * as `zs-ckpt verify` does, with the same messages (size, header, exactly
 * the listed tensors, each tensor's XXH3; zs__ckpt_verify_files with
 * without_optim) with `progress`,
 * whose total the caller set to zs__ckpt_verify_read_bytes(step, 0, 1, 1)
 * plus the output's tensor bytes; then each parameter is assembled in
 * pieces from the ranks' ranges that cover it, converted to `dtype`
 * (round to nearest even) and appended to a stream, within buffer_bytes
 * of host memory. */
/* A checkpoint that recorded its frozen base (manifest.h: has_base) holds
 * no frozen values: the reader takes them from the base (ckpt_base.c),
 * whose hash it checks when it opens, refusing a base that changed. */
typedef struct zs__tool_base zs__tool_base;
/* *out NULL when the manifest recorded no base. */
zs_status zs__tool_base_open(const zs__manifest *m, zs__tool_base **out);
int zs__tool_base_holds(const zs__tool_base *b, int p); /* p's values are the base's */
/* Elements [first, first + count) of parameter p from the base, fp32. */
zs_status zs__tool_base_read(zs__tool_base *b, int p, int64_t first, int64_t count, float *dst);
void zs__tool_base_close(zs__tool_base *b); /* NULL is a no-op */

typedef struct zs__tool_reader zs__tool_reader;
zs_status zs__tool_reader_open(const zs__ckpt_step *step, zs_dtype dtype, uint64_t buffer_bytes,
                               zs__progress *progress, zs__tool_reader **out);
/* Appends every byte of parameter p (manifest order index) in the
 * reader's dtype to `stream`, whose header declared it. */
zs_status zs__tool_reader_append(zs__tool_reader *r, int p, zs__st_stream *stream);
/* Parameter p whole, fp32, into out (its element count of floats): for a
 * tensor computed from others (export --hf --merge). */
zs_status zs__tool_reader_read(zs__tool_reader *r, int p, float *out);
void zs__tool_reader_close(zs__tool_reader *r); /* NULL is a no-op */
/* Parameter p as a tensor of the export: its name, shape and bytes in dtype. */
zs_status zs__tool_param_spec(const zs__manifest *m, int p, zs_dtype dtype,
                              zs__st_tensor_spec *spec);
/* Bytes of every parameter in dtype: the tensor data of an export. */
uint64_t zs__tool_data_bytes(const zs__manifest *m, zs_dtype dtype);

/* The export in the Hugging Face layout (ckpt_export_hf.c), into the new
 * directory out_dir: model.safetensors, or above max_shard_bytes
 * model-0000i-of-0000N.safetensors and model.safetensors.index.json, each
 * file with metadata {"format": "pt"}; config.json from the checkpoint's
 * global user state "hf.config.json" (a note on stdout when there is none);
 * the tokenizer files found in tokenizer_from (may be NULL). Written in a
 * temporary directory beside out_dir and renamed to it when complete. */
typedef struct zs__tool_hf_summary {
    int files;              /* safetensors files written */
    uint64_t tensor_bytes;  /* their tensor data (the index's total_size) */
    int config_written;     /* 1 when config.json was written */
    int tokenizer_files;    /* tokenizer files copied */
} zs__tool_hf_summary;
/* merge: LoRA adapters in the checkpoint are added into their Linears (W +
 * (alpha / r) B A, alpha and r from the user state
 * "peft.adapter_config.json") and left out; without it such a checkpoint is
 * refused. */
zs_status zs__tool_export_hf(const zs__ckpt_step *step, zs_dtype dtype, uint64_t buffer_bytes,
                             uint64_t max_shard_bytes, const char *out_dir,
                             const char *tokenizer_from, int merge, int quiet,
                             zs__tool_hf_summary *summary);
/* zs-ckpt export --peft: the LoRA adapters (parameters "*.lora_A.weight",
 * "*.lora_B.weight") as PEFT's adapter_model.safetensors, under PEFT's
 * names ("base_model.model." + the parameter's), and adapter_config.json
 * from the checkpoint's global user state "peft.adapter_config.json" (where
 * the trainer keeps it), into a new directory out_dir written as --hf's. */
zs_status zs__tool_export_peft(const zs__ckpt_step *step, zs_dtype dtype, uint64_t buffer_bytes,
                               const char *out_dir, int quiet, int *tensors_out);

/* Adapts zs__ckpt_verify_files_progress's callback to a zs__progress whose
 * work starts with the verification (user = the zs__progress). */
void zs__tool_verify_progress(void *user, uint64_t bytes_read);

/* The smallest --buffer-bytes export accepts: room for one fp32 element and
 * its narrowed copy, rounded up to something that is not absurd. */
#define ZS_TOOL_MIN_BUFFER_BYTES 16u

#endif
