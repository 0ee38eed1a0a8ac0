/* The frozen base a checkpoint recorded instead of copying its values
 * (manifest.h: has_base; zeroshard.h: zs_set_frozen_base), read back for the
 * exports: the recorded path opened as zs_params_import_safetensors opens
 * it (a directory, an index or a file), every frozen parameter's tensor
 * found under the recorded prefix with the parameter's element count, the
 * tensors hashed and combined exactly as the runtime did
 * (zs__frozen_base_digest), and the result compared with the recorded hash
 * before a value is used: a base that changed since the save is refused,
 * naming both hashes. Values are read with pread and widened to fp32 by
 * the runtime's conversion (zs_convert), as an import reads them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/frozen_base.h"
#include "checkpoint/hf_index.h"
#include "ckpt_tool.h"
#include "core/error.h"

/* 16-bit values widened per pass. */
#define BASE_NARROW_ELEMENTS 65536

struct zs__tool_base {
    const zs__manifest *m;
    zs__hf_layout *layout;
    zs__st_file **files;           /* by layout file, opened when first needed */
    const zs__st_entry **entries;  /* by parameter; NULL for a trainable one */
    const zs__st_file **file_of;   /* by parameter: the file of its entry */
    uint16_t *narrow;
};

void zs__tool_base_close(zs__tool_base *b) {
    if (!b) return;
    for (int f = 0; b->layout && b->files && f < b->layout->file_count; f++) zs__st_close(b->files[f]);
    free(b->files);
    free(b->entries);
    free(b->file_of);
    free(b->narrow);
    zs__hf_layout_free(b->layout);
    free(b);
}

/* Parameter p's tensor in the base, its file opened on first use. */
static zs_status find_tensor(zs__tool_base *b, int p) {
    const zs__manifest *m = b->m;
    char name[2 * ZS_CKPT_NAME_MAX + 2];
    snprintf(name, sizeof name, "%s%s", m->base_prefix, m->params[p].name);
    const int f = zs__hf_layout_file_of(b->layout, name);
    if (f < 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "the frozen base %s: the index lists no tensor "
                        "\"%s\"", b->layout->source, name);
    if (!b->files[f]) {
        char *path = zs__hf_layout_path(b->layout, f);
        const zs__st_limits limits = {.name_tensors = 1, .follow_symlinks = 1};
        const zs_status st = path ? zs__st_open_limited(path, &limits, &b->files[f])
                                  : zs__fail(ZS_ERR_OUT_OF_MEMORY, "no memory for a path");
        free(path);
        ZS_CHECK(st);
    }
    const zs__st_entry *e = zs__st_find(b->files[f], name);
    int64_t numel = 1;
    for (int d = 0; e && d < e->ndim; d++) numel *= e->shape[d];
    if (!e || numel != zs__ckpt_param_numel(&m->params[p]) ||
        (e->dtype != ZS_ST_F32 && e->dtype != ZS_ST_BF16 && e->dtype != ZS_ST_F16))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: %s \"%s\" (the checkpoint's frozen "
                        "parameter of %lld elements, F32, BF16 or F16)",
                        zs__st_path(b->files[f]), e ? "a tensor unlike" : "no tensor", name,
                        (long long)zs__ckpt_param_numel(&m->params[p]));
    b->entries[p] = e;
    b->file_of[p] = b->files[f];
    return ZS_OK;
}

zs_status zs__tool_base_open(const zs__manifest *m, zs__tool_base **out) {
    *out = NULL;
    if (!m->has_base) return ZS_OK;
    zs__tool_base *b = calloc(1, sizeof *b);
    const char **names = calloc((size_t)m->param_count + 1, sizeof *names);
    uint64_t *hashes = calloc((size_t)m->param_count + 1, sizeof *hashes);
    zs_status st = b && names && hashes ? ZS_OK
                                        : zs__fail(ZS_ERR_OUT_OF_MEMORY, "no memory for the "
                                                   "frozen base");
    if (st == ZS_OK) {
        b->m = m;
        /* The index's bounds: what the checkpoint's parameters could need,
         * as the import derives them, generously. */
        const zs__hf_index_limits limits = {(size_t)64 << 20, 4 * m->param_count + 1024,
                                            "the checkpoint's parameters"};
        st = zs__hf_layout_open(m->base_path, &limits, &b->layout);
    }
    if (st == ZS_OK) {
        b->files = calloc((size_t)b->layout->file_count, sizeof *b->files);
        b->entries = calloc((size_t)m->param_count + 1, sizeof *b->entries);
        b->file_of = calloc((size_t)m->param_count + 1, sizeof *b->file_of);
        b->narrow = malloc(sizeof *b->narrow * BASE_NARROW_ELEMENTS);
        if (!b->files || !b->entries || !b->file_of || !b->narrow)
            st = zs__fail(ZS_ERR_OUT_OF_MEMORY, "no memory for the frozen base");
    }
    int n = 0;
    for (int p = 0; st == ZS_OK && p < m->param_count; p++) {
        if (!(m->params[p].flags & ZS_PARAM_FROZEN)) continue;
        st = find_tensor(b, p);
        if (st == ZS_OK) st = zs__st_hash_entry(b->file_of[p], b->entries[p], &hashes[n]);
        names[n++] = m->params[p].name;
    }
    uint64_t digest = 0;
    if (st == ZS_OK && !zs__frozen_base_digest(n, names, hashes, &digest))
        st = zs__fail(ZS_ERR_OUT_OF_MEMORY, "no memory for the frozen base's hash");
    if (st == ZS_OK && (digest != m->base_xxh3 || n != m->base_tensors))
        st = zs__fail(ZS_ERR_INVALID_ARGUMENT, "the frozen base %s changed since the checkpoint "
                      "was saved on it: its %d frozen tensors hash to %016llx, the checkpoint "
                      "recorded %d tensors of xxh3 %016llx; the export needs the base it was "
                      "trained on",
                      m->base_path, n, (unsigned long long)digest, m->base_tensors,
                      (unsigned long long)m->base_xxh3);
    free(names);
    free(hashes);
    if (st != ZS_OK) {
        zs__tool_base_close(b);
        return zs__fail_context(st, "the checkpoint's frozen base");
    }
    *out = b;
    return ZS_OK;
}

int zs__tool_base_holds(const zs__tool_base *b, int p) {
    return b != NULL && b->entries[p] != NULL;
}

zs_status zs__tool_base_read(zs__tool_base *b, int p, int64_t first, int64_t count, float *dst) {
    const zs__st_entry *e = b->entries[p];
    const zs__st_file *f = b->file_of[p];
    const size_t size = zs__st_dtype_size(e->dtype);
    if (e->dtype == ZS_ST_F32)
        return zs__st_read(f, e, (uint64_t)first * size, dst, (uint64_t)count * size);
    const zs_dtype from = e->dtype == ZS_ST_BF16 ? ZS_DTYPE_BF16 : ZS_DTYPE_FP16;
    for (int64_t done = 0; done < count; done += BASE_NARROW_ELEMENTS) {
        const int64_t n = count - done < BASE_NARROW_ELEMENTS ? count - done : BASE_NARROW_ELEMENTS;
        ZS_CHECK(zs__st_read(f, e, (uint64_t)(first + done) * size, b->narrow, (uint64_t)n * size));
        ZS_CHECK(zs_convert(dst + done, ZS_DTYPE_FP32, b->narrow, from, n));
    }
    return ZS_OK;
}
