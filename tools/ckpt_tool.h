/* Shared parts of zs-ckpt: finding a step directory, loading its manifest,
 * and verifying shard files against it. The commands (info, verify, export)
 * are in zs_ckpt.c and ckpt_export.c. Every function returns a zs_status
 * whose message (zs_last_error) names the file and what is wrong with it. */
#ifndef ZS_TOOLS_CKPT_TOOL_H
#define ZS_TOOLS_CKPT_TOOL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "checkpoint/manifest.h"
#include "zeroshard.h"

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

/* The name of the manifest and of its hash file inside a step directory. */
#define ZS_TOOL_MANIFEST "manifest.json"
#define ZS_TOOL_MANIFEST_HASH "manifest.json.xxh3"
/* The file in a checkpoint root that names the newest committed step. */
#define ZS_TOOL_LATEST "latest"

/* out = dir + "/" + name; fails (naming both) if the result does not fit. */
zs_status zs__tool_join(char *out, size_t capacity, const char *dir, const char *name);

/* Resolves what the user named: a step directory (it holds manifest.json) is
 * used as it is; a checkpoint root (it holds `latest`) is resolved to the
 * step directory `latest` names, which must match ^step_[0-9]{8}$ exactly
 * (one trailing newline allowed), so a hostile `latest` cannot point outside
 * the root. *resolved_from_latest says which case it was (may be NULL). */
zs_status zs__tool_resolve(const char *arg, char *step_dir, size_t capacity,
                           int *resolved_from_latest);

/* Reads and parses dir/manifest.json. When require_hash is set, a missing
 * or malformed manifest.json.xxh3, or one that does not match, is an error;
 * otherwise *hash_state says what was found (may be NULL):
 * 1 matches, 0 mismatch, -1 missing or malformed. */
zs_status zs__tool_load_manifest(const char *dir, int require_hash, zs__manifest **out,
                                 int *hash_state);

/* What zs__tool_verify_files checks per file. */
typedef struct zs__tool_verify_options {
    int whole_file_hash; /* also hash the whole file against the manifest (verify) */
    int master_only;     /* only files of kind master (export reads nothing else) */
} zs__tool_verify_options;

typedef struct zs__tool_verify_totals {
    int files;
    int64_t tensors;
    uint64_t bytes;
} zs__tool_verify_totals;

/* For every file the options select, in manifest order: it exists and is a
 * regular file; its size equals the manifest's; (whole_file_hash) its XXH3
 * equals the manifest's; the safetensors header is valid (zs__st_open); it
 * holds exactly the tensors the manifest assigns to it (a missing or an
 * extra one is an error), each of the state kind its file kind holds, with
 * the dtype of that state, the manifest's element count, the manifest's
 * offset where the file's metadata records one, and the manifest's XXH3.
 * Stops at the first failure. totals may be NULL. */
zs_status zs__tool_verify_files(const char *dir, const zs__manifest *m,
                                const zs__tool_verify_options *options,
                                zs__tool_verify_totals *totals);

/* Writes the full, unsharded model of the step directory to out_path as one
 * safetensors file (see ckpt_export.c). buffer_bytes bounds the data buffers. */
zs_status zs__tool_export(const char *dir, const zs__manifest *m, zs_dtype dtype,
                          uint64_t buffer_bytes, const char *out_path,
                          uint64_t *out_bytes);

/* The smallest --buffer-bytes export accepts: room for one fp32 element and
 * its narrowed copy, rounded up to something that is not absurd. */
#define ZS_TOOL_MIN_BUFFER_BYTES 16u

#endif
