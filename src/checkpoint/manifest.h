/* The manifest of a checkpoint step directory: what was saved, by which world
 * size and stage, and the hash of every file and tensor. Written and parsed
 * with json-c; parsing validates everything (a manifest is hostile input).
 *
 * A step directory holds:
 *   manifest.json                 this document
 *   manifest.json.xxh3            16 hex digits: XXH3_64bits of manifest.json, so
 *                                 a flipped byte anywhere in the manifest is caught
 *   rank00000.master.safetensors  rank 0's fp32 master weights (its owned ranges)
 *   rank00000.optim.safetensors   rank 0's optimizer moments
 *   rank00000.user.safetensors    rank 0's user state (rank 0 also holds the global entries)
 *   ... one of each per rank of the saving run
 *
 * Each tensor in a shard is one parameter's owned range of one state kind,
 * named "<param>" (master) or "<param>:<state>" (optim), or "global:<key>" /
 * "rank:<key>" (user). Its global, unpadded element offset within the
 * parameter is in the manifest. Each shard's __metadata__ names its format,
 * version, step, rank, world size and kind, so a misplaced file is recognized
 * before its content is hashed. */
#ifndef ZS_CHECKPOINT_MANIFEST_H
#define ZS_CHECKPOINT_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard.h"

#define ZS_CKPT_FORMAT "zeroshard-checkpoint"
#define ZS_CKPT_VERSION 1
#define ZS_CKPT_NAME_MAX 255        /* parameter, unit, user key names */
#define ZS_CKPT_FILE_NAME_MAX 63    /* file names inside a step directory */
#define ZS_CKPT_MAX_DIMS 8
#define ZS_CKPT_MAX_ENTRIES 10000000 /* units, params, files or tensors */
#define ZS_CKPT_MANIFEST_MAX (256u << 20) /* bytes of manifest.json */

typedef enum zs__ckpt_file_kind {
    ZS_CKPT_FILE_MASTER = 0, /* "master" */
    ZS_CKPT_FILE_OPTIM = 1,  /* "optim" */
    ZS_CKPT_FILE_USER = 2    /* "user" */
} zs__ckpt_file_kind;

typedef enum zs__ckpt_state {
    ZS_CKPT_STATE_MASTER = 0,     /* "master": fp32 weights */
    ZS_CKPT_STATE_EXP_AVG = 1,    /* "exp_avg": Adam first moment (fp32) */
    ZS_CKPT_STATE_EXP_AVG_SQ = 2, /* "exp_avg_sq": Adam second moment (fp32) */
    ZS_CKPT_STATE_MOMENTUM = 3,   /* "momentum": SGD momentum buffer (fp32) */
    ZS_CKPT_STATE_USER_GLOBAL = 4,/* "user_global": bytes, the same for every rank */
    ZS_CKPT_STATE_USER_RANK = 5   /* "user_rank": bytes of the file's rank */
} zs__ckpt_state;

typedef struct zs__ckpt_unit {
    char name[ZS_CKPT_NAME_MAX + 1];
} zs__ckpt_unit;

/* A base's path as declared (zs_set_frozen_base), at most this long. */
#define ZS_CKPT_BASE_PATH_MAX 4095

typedef struct zs__ckpt_param {
    char name[ZS_CKPT_NAME_MAX + 1];
    int unit;                        /* index into units */
    int ndim;
    int64_t shape[ZS_CKPT_MAX_DIMS];
    unsigned flags;                  /* ZS_PARAM_* */
} zs__ckpt_param;

typedef struct zs__ckpt_file {
    char name[ZS_CKPT_FILE_NAME_MAX + 1]; /* [A-Za-z0-9._-], no "..", no '/' */
    int rank;
    zs__ckpt_file_kind kind;
    uint64_t bytes;
    uint64_t xxh3;                   /* of the whole file */
} zs__ckpt_file;

typedef struct zs__ckpt_tensor {
    int file;                        /* index into files */
    char key[2 * ZS_CKPT_NAME_MAX + 16]; /* the tensor's name inside the file */
    zs__ckpt_state state;
    int param;                       /* index into params; -1 for user state */
    int64_t offset;                  /* first element within the parameter (0 for user state) */
    int64_t count;                   /* elements (bytes for user state) */
    uint64_t xxh3;                   /* of the tensor's bytes */
} zs__ckpt_tensor;

typedef struct zs__ckpt_scaler {
    double scale;
    int64_t cur_iter;
    int64_t last_overflow_iter;
    int cur_hysteresis;
    int64_t consecutive_overflows;
    int64_t overflows_total;
} zs__ckpt_scaler;

typedef struct zs__manifest {
    int version;                     /* ZS_CKPT_VERSION */
    int64_t step;                    /* optimizer steps applied */
    int64_t skipped_total;
    int world_size;                  /* of the saving run */
    int stage;
    uint64_t config_hash;
    zs_dtype compute_dtype;
    int optimizer;                   /* zs__optimizer_kind of the saving run */
    zs__ckpt_scaler scaler;
    int unit_count;
    zs__ckpt_unit *units;
    int param_count;
    zs__ckpt_param *params;
    int file_count;
    zs__ckpt_file *files;
    int tensor_count;
    zs__ckpt_tensor *tensors;
    /* The frozen base the saving run's frozen values were (zs_set_frozen_base):
     * with has_base its frozen parameters have no tensor here; their values
     * are the base's, whose hash (frozen_base.h) a load or export checks. */
    int has_base;
    char base_path[ZS_CKPT_BASE_PATH_MAX + 1];
    char base_prefix[ZS_CKPT_NAME_MAX + 1];
    uint64_t base_xxh3;
    int base_tensors;                /* the frozen parameters */
} zs__manifest;

const char *zs__ckpt_state_name(zs__ckpt_state state);
const char *zs__ckpt_file_kind_name(zs__ckpt_file_kind kind);
/* The file kind a state lives in: master in master, the optimizer's moments
 * in optim, user state in user (the one mapping the save, the manifest
 * checks and the verifier share). */
zs__ckpt_file_kind zs__ckpt_state_file_kind(zs__ckpt_state state);
/* A shard's name in a step directory: rank%05d.<kind>.safetensors. */
void zs__ckpt_shard_name(char *out, size_t cap, int rank, zs__ckpt_file_kind kind);

/* Serializes with json-c (hashes as 16 lowercase hex digits, 64-bit integers
 * as JSON integers). *text is malloc'ed, NUL-terminated; *bytes its length. */
zs_status zs__manifest_to_json(const zs__manifest *m, char **text, size_t *bytes);

/* Parses and validates; `where` names the source in messages (a path).
 * Validation: the format string and version; every field present with the
 * right JSON type; counts within ZS_CKPT_MAX_ENTRIES; names within limits,
 * without NUL, '/' or ".."; file names of [A-Za-z0-9._-] only; indices in
 * range; world_size >= 1, 0 <= stage <= 3, file ranks < world_size;
 * per tensor 0 <= offset, count >= 0, offset + count <= the parameter's
 * element count (shape product, overflow-checked); for each (param, state)
 * present, the tensors do not overlap and cover [0, numel) exactly; master
 * is present for every parameter. The first failure is reported as
 * "<where>: <what>" with ZS_ERR_INVALID_ARGUMENT. */
zs_status zs__manifest_from_json(const char *text, size_t bytes, const char *where,
                                 zs__manifest **out);

/* The semantic checks of zs__manifest_from_json (everything after the JSON
 * types: names, indices, ranges, coverage) on a manifest in memory;
 * zs__manifest_to_json runs them too, so an invalid manifest is never written. */
zs_status zs__manifest_validate(const zs__manifest *m, const char *where);

/* Allocates a manifest with the given counts (arrays zeroed); free with
 * zs__manifest_free. */
zs_status zs__manifest_alloc(int units, int params, int files, int tensors, zs__manifest **out);
void zs__manifest_free(zs__manifest *m); /* NULL is a no-op */

/* Element count of a parameter (shape product); -1 on overflow. */
int64_t zs__ckpt_param_numel(const zs__ckpt_param *p);

#endif
