/* zs-ckpt export: the full, unsharded model of a step directory as one
 * safetensors file, one tensor per parameter with its original name and
 * shape, in fp32, bf16 or fp16; and the parameter reader both exports
 * stream from (this one and the Hugging Face layout of ckpt_export_hf.c).
 *
 * Memory is bounded by --buffer-bytes, not by the model: the header is
 * written first from the manifest (zs__st_stream_open), then each parameter
 * is assembled in pieces of at most the buffer from the master tensors that
 * cover it (each rank's owned range), converted, and appended. Only master
 * files are read for values, and every file but the optimizer state's is
 * verified first with zs_load's and `zs-ckpt verify`'s own checks (size,
 * header, the exact set of tensors and each tensor's XXH3): no value is used
 * before its hash matched, and a checkpoint whose model or user state those
 * refuse is refused with the same message (the optimizer state is not
 * needed, and may have been deleted). The output is written to <out>.tmp and
 * renamed, so a failed or
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

struct zs__tool_reader {
    const zs__ckpt_step *step;
    const zs__manifest *m;
    shard_cache cache;
    int cache_ready;
    int *order;          /* master tensors ordered by (parameter, offset) */
    int *first;          /* [param_count + 1]: each parameter's run in order */
    zs_dtype dtype;      /* of the output */
    size_t out_size;
    uint64_t piece;      /* elements per pass through the buffers */
    float *wide;         /* [piece] fp32 values as read */
    void *narrow;        /* [piece] converted, when dtype is not fp32 */
    zs__tool_base *base; /* the recorded frozen base, or NULL */
    zs__progress *progress;
    uint64_t progress_base; /* the work before the data (the verification) */
    uint64_t written;       /* output tensor bytes appended so far */
};

static zs__st_dtype st_dtype_of(zs_dtype d) {
    return d == ZS_DTYPE_FP16 ? ZS_ST_F16 : d == ZS_DTYPE_BF16 ? ZS_ST_BF16 : ZS_ST_F32;
}

uint64_t zs__tool_data_bytes(const zs__manifest *m, zs_dtype dtype) {
    uint64_t bytes = 0;
    for (int p = 0; p < m->param_count; p++) {
        const int64_t numel = zs__ckpt_param_numel(&m->params[p]);
        if (numel > 0) bytes += (uint64_t)numel * zs_dtype_size(dtype);
    }
    return bytes;
}

zs_status zs__tool_param_spec(const zs__manifest *m, int p, zs_dtype dtype,
                              zs__st_tensor_spec *spec) {
    const zs__ckpt_param *param = &m->params[p];
    const int64_t numel = zs__ckpt_param_numel(param);
    if (numel < 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "parameter %s: element count overflows",
                        param->name);
    memset(spec, 0, sizeof *spec);
    spec->name = param->name;
    spec->dtype = st_dtype_of(dtype);
    spec->ndim = param->ndim;
    memcpy(spec->shape, param->shape, sizeof(int64_t) * (size_t)param->ndim);
    spec->bytes = (uint64_t)numel * zs_dtype_size(dtype);
    return ZS_OK;
}

void zs__tool_reader_close(zs__tool_reader *r) {
    if (!r) return;
    if (r->cache_ready) cache_destroy(&r->cache);
    zs__tool_base_close(r->base);
    free(r->order);
    free(r->first);
    free(r->wide);
    free(r->narrow);
    free(r);
}

zs_status zs__tool_reader_open(const zs__ckpt_step *step, zs_dtype dtype, uint64_t buffer_bytes,
                               zs__progress *progress, zs__tool_reader **out) {
    const zs__manifest *m = step->m;
    *out = NULL;
    if (buffer_bytes < ZS_TOOL_MIN_BUFFER_BYTES)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "--buffer-bytes %llu is below the minimum %u",
                        (unsigned long long)buffer_bytes, ZS_TOOL_MIN_BUFFER_BYTES);
    /* Verify every file but the optimizer state's (1: without_optim) before
     * any value is read. The progress line covers the verification (which
     * reads each of those files twice) and then the output's tensor bytes. */
    const uint64_t verify_bytes = zs__ckpt_verify_read_bytes(step, 0, 1, 1);
    ZS_CHECK(zs__ckpt_verify_files_progress(step, 0, 1, 1, NULL, zs__tool_verify_progress,
                                            progress));
    zs_status s = ZS_OK;
    zs__tool_reader *r = calloc(1, sizeof *r);
    if (!r) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "no memory for the parameter reader");
    r->step = step;
    r->m = m;
    r->dtype = dtype;
    r->out_size = zs_dtype_size(dtype);
    r->progress = progress;
    r->progress_base = verify_bytes;
    ZS_CHECK_GOTO(cache_init(&r->cache, step), s, fail);
    r->cache_ready = 1;
    ZS_CHECK_GOTO(zs__tool_base_open(m, &r->base), s, fail);

    /* Index the master tensors by parameter. */
    r->order = malloc(sizeof *r->order * (size_t)(m->tensor_count > 0 ? m->tensor_count : 1));
    r->first = malloc(sizeof *r->first * ((size_t)m->param_count + 1));
    if (!r->order || !r->first) {
        s = zs__fail(ZS_ERR_OUT_OF_MEMORY, "no memory to index %d tensors of %d parameters",
                     m->tensor_count, m->param_count);
        goto fail;
    }
    int masters = 0;
    for (int i = 0; i < m->tensor_count; i++)
        if (m->tensors[i].state == ZS_CKPT_STATE_MASTER) r->order[masters++] = i;
    sort_manifest = m;
    qsort(r->order, (size_t)masters, sizeof *r->order, compare_param_offset);
    for (int p = 0, i = 0; p <= m->param_count; p++) {
        while (i < masters && m->tensors[r->order[i]].param < p) i++;
        r->first[p] = i;
    }

    /* The buffers: fp32 values as read, plus their narrowed copy when the
     * export dtype is not fp32; together they fit in buffer_bytes. */
    const uint64_t per_element = sizeof(float) + (dtype == ZS_DTYPE_FP32 ? 0 : r->out_size);
    r->piece = buffer_bytes / per_element;
    r->wide = malloc((size_t)(r->piece * sizeof(float)));
    if (dtype != ZS_DTYPE_FP32) r->narrow = malloc((size_t)(r->piece * r->out_size));
    if (!r->wide || (dtype != ZS_DTYPE_FP32 && !r->narrow)) {
        s = zs__fail(ZS_ERR_OUT_OF_MEMORY, "no memory for a %llu-byte buffer (--buffer-bytes)",
                     (unsigned long long)buffer_bytes);
        goto fail;
    }
    *out = r;
    return ZS_OK;
fail:
    zs__tool_reader_close(r);
    return s;
}

/* Elements [pos, pos + len) of parameter p from the master tensors that
 * cover them, into dst (fp32); *cursor is the position among p's tensors,
 * which only moves forward. */
static zs_status fill(zs__tool_reader *r, int p, int64_t pos, int64_t len, float *dst,
                      int *cursor) {
    const zs__manifest *m = r->m;
    if (zs__tool_base_holds(r->base, p)) return zs__tool_base_read(r->base, p, pos, len, dst);
    int ti = *cursor;
    for (int64_t done_in_piece = 0; done_in_piece < len;) {
        const int64_t at = pos + done_in_piece;
        while (ti < r->first[p + 1] &&
               m->tensors[r->order[ti]].offset + m->tensors[r->order[ti]].count <= at)
            ti++;
        if (ti >= r->first[p + 1] || m->tensors[r->order[ti]].offset > at)
            /* Unreachable for a manifest that passed validation. */
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "parameter %s: no master tensor covers element %lld",
                            m->params[p].name, (long long)at);
        const zs__ckpt_tensor *t = &m->tensors[r->order[ti]];
        const int64_t in_tensor = t->offset + t->count - at;
        const int64_t take = len - done_in_piece < in_tensor ? len - done_in_piece : in_tensor;
        zs__st_file *sf = NULL;
        ZS_CHECK(cache_get(&r->cache, t->file, &sf));
        const zs__st_entry *e = zs__st_find(sf, t->key);
        if (!e)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: tensor \"%s\" disappeared",
                            zs__st_path(sf), t->key);
        ZS_CHECK(zs__st_read(sf, e, (uint64_t)(at - t->offset) * sizeof(float),
                             dst + done_in_piece, (uint64_t)take * sizeof(float)));
        done_in_piece += take;
    }
    *cursor = ti;
    return ZS_OK;
}

zs_status zs__tool_reader_read(zs__tool_reader *r, int p, float *out) {
    int cursor = r->first[p];
    return fill(r, p, 0, zs__ckpt_param_numel(&r->m->params[p]), out, &cursor);
}

zs_status zs__tool_reader_append(zs__tool_reader *r, int p, zs__st_stream *stream) {
    const zs__manifest *m = r->m;
    const int64_t numel = zs__ckpt_param_numel(&m->params[p]);
    int ti = r->first[p];
    for (int64_t pos = 0; pos < numel;) {
        const int64_t len = numel - pos < (int64_t)r->piece ? numel - pos : (int64_t)r->piece;
        ZS_CHECK(fill(r, p, pos, len, r->wide, &ti));
        if (r->dtype == ZS_DTYPE_FP32) {
            ZS_CHECK(zs__st_stream_append(stream, r->wide, (uint64_t)len * sizeof(float)));
        } else {
            ZS_CHECK(zs_convert(r->narrow, r->dtype, r->wide, ZS_DTYPE_FP32, len));
            ZS_CHECK(zs__st_stream_append(stream, r->narrow, (uint64_t)len * r->out_size));
        }
        pos += len;
        r->written += (uint64_t)len * r->out_size;
        zs__progress_update(r->progress, r->progress_base + r->written);
    }
    return ZS_OK;
}

zs_status zs__tool_export(const zs__ckpt_step *step, zs_dtype dtype, uint64_t buffer_bytes,
                          const char *out_path, int quiet, uint64_t *out_bytes) {
    const zs__manifest *m = step->m;
    char tmp_path[PATH_MAX];
    int n = snprintf(tmp_path, sizeof tmp_path, "%s.tmp", out_path);
    if (n < 0 || (size_t)n >= sizeof tmp_path)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: path too long", out_path);

    zs__progress progress;
    zs__progress_begin(&progress, "zs-ckpt export",
                       zs__ckpt_verify_read_bytes(step, 0, 1, 1) + zs__tool_data_bytes(m, dtype),
                       quiet);
    zs__tool_reader *reader = NULL;
    ZS_CHECK(zs__tool_reader_open(step, dtype, buffer_bytes, &progress, &reader));

    zs_status s = ZS_OK;
    zs__st_stream *stream = NULL;
    zs__st_tensor_spec *specs = calloc((size_t)(m->param_count > 0 ? m->param_count : 1),
                                       sizeof *specs);
    if (!specs) {
        s = zs__fail(ZS_ERR_OUT_OF_MEMORY, "no memory for %d tensor specs", m->param_count);
        goto done;
    }
    /* The header: every parameter, in manifest order, in the export dtype. */
    for (int p = 0; p < m->param_count; p++)
        ZS_CHECK_GOTO(zs__tool_param_spec(m, p, dtype, &specs[p]), s, done);
    char step_text[32];
    snprintf(step_text, sizeof step_text, "%lld", (long long)m->step);
    /* "pt": transformers refuses a file whose format is not pt, tf, flax or
     * mlx, and the tensors are what torch would save. */
    const zs__st_meta meta[] = {
        {"format", "pt"},
        {"step", step_text},
        {"dtype", zs_dtype_name(dtype)},
    };
    ZS_CHECK_GOTO(zs__st_stream_open(tmp_path, specs, m->param_count, meta,
                                     (int)(sizeof meta / sizeof meta[0]), &stream),
                  s, done);
    for (int p = 0; p < m->param_count; p++)
        ZS_CHECK_GOTO(zs__tool_reader_append(reader, p, stream), s, done);
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
    zs__tool_reader_close(reader);
    free(specs);
    return s;
}
