/* zs-ckpt export: the full, unsharded model of a step directory as one
 * safetensors file, one tensor per parameter with its original name and
 * shape, in fp32, bf16 or fp16.
 *
 * Memory is bounded by --buffer-bytes, not by the model: the header is
 * written first from the manifest (zs__st_stream_open), then each parameter
 * is assembled in pieces of at most the buffer from the master tensors that
 * cover it (each rank's owned range), converted, and appended. Only master
 * files are read, and each is verified first (size, header, the exact set of
 * tensors and each tensor's XXH3), so no value is used before its hash
 * matched. The output is written to <out>.tmp and renamed, so a failed or
 * interrupted export never leaves a file under the requested name.
 *
 * Besides the buffer, memory holds metadata proportional to the number of
 * tensors (the manifest, indices, the headers of open shard files), never to
 * the number of elements. */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "ckpt_tool.h"
#include "core/error.h"
#include "core/fs.h"

/* File descriptors export leaves to everything but the shard cache: stdio,
 * the output file, and whatever the C library and json-c open. */
#define ZS_TOOL_FD_RESERVE 16

/* Master shard files kept open while parameters are assembled. A parameter
 * is usually covered by consecutive ranks, so keeping files open saves
 * re-parsing headers; the number open is bounded by the process's
 * descriptor limit, and the least recently used file is closed beyond it. */
typedef struct shard_cache {
    const zs__ckpt_step *step;
    const zs__manifest *m;
    zs__st_file **files; /* by manifest file index; NULL when closed */
    uint64_t *last_use;
    uint64_t clock;
    int open, capacity;
} shard_cache;

static zs_status cache_init(shard_cache *c, const zs__ckpt_step *step) {
    const zs__manifest *m = step->m;
    memset(c, 0, sizeof *c);
    c->step = step;
    c->m = m;
    size_t n = (size_t)(m->file_count > 0 ? m->file_count : 1);
    c->files = calloc(n, sizeof *c->files);
    c->last_use = calloc(n, sizeof *c->last_use);
    if (!c->files || !c->last_use)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "no memory for %d file handles", m->file_count);
    /* The descriptor limit bounds the cache; without one, every file may stay open. */
    struct rlimit rl;
    long limit = 1024; /* the usual soft limit, if the system will not say */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        limit = rl.rlim_cur == RLIM_INFINITY ? (long)m->file_count + ZS_TOOL_FD_RESERVE + 1
                                              : (long)rl.rlim_cur;
    c->capacity = limit > ZS_TOOL_FD_RESERVE + 1 ? (int)(limit - ZS_TOOL_FD_RESERVE) : 1;
    return ZS_OK;
}

static void cache_destroy(shard_cache *c) {
    if (c->files)
        for (int i = 0; i < c->m->file_count; i++) zs__st_close(c->files[i]);
    free(c->files);
    free(c->last_use);
}

static zs_status cache_get(shard_cache *c, int file, zs__st_file **out) {
    c->last_use[file] = ++c->clock;
    if (c->files[file]) {
        *out = c->files[file];
        return ZS_OK;
    }
    if (c->open >= c->capacity) {
        int victim = -1;
        for (int i = 0; i < c->m->file_count; i++)
            if (c->files[i] && (victim < 0 || c->last_use[i] < c->last_use[victim])) victim = i;
        zs__st_close(c->files[victim]);
        c->files[victim] = NULL;
        c->open--;
    }
    /* The shared checks (openat, no symlinks, regular file, size, metadata). */
    ZS_CHECK(zs__ckpt_open_shard(c->step, file, &c->files[file]));
    c->open++;
    *out = c->files[file];
    return ZS_OK;
}

/* Master tensors ordered by (parameter, offset): the manifest guarantees that
 * a parameter's master tensors cover [0, numel) without overlap, so after
 * sorting they are its consecutive pieces. */
static const zs__manifest *sort_manifest;
static int compare_param_offset(const void *a, const void *b) {
    const zs__ckpt_tensor *x = &sort_manifest->tensors[*(const int *)a];
    const zs__ckpt_tensor *y = &sort_manifest->tensors[*(const int *)b];
    if (x->param != y->param) return x->param < y->param ? -1 : 1;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static zs__st_dtype st_dtype_of(zs_dtype d) {
    return d == ZS_DTYPE_FP16 ? ZS_ST_F16 : d == ZS_DTYPE_BF16 ? ZS_ST_BF16 : ZS_ST_F32;
}

zs_status zs__tool_export(const zs__ckpt_step *step, zs_dtype dtype, uint64_t buffer_bytes,
                          const char *out_path, int quiet, uint64_t *out_bytes) {
    const zs__manifest *m = step->m;
    if (buffer_bytes < ZS_TOOL_MIN_BUFFER_BYTES)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "--buffer-bytes %llu is below the minimum %u",
                        (unsigned long long)buffer_bytes, ZS_TOOL_MIN_BUFFER_BYTES);
    char tmp_path[PATH_MAX];
    int n = snprintf(tmp_path, sizeof tmp_path, "%s.tmp", out_path);
    if (n < 0 || (size_t)n >= sizeof tmp_path)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: path too long", out_path);

    /* The progress line covers the verification (which reads each master
     * file twice) and the output's tensor bytes. */
    const size_t out_size = zs_dtype_size(dtype);
    const uint64_t verify_bytes = zs__ckpt_verify_read_bytes(step, 0, 1, 1);
    uint64_t data_bytes = 0, written = 0;
    for (int p = 0; p < m->param_count; p++) {
        const int64_t numel = zs__ckpt_param_numel(&m->params[p]);
        if (numel > 0) data_bytes += (uint64_t)numel * out_size;
    }
    zs__progress progress;
    zs__progress_begin(&progress, "zs-ckpt export", verify_bytes + data_bytes, quiet);

    /* Verify every master file before any of its values is read. */
    ZS_CHECK(zs__ckpt_verify_files_progress(step, 0, 1, 1, NULL, zs__tool_verify_progress,
                                            &progress));

    zs_status s = ZS_OK;
    int *order = NULL, *first = NULL;
    zs__st_tensor_spec *specs = NULL;
    float *wide = NULL;
    void *narrow = NULL;
    zs__st_stream *stream = NULL;
    shard_cache cache;
    ZS_CHECK_GOTO(cache_init(&cache, step), s, done);

    /* Index the master tensors by parameter. */
    order = malloc(sizeof *order * (size_t)(m->tensor_count > 0 ? m->tensor_count : 1));
    first = malloc(sizeof *first * ((size_t)m->param_count + 1));
    specs = calloc((size_t)(m->param_count > 0 ? m->param_count : 1), sizeof *specs);
    if (!order || !first || !specs) {
        s = zs__fail(ZS_ERR_OUT_OF_MEMORY, "no memory to index %d tensors of %d parameters",
                     m->tensor_count, m->param_count);
        goto done;
    }
    int masters = 0;
    for (int i = 0; i < m->tensor_count; i++)
        if (m->tensors[i].state == ZS_CKPT_STATE_MASTER) order[masters++] = i;
    sort_manifest = m;
    qsort(order, (size_t)masters, sizeof *order, compare_param_offset);
    for (int p = 0, i = 0; p <= m->param_count; p++) {
        while (i < masters && m->tensors[order[i]].param < p) i++;
        first[p] = i;
    }

    /* The header: every parameter, in manifest order, in the export dtype. */
    for (int p = 0; p < m->param_count; p++) {
        const zs__ckpt_param *param = &m->params[p];
        int64_t numel = zs__ckpt_param_numel(param);
        if (numel < 0) {
            s = zs__fail(ZS_ERR_INVALID_ARGUMENT, "parameter %s: element count overflows",
                         param->name);
            goto done;
        }
        specs[p].name = param->name;
        specs[p].dtype = st_dtype_of(dtype);
        specs[p].ndim = param->ndim;
        memcpy(specs[p].shape, param->shape, sizeof(int64_t) * (size_t)param->ndim);
        specs[p].data = NULL;
        specs[p].bytes = (uint64_t)numel * out_size;
    }
    char step_text[32];
    snprintf(step_text, sizeof step_text, "%lld", (long long)m->step);
    const zs__st_meta meta[] = {
        {"format", "zeroshard-export"},
        {"step", step_text},
        {"dtype", zs_dtype_name(dtype)},
    };

    /* The buffers: fp32 values as read, plus their narrowed copy when the
     * export dtype is not fp32; together they fit in buffer_bytes. */
    const uint64_t per_element = sizeof(float) + (dtype == ZS_DTYPE_FP32 ? 0 : out_size);
    const uint64_t piece = buffer_bytes / per_element;
    wide = malloc((size_t)(piece * sizeof(float)));
    if (dtype != ZS_DTYPE_FP32) narrow = malloc((size_t)(piece * out_size));
    if (!wide || (dtype != ZS_DTYPE_FP32 && !narrow)) {
        s = zs__fail(ZS_ERR_OUT_OF_MEMORY, "no memory for a %llu-byte buffer (--buffer-bytes)",
                     (unsigned long long)buffer_bytes);
        goto done;
    }

    ZS_CHECK_GOTO(zs__st_stream_open(tmp_path, specs, m->param_count, meta,
                                     (int)(sizeof meta / sizeof meta[0]), &stream),
                  s, done);
    for (int p = 0; p < m->param_count; p++) {
        const int64_t numel = zs__ckpt_param_numel(&m->params[p]);
        int ti = first[p];
        for (int64_t pos = 0; pos < numel;) {
            const int64_t len = numel - pos < (int64_t)piece ? numel - pos : (int64_t)piece;
            /* Fill [pos, pos + len) from the master tensors that cover it. */
            for (int64_t done_in_piece = 0; done_in_piece < len;) {
                const int64_t at = pos + done_in_piece;
                while (ti < first[p + 1] &&
                       m->tensors[order[ti]].offset + m->tensors[order[ti]].count <= at)
                    ti++;
                if (ti >= first[p + 1] || m->tensors[order[ti]].offset > at) {
                    /* Unreachable for a manifest that passed validation. */
                    s = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                                 "parameter %s: no master tensor covers element %lld",
                                 m->params[p].name, (long long)at);
                    goto done;
                }
                const zs__ckpt_tensor *t = &m->tensors[order[ti]];
                const int64_t in_tensor = t->offset + t->count - at;
                const int64_t take = len - done_in_piece < in_tensor ? len - done_in_piece
                                                                     : in_tensor;
                zs__st_file *sf = NULL;
                ZS_CHECK_GOTO(cache_get(&cache, t->file, &sf), s, done);
                const zs__st_entry *e = zs__st_find(sf, t->key);
                if (!e) {
                    s = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: tensor \"%s\" disappeared",
                                 zs__st_path(sf), t->key);
                    goto done;
                }
                ZS_CHECK_GOTO(zs__st_read(sf, e, (uint64_t)(at - t->offset) * sizeof(float),
                                          wide + done_in_piece, (uint64_t)take * sizeof(float)),
                              s, done);
                done_in_piece += take;
            }
            if (dtype == ZS_DTYPE_FP32) {
                ZS_CHECK_GOTO(zs__st_stream_append(stream, wide, (uint64_t)len * sizeof(float)), s,
                              done);
            } else {
                ZS_CHECK_GOTO(zs_convert(narrow, dtype, wide, ZS_DTYPE_FP32, len), s, done);
                ZS_CHECK_GOTO(zs__st_stream_append(stream, narrow, (uint64_t)len * out_size), s,
                              done);
            }
            pos += len;
            written += (uint64_t)len * out_size;
            zs__progress_update(&progress, verify_bytes + written);
        }
    }
    uint64_t file_bytes = 0;
    s = zs__st_stream_close(stream, NULL, &file_bytes);
    stream = NULL; /* closed (or failed to close) either way */
    if (s != ZS_OK) {
        remove(tmp_path);
        goto done;
    }
    ZS_CHECK_GOTO(zs__fs_rename(tmp_path, out_path), s, done_unlink);
    {
        /* Make the rename durable: fsync the directory that holds the output. */
        char parent[PATH_MAX];
        snprintf(parent, sizeof parent, "%s", out_path);
        ZS_CHECK_GOTO(zs__fs_fsync_dir(dirname(parent)), s, done);
    }
    zs__progress_end(&progress);
    if (out_bytes) *out_bytes = file_bytes;
    goto done;
done_unlink:
    remove(tmp_path);
done:
    zs__st_stream_abort(stream);
    cache_destroy(&cache);
    free(order);
    free(first);
    free(specs);
    free(wide);
    free(narrow);
    return s;
}
