/* zs_params_import_safetensors: a Hugging Face checkpoint's tensors as the
 * parameters of the same names (zeroshard.h).
 *
 * Two phases. First every rank resolves the layout (hf_index.h), opens the
 * files that hold the ranges it keeps, under header bounds derived from the
 * parameters each file should hold (zs__st_open_limited), and checks every
 * name, shape and dtype there; the ranks then agree, so a hostile file seen
 * by one rank fails every rank with its message before any value is used.
 * Then zs_params_import asks each rank for its ranges, which are read with
 * pread and widened to fp32 by the runtime's own conversion (zs_convert). */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/frozen_base.h"
#include "checkpoint/hf_index.h"
#include "checkpoint/safetensors.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "zero/agree.h"
#include "zero/ground.h"
#include "zero/state_io.h"
#include "zero/state_layout.h"

/* Tensors a file may hold beyond the parameters it is expected to hold
 * (buffers a checkpoint carries, such as one rotary_emb.inv_freq per layer
 * of older Llama checkpoints): this many, plus as many as those parameters. */
#define HF_EXTRA_TENSORS 256
/* Each extra tensor's header entry is bounded as one of a 128-byte name and
 * 4 dimensions; parameters' entries at twice their exact bound (whitespace
 * of other writers). */
#define HF_EXTRA_NAME_BYTES 128
#define HF_EXTRA_DIMS 4
/* Bytes for __metadata__ and padding beyond the entries. */
#define HF_HEADER_SLACK ((uint64_t)64 << 10)
/* 16-bit values read and widened per pass: the host memory of the import
 * beyond zs_params_import's own chunk. */
#define HF_NARROW_ELEMENTS ((int64_t)1 << 18)
/* Room for a name in a message, escaped (zs__st_printable). */
#define HF_SHOWN_BYTES (4 * ZS_ST_NAME_MAX + 8)
/* Missing tensors a message names (the rest are counted), and ignored ones
 * the import's INFO line names. */
#define HF_MISSING_SHOWN 4
#define HF_IGNORED_SHOWN 3
/* The dtypes parameters are imported from, as a refusal lists them. */
#define HF_DTYPES "F32, BF16 and F16, the dtypes parameters are imported from"

typedef struct hf_param {
    int file;                  /* layout file that holds it */
    const zs__st_entry *entry; /* its tensor, once the file is open on this rank */
} hf_param;

typedef struct hf_import {
    zs_ctx *zs;
    const zs_safetensors_import *options;
    zs__hf_layout *layout;
    zs__st_file **files;       /* by layout file; NULL where this rank does not read */
    hf_param *params;          /* by parameter index */
    const zs_param **by_name;  /* parameters sorted by name */
    void *narrow;              /* [HF_NARROW_ELEMENTS] 16-bit values before widening */
    zs_import_report report;
    /* The first tensors the ignore patterns skipped, escaped, for the INFO
     * line (a tied head's lm_head.weight copy is one). */
    char ignored_names[HF_IGNORED_SHOWN][HF_SHOWN_BYTES];
} hf_import;

static int compare_param_names(const void *a, const void *b) {
    return strcmp((*(const zs_param *const *)a)->name, (*(const zs_param *const *)b)->name);
}

/* The prefix the file's tensor names carry before the parameters' names. */
static const char *prefix_of(const hf_import *imp) {
    return imp->options && imp->options->name_prefix ? imp->options->name_prefix : "";
}

/* The file's name of parameter p: the prefix and its name. */
static const char *tensor_name(const hf_import *imp, const zs_param *p, char *out, size_t cap) {
    snprintf(out, cap, "%s%s", prefix_of(imp), p->name);
    return out;
}

/* The parameter the file's tensor `name` holds, or NULL. */
static const zs_param *find_param(const hf_import *imp, const char *name) {
    const size_t skip = strlen(prefix_of(imp));
    if (strncmp(name, prefix_of(imp), skip) != 0) return NULL;
    name += skip;
    zs_param probe;
    const zs_param *key = &probe;
    if (strlen(name) >= sizeof probe.name) return NULL;
    strcpy(probe.name, name);
    const zs_param **hit = bsearch(&key, imp->by_name, (size_t)imp->zs->param_count,
                                   sizeof *imp->by_name, compare_param_names);
    return hit ? *hit : NULL;
}

static int ignored(const hf_import *imp, const char *name) {
    const zs_safetensors_import *o = imp->options;
    for (int k = 0; o && k < o->ignore_count; k++)
        if (o->ignore[k] && fnmatch(o->ignore[k], name, 0) == 0) return 1;
    return 0;
}

/* Counts a skipped tensor, keeping the first names for the INFO line. */
static void count_ignored(hf_import *imp, const char *name) {
    const int k = imp->report.tensors_ignored++;
    if (k < HF_IGNORED_SHOWN) zs__st_printable(name, imp->ignored_names[k], HF_SHOWN_BYTES);
}

static const char *shape_text(int ndim, const int64_t *shape, char *out, size_t cap) {
    size_t at = (size_t)snprintf(out, cap, "[");
    for (int d = 0; d < ndim && at < cap; d++)
        at += (size_t)snprintf(out + at, cap - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (at < cap) snprintf(out + at, cap - at, "]");
    return out;
}

static const char *shown(const char *name, char *out) {
    zs__st_printable(name, out, HF_SHOWN_BYTES);
    return out;
}

/* ------------------------------------------------------------- bounds */

/* A header entry's bound for parameter p (its name with the file's
 * prefix), doubled for other writers' whitespace. */
static uint64_t param_header_bytes(const hf_import *imp, const zs_param *p) {
    return 2 * zs__st_entry_bytes_bound(strlen(prefix_of(imp)) + strlen(p->name), p->ndim);
}

/* The header bounds of a file expected to hold the given parameters. */
static zs__st_limits file_limits(int expected, uint64_t entry_bytes, const char *words) {
    const int extra = HF_EXTRA_TENSORS + expected;
    zs__st_limits limits = {0};
    limits.max_tensors = expected + extra;
    limits.max_header_bytes =
        entry_bytes + (uint64_t)extra * zs__st_entry_bytes_bound(HF_EXTRA_NAME_BYTES,
                                                                  HF_EXTRA_DIMS) +
        HF_HEADER_SLACK;
    limits.expected = words;
    limits.name_tensors = 1;
    limits.follow_symlinks = 1;
    limits.dtypes = HF_DTYPES;
    /* A tensor whose entry was removed from the header leaves its bytes
     * behind as a gap; check_file names the missing tensor before the
     * gap's byte range is reported. */
    limits.report_holes = 1;
    return limits;
}

/* ------------------------------------------------------------- checks */

/* A parameter this import does not look for: trainable ones with
 * frozen_only (a fine-tune's adapters, not in the base's files), frozen
 * ones with trainable_only (the base, not in the adapters' file). */
static int skipped(const hf_import *imp, const zs_param *p) {
    const int frozen = (p->flags & ZS_PARAM_FROZEN) != 0;
    return imp->options && ((imp->options->frozen_only && !frozen) ||
                            (imp->options->trainable_only && frozen));
}

/* The index against the model: every parameter listed, nothing listed that
 * is neither a parameter nor ignored. */
static zs_status check_index(hf_import *imp) {
    const zs__hf_layout *l = imp->layout;
    char name[HF_SHOWN_BYTES], dims[160];
    for (int i = 0; i < imp->zs->param_count; i++) {
        const zs_param *p = imp->zs->params[i];
        char tname[ZS_NAME_CAPACITY + 256];
        imp->params[i].file =
            skipped(imp, p) ? -1 : zs__hf_layout_file_of(l, tensor_name(imp, p, tname, sizeof tname));
        if (imp->params[i].file < 0 && !skipped(imp, p))
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: missing tensor \"%s\": the model's parameter of shape %s is not "
                            "in the weight_map",
                            l->source, shown(tname, name),
                            shape_text(p->ndim, p->shape, dims, sizeof dims));
    }
    for (int e = 0; l->indexed && e < l->entry_count; e++) {
        const char *tensor = l->entries[e].name;
        if (find_param(imp, tensor)) continue;
        if (ignored(imp, tensor)) {
            count_ignored(imp, tensor);
            continue;
        }
        char file[HF_SHOWN_BYTES];
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: unexpected tensor \"%s\" (in %s): the model has no parameter of "
                        "that name; skip it with an ignore pattern "
                        "(zs_safetensors_import.ignore) if it is not meant to be one",
                        l->source, shown(tensor, name), shown(l->files[l->entries[e].file], file));
    }
    return ZS_OK;
}

/* Opens file f under bounds from the parameters it should hold. */
static zs_status open_file(hf_import *imp, int f) {
    const zs__hf_layout *l = imp->layout;
    int expected = 0;
    uint64_t entry_bytes = 0;
    for (int i = 0; i < imp->zs->param_count; i++)
        if (imp->params[i].file == f) {
            expected++;
            entry_bytes += param_header_bytes(imp, imp->zs->params[i]);
        }
    /* Ignored tensors an index lists in this file are expected too. */
    for (int e = 0; l->indexed && e < l->entry_count; e++)
        if (l->entries[e].file == f && !find_param(imp, l->entries[e].name)) {
            expected++;
            entry_bytes += 2 * zs__st_entry_bytes_bound(strlen(l->entries[e].name), ZS_ST_MAX_DIMS);
        }
    char words[96];
    snprintf(words, sizeof words, "the %d tensor%s expected there", expected,
             expected == 1 ? "" : "s");
    const zs__st_limits limits = file_limits(expected, entry_bytes, words);
    char *path = zs__hf_layout_path(l, f);
    if (!path) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate a path", l->source);
    zs_status status = zs__st_open_limited(path, &limits, &imp->files[f]);
    free(path);
    ZS_CHECK(status);
    imp->report.files_opened++;
    return ZS_OK;
}

/* The parameters the layout puts in open file f but its header lacks, all
 * named in one message (HF_MISSING_SHOWN of them, the rest counted), with
 * the bytes no tensor covers where the header lost their entries. */
static zs_status check_missing(hf_import *imp, int f) {
    const zs__hf_layout *l = imp->layout;
    const zs__st_file *sf = imp->files[f];
    char list[HF_MISSING_SHOWN * (HF_SHOWN_BYTES + 192)], name[HF_SHOWN_BYTES], dims[160];
    size_t at = 0;
    int missing = 0;
    list[0] = '\0';
    for (int i = 0; i < imp->zs->param_count; i++) {
        const zs_param *p = imp->zs->params[i];
        char tname[ZS_NAME_CAPACITY + 256];
        if (skipped(imp, p) || imp->params[i].file != f ||
            zs__st_find(sf, tensor_name(imp, p, tname, sizeof tname)))
            continue;
        if (missing++ < HF_MISSING_SHOWN && at < sizeof list)
            at += (size_t)snprintf(list + at, sizeof list - at, "%s\"%s\" (shape %s)",
                                   missing > 1 ? ", " : "", shown(tname, name),
                                   shape_text(p->ndim, p->shape, dims, sizeof dims));
    }
    if (missing == 0) return ZS_OK;
    const int one = missing == 1;
    char more[64] = "", hole[160] = "";
    if (missing > HF_MISSING_SHOWN)
        snprintf(more, sizeof more, " and %d more", missing - HF_MISSING_SHOWN);
    uint64_t begin, end;
    if (zs__st_hole(sf, &begin, &end))
        snprintf(hole, sizeof hole,
                 "; data bytes %llu..%llu belong to no tensor: the header lost %s, not %s bytes",
                 (unsigned long long)begin, (unsigned long long)end,
                 one ? "its entry" : "their entries", one ? "its" : "their");
    return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                    "%s: missing tensor%s %s%s: the model has %s, but this file does not hold "
                    "%s%s%s",
                    zs__st_path(sf), one ? "" : "s", list, more,
                    one ? "this parameter" : "these parameters", one ? "it" : "them",
                    l->indexed ? (one ? ", although the index puts it here"
                                      : ", although the index puts them here")
                               : "",
                    hole);
}

/* Every tensor of open file f against the model. */
static zs_status check_file(hf_import *imp, int f) {
    const zs__hf_layout *l = imp->layout;
    const zs__st_file *sf = imp->files[f];
    const char *path = zs__st_path(sf);
    char name[HF_SHOWN_BYTES], other[HF_SHOWN_BYTES], dims[160], want[160];
    for (int k = 0; k < zs__st_count(sf); k++) {
        const zs__st_entry *e = zs__st_entry_at(sf, k);
        if (!find_param(imp, e->name)) {
            if (ignored(imp, e->name)) {
                if (!l->indexed) count_ignored(imp, e->name);
                continue;
            }
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: unexpected tensor \"%s\": the model has no parameter of that "
                            "name; skip it with an ignore pattern (zs_safetensors_import.ignore) "
                            "if it is not meant to be one",
                            path, shown(e->name, name));
        }
        const int listed = zs__hf_layout_file_of(l, e->name);
        if (listed != f)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: tensor \"%s\" is here, but the index %s puts it in %s", path,
                            shown(e->name, name), l->source, shown(l->files[listed], other));
    }
    ZS_CHECK(check_missing(imp, f));
    for (int i = 0; i < imp->zs->param_count; i++) {
        const zs_param *p = imp->zs->params[i];
        if (imp->params[i].file != f) continue;
        char tname[ZS_NAME_CAPACITY + 256];
        const zs__st_entry *e = zs__st_find(sf, tensor_name(imp, p, tname, sizeof tname));
        if (e->dtype != ZS_ST_F32 && e->dtype != ZS_ST_BF16 && e->dtype != ZS_ST_F16)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: tensor \"%s\" has dtype %s; parameters are imported from F32, "
                            "BF16 or F16",
                            path, shown(tname, name), zs__st_dtype_name(e->dtype));
        int same = e->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = e->shape[d] == p->shape[d];
        if (!same)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: tensor \"%s\" has shape %s, but the model's parameter has "
                            "shape %s",
                            path, shown(tname, name), shape_text(e->ndim, e->shape, dims,
                                                                   sizeof dims),
                            shape_text(p->ndim, p->shape, want, sizeof want));
        imp->params[i].entry = e;
    }
    /* Every parameter is here, so bytes no tensor covers are not a lost
     * entry's: the file is not well formed. */
    return zs__st_check_holes(sf);
}

/* The local phase: layout, files this rank reads, every check. */
static zs_status prepare(hf_import *imp, const char *path) {
    zs_ctx *zs = imp->zs;
    const int n = zs->param_count;
    imp->params = zs__calloc((size_t)(n > 0 ? n : 1), sizeof *imp->params);
    imp->by_name = zs__malloc(sizeof *imp->by_name * (size_t)(n > 0 ? n : 1));
    if (!imp->params || !imp->by_name)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate an index of %d parameters",
                        path, n);
    for (int i = 0; i < n; i++) imp->by_name[i] = zs->params[i];
    qsort(imp->by_name, (size_t)n, sizeof *imp->by_name, compare_param_names);

    /* An index is bounded as the headers are: an entry per parameter (the
     * name and a file name, both escaped at worst), and as many extra. */
    char words[64];
    snprintf(words, sizeof words, "a model of %d parameter%s", n, n == 1 ? "" : "s");
    const uint64_t entry_bound = 6 * ((uint64_t)ZS_ST_NAME_MAX + 8);
    uint64_t index_bytes = HF_HEADER_SLACK;
    for (int i = 0; i < n; i++) index_bytes += 2 * (6 * strlen(zs->params[i]->name) + entry_bound);
    index_bytes += (uint64_t)(HF_EXTRA_TENSORS + n) * (6 * HF_EXTRA_NAME_BYTES + entry_bound);
    const zs__hf_index_limits index_limits = {(size_t)index_bytes,
                                              2 * n + HF_EXTRA_TENSORS, words};
    ZS_CHECK(zs__hf_layout_open(path, &index_limits, &imp->layout));
    const zs__hf_layout *l = imp->layout;
    imp->files = zs__calloc((size_t)l->file_count, sizeof *imp->files);
    if (!imp->files)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: cannot allocate %d file handles", l->source,
                        l->file_count);
    ZS_CHECK(check_index(imp));

    /* Only the files that hold this rank's ranges are opened and checked;
     * the ranks' ranges together cover every parameter, so every file that
     * holds one is checked by some rank before the agreement. */
    for (int i = 0; i < n; i++) {
        int64_t first, end;
        const int f = imp->params[i].file;
        if (skipped(imp, zs->params[i]) || !zs__param_range(zs, i, &first, &end) || imp->files[f])
            continue;
        ZS_CHECK(open_file(imp, f));
        ZS_CHECK(check_file(imp, f));
    }
    return ZS_OK;
}

/* ------------------------------------------------------------- reading */

/* zs_params_import's source: elements [first, first + count) of p from its
 * tensor, widened to fp32. */
static int read_range(void *user, const zs_param *p, int64_t first, int64_t count, float *dst,
                      char *err, size_t err_cap) {
    hf_import *imp = user;
    const hf_param *hp = &imp->params[p->index];
    const zs__st_file *f = imp->files[hp->file];
    const zs__st_entry *e = hp->entry;
    if (!f || !e) {
        snprintf(err, err_cap, "internal: the file of this parameter was not opened on this rank");
        return 1;
    }
    const size_t size = zs__st_dtype_size(e->dtype);
    zs_status status = ZS_OK;
    if (e->dtype == ZS_ST_F32) {
        status = zs__st_read(f, e, (uint64_t)first * size, dst, (uint64_t)count * size);
    } else {
        const zs_dtype from = e->dtype == ZS_ST_BF16 ? ZS_DTYPE_BF16 : ZS_DTYPE_FP16;
        for (int64_t done = 0; status == ZS_OK && done < count; done += HF_NARROW_ELEMENTS) {
            const int64_t n = count - done < HF_NARROW_ELEMENTS ? count - done : HF_NARROW_ELEMENTS;
            status = zs__st_read(f, e, (uint64_t)(first + done) * size, imp->narrow,
                                 (uint64_t)n * size);
            if (status == ZS_OK) status = zs_convert(dst + done, ZS_DTYPE_FP32, imp->narrow, from, n);
        }
    }
    if (status != ZS_OK) {
        snprintf(err, err_cap, "%s", zs_last_error());
        return 1;
    }
    imp->report.bytes_read += (uint64_t)count * size;
    return 0;
}

static void hf_import_free(hf_import *imp) {
    if (imp->files)
        for (int f = 0; f < imp->layout->file_count; f++) zs__st_close(imp->files[f]);
    free(imp->files);
    zs__hf_layout_free(imp->layout);
    free(imp->params);
    free(imp->by_name);
    if (imp->narrow)
        zs__mem_host_free(&imp->zs->mem, ZS_MEM_SCRATCH, imp->narrow,
                          (size_t)HF_NARROW_ELEMENTS * sizeof(uint16_t));
}

/* ------------------------------------------------------------- the base */

/* A declared base's hash (frozen_base.h): frozen parameter k (in index
 * order) hashed by rank k % world from the file that holds its tensor
 * (opened and checked here if the import did not need it), the hashes
 * gathered, combined by name. */
static zs_status hash_frozen(hf_import *imp, uint64_t *digest, int *tensors) {
    zs_ctx *zs = imp->zs;
    int n = 0;
    for (int i = 0; i < zs->param_count; i++) n += (zs->params[i]->flags & ZS_PARAM_FROZEN) != 0;
    const size_t bytes = sizeof(uint64_t) * (size_t)(n > 0 ? n : 1);
    uint64_t *mine = zs__calloc(1, bytes), *all = NULL;
    const char **names = zs__malloc(sizeof *names * (size_t)(n > 0 ? n : 1));
    zs_status local = mine && names ? ZS_OK
                                    : zs__fail(ZS_ERR_OUT_OF_MEMORY, "the base's hash: out of "
                                               "memory");
    for (int i = 0, k = -1; local == ZS_OK && i < zs->param_count; i++) {
        if (!(zs->params[i]->flags & ZS_PARAM_FROZEN)) continue;
        names[++k] = zs->params[i]->name;
        if (k % zs->world_size != zs->rank) continue;
        const int f = imp->params[i].file;
        if (!imp->files[f]) {
            local = open_file(imp, f);
            if (local == ZS_OK) local = check_file(imp, f);
        }
        if (local == ZS_OK)
            local = zs__st_hash_entry(imp->files[f], imp->params[i].entry, &mine[k]);
    }
    zs_status st = zs__agree_status(zs, local, "the frozen base's hash");
    if (st == ZS_OK) st = zs__calloc_agreed(zs, (size_t)zs->world_size, bytes, "the frozen "
                                            "base's hash", (void **)&all);
    if (st == ZS_OK)
        st = zs__comm_all_gather_bytes(zs->comm, mine, bytes, all, "the frozen base's hash");
    /* Rank k % world's slot k: the owner's hash. */
    const size_t stride = bytes / sizeof *all;
    for (int k = 0; st == ZS_OK && k < n; k++)
        mine[k] = all[(size_t)(k % zs->world_size) * stride + (size_t)k];
    if (st == ZS_OK && !zs__frozen_base_digest(n, names, mine, digest))
        st = zs__fail(ZS_ERR_OUT_OF_MEMORY, "the frozen base's hash: out of memory");
    *tensors = n;
    free(mine);
    free(all);
    free(names);
    return st;
}

/* zs_params_import_safetensors, and with `base` the declared base's hash
 * after the import. */
static zs_status import_from(zs_ctx *zs, const char *path, const zs_safetensors_import *options,
                             zs_import_report *report, zs__base_record *base) {
    if (!zs || !path)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "zs_params_import_safetensors: a context and a path are required");
    if (!zs->built)
        return zs__fail(ZS_ERR_STATE, "zs_params_import_safetensors: call zs_build first");
    if (options && options->frozen_only && options->trainable_only)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_params_import_safetensors: frozen_only and "
                        "trainable_only exclude each other");
    if (options && (options->ignore_count < 0 || (options->ignore_count > 0 && !options->ignore)))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "zs_params_import_safetensors: options->ignore must hold ignore_count "
                        "(%d) patterns",
                        options->ignore_count);
    hf_import imp;
    memset(&imp, 0, sizeof imp);
    imp.zs = zs;
    imp.options = options;
    zs_status local = zs__mem_host_alloc(&zs->mem, ZS_MEM_SCRATCH,
                                         (size_t)HF_NARROW_ELEMENTS * sizeof(uint16_t),
                                         &imp.narrow);
    if (local == ZS_OK) local = prepare(&imp, path);
    /* Every rank learns the first failure before any value is read, so no
     * rank imports while another refuses the checkpoint. */
    zs_status status = zs__agree_status(zs, local, "zs_params_import_safetensors (checks)");
    if (status == ZS_OK)
        status = zs__params_import_some(zs, read_range, &imp,
                                        !options                ? ZS__IMPORT_ALL
                                        : options->frozen_only   ? ZS__IMPORT_FROZEN
                                        : options->trainable_only ? ZS__IMPORT_TRAINABLE
                                                                 : ZS__IMPORT_ALL);
    if (status == ZS_OK) {
        /* The ignored tensors by name, so that a skipped tensor (a tied
         * head's lm_head.weight copy, a buffer) is never skipped unseen. */
        char names[HF_IGNORED_SHOWN * (HF_SHOWN_BYTES + 2) + 32] = "";
        size_t at = 0;
        const int count = imp.report.tensors_ignored;
        for (int k = 0; k < count && k < HF_IGNORED_SHOWN && at < sizeof names; k++)
            at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", k ? ", " : ": ",
                                   imp.ignored_names[k]);
        if (count > HF_IGNORED_SHOWN && at < sizeof names)
            snprintf(names + at, sizeof names - at, " and %d more", count - HF_IGNORED_SHOWN);
        ZS_INFO("imported %d parameters from %s (rank 0: %d file%s, %llu bytes read, %d "
                "tensor%s ignored%s)",
                zs->param_count, imp.layout->source, imp.report.files_opened,
                imp.report.files_opened == 1 ? "" : "s",
                (unsigned long long)imp.report.bytes_read, count, count == 1 ? "" : "s", names);
        if (report) *report = imp.report;
    }
    if (status == ZS_OK && base) {
        status = hash_frozen(&imp, &base->xxh3, &base->tensors);
        base->current = status == ZS_OK;
    }
    hf_import_free(&imp);
    return status;
}

zs_status zs_params_import_safetensors(zs_ctx *zs, const char *path,
                                       const zs_safetensors_import *options,
                                       zs_import_report *report) {
    return import_from(zs, path, options, report, NULL);
}

zs_status zs__frozen_base_import(zs_ctx *zs) {
    zs__base_record *b = &zs->base;
    if (!b->path) return ZS_OK;
    const zs_safetensors_import options = {.ignore = (const char *const *)b->ignore,
                                           .ignore_count = b->ignore_count,
                                           .frozen_only = 1,
                                           .name_prefix = b->name_prefix};
    const zs_status st = import_from(zs, b->path, &options, NULL, b);
    if (st != ZS_OK) return zs__fail_context(st, "the frozen base (zs_set_frozen_base)");
    ZS_INFO("frozen base %s: %d tensors, xxh3 %016llx", b->path, b->tensors,
            (unsigned long long)b->xxh3);
    return ZS_OK;
}
