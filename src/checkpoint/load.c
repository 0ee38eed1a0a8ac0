/* zs_load and checkpoint.resume: choose a step directory, verify it, and load
 * this rank's owned ranges from whichever shard files hold them, whatever the
 * world size and stage of the run that saved it.
 *
 * Every phase ends with an agreement: the lowest rank that failed tells the
 * others its message, so all ranks return the same status. Verification
 * (manifest hash, layout, file sizes, metadata, whole-file and per-tensor
 * hashes) finishes on every rank before any value is copied into the model. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/fs.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/log.h"

#define PATH_CAPACITY 4096
#define MESSAGE_CAPACITY 1024
#define CANDIDATES_MAX (1 << 20) /* bytes of the candidate list shared by rank 0 */

/* The lowest failing rank's status and message, on every rank. */
static zs_status agree(zs_ctx *zs, zs_status local, const char *what) {
    double key = local == ZS_OK ? -1e300 : -(double)zs->rank;
    ZS_CHECK(zs__comm_all_reduce_scalars(zs->comm, &key, 1, ZS_REDUCE_MAX, what));
    if (key <= -1e299) return ZS_OK;
    const int from = (int)(-key);
    char message[MESSAGE_CAPACITY];
    int64_t code = local;
    snprintf(message, sizeof message, "%s", local == ZS_OK ? "" : zs_last_error());
    ZS_CHECK(zs__comm_broadcast(zs->comm, &code, sizeof code, from, what));
    ZS_CHECK(zs__comm_broadcast(zs->comm, message, sizeof message, from, what));
    if (zs->rank == from) return local;
    return zs__fail((zs_status)code, "%s (reported by rank %d)", message, from);
}

/* ------------------------------------------------------------ one step dir */

typedef struct load_state {
    char dir[PATH_CAPACITY];
    zs__manifest *m;
    zs__st_file **files;        /* [m->file_count], opened on demand */
    int *first_of_param;        /* tensors grouped by parameter: [param_count + 1] */
    int *by_param;              /* tensor indices, ordered by parameter */
} load_state;

static void load_state_free(load_state *ls) {
    if (ls->files)
        for (int f = 0; f < ls->m->file_count; f++) zs__st_close(ls->files[f]);
    free(ls->files);
    free(ls->first_of_param);
    free(ls->by_param);
    zs__manifest_free(ls->m);
    memset(ls, 0, sizeof *ls);
}

/* manifest.json, checked against manifest.json.xxh3, then parsed. */
static zs_status read_manifest(load_state *ls) {
    char path[PATH_CAPACITY], *text = NULL, *hash_text = NULL;
    size_t bytes = 0, hash_bytes = 0;
    ZS_CHECK(zs__checkpoint_join(path, sizeof path, ls->dir, ZS_CKPT_MANIFEST_HASH));
    ZS_CHECK(zs__fs_read_file(path, 64, &hash_text, &hash_bytes));
    char *end = NULL;
    unsigned long long expected = strtoull(hash_text, &end, 16);
    int hash_ok = end == hash_text + 16 && (*end == '\n' || *end == '\0') &&
                  (*end == '\0' || end[1] == '\0');
    free(hash_text);
    if (!hash_ok)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: not 16 hex digits and a newline", path);
    ZS_CHECK(zs__checkpoint_join(path, sizeof path, ls->dir, ZS_CKPT_MANIFEST));
    ZS_CHECK(zs__fs_read_file(path, ZS_CKPT_MANIFEST_MAX, &text, &bytes));
    uint64_t actual = XXH3_64bits(text, bytes);
    if (actual != expected) {
        free(text);
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: content hash %016" PRIx64 " differs from %s (%016llx): the manifest "
                        "is corrupted or was changed",
                        path, actual, ZS_CKPT_MANIFEST_HASH, expected);
    }
    zs_status st = zs__manifest_from_json(text, bytes, path, &ls->m);
    free(text);
    return st;
}

static int64_t numel_of(const zs_param *p) { return p->numel; }

/* The checkpoint must describe the model being loaded; world size and stage
 * may differ. The message names the first mismatching tensor. */
static zs_status check_layout(const zs_ctx *zs, const load_state *ls) {
    const zs__manifest *m = ls->m;
    for (int i = 0; i < zs->param_count || i < m->param_count; i++) {
        if (i >= m->param_count)
            return zs__fail(ZS_ERR_MISMATCH, "%s: the checkpoint has %d parameters but the model has "
                            "more; the first missing one is '%s'",
                            ls->dir, m->param_count, zs->params[i]->name);
        if (i >= zs->param_count)
            return zs__fail(ZS_ERR_MISMATCH, "%s: the checkpoint has parameter '%s' (number %d), "
                            "which the model does not have",
                            ls->dir, m->params[i].name, i);
        const zs_param *p = zs->params[i];
        const zs__ckpt_param *cp = &m->params[i];
        int same = strcmp(p->name, cp->name) == 0 && p->ndim == cp->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = p->shape[d] == cp->shape[d];
        if (!same) {
            char a[160] = "", b[160] = "";
            for (int d = 0; d < cp->ndim; d++)
                snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? ", " : "",
                         (long long)cp->shape[d]);
            for (int d = 0; d < p->ndim; d++)
                snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? ", " : "",
                         (long long)p->shape[d]);
            return zs__fail(ZS_ERR_MISMATCH,
                            "%s: parameter %d differs: the checkpoint has '%s' [%s], the model "
                            "has '%s' [%s]",
                            ls->dir, i, cp->name, a, p->name, b);
        }
        (void)numel_of;
    }
    /* Every state this run keeps must be in the checkpoint (for every
     * parameter: the manifest's validation guarantees full coverage). */
    zs__ckpt_state states[4];
    int nstates = zs__checkpoint_states(zs, states);
    for (int s = 1; s < nstates; s++) {
        int found = 0;
        for (int t = 0; t < m->tensor_count && !found; t++) found = m->tensors[t].state == states[s];
        if (!found && zs->param_count > 0)
            return zs__fail(ZS_ERR_MISMATCH,
                            "%s: the optimizer needs '%s' but the checkpoint has none (it was "
                            "saved with another optimizer); change optimizer.type back or start "
                            "fresh",
                            ls->dir, zs__ckpt_state_name(states[s]));
    }
    return ZS_OK;
}

static zs_status index_tensors(load_state *ls) {
    const zs__manifest *m = ls->m;
    ls->first_of_param = calloc((size_t)m->param_count + 1, sizeof(int));
    ls->by_param = calloc((size_t)(m->tensor_count ? m->tensor_count : 1), sizeof(int));
    ls->files = calloc((size_t)(m->file_count ? m->file_count : 1), sizeof *ls->files);
    if (!ls->first_of_param || !ls->by_param || !ls->files)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_load: out of host memory");
    for (int t = 0; t < m->tensor_count; t++)
        if (m->tensors[t].param >= 0) ls->first_of_param[m->tensors[t].param + 1]++;
    for (int i = 0; i < m->param_count; i++) ls->first_of_param[i + 1] += ls->first_of_param[i];
    int *next = calloc((size_t)m->param_count + 1, sizeof(int));
    if (!next) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_load: out of host memory");
    memcpy(next, ls->first_of_param, sizeof(int) * (size_t)(m->param_count + 1));
    for (int t = 0; t < m->tensor_count; t++)
        if (m->tensors[t].param >= 0) ls->by_param[next[m->tensors[t].param]++] = t;
    free(next);
    return ZS_OK;
}

/* Opens shard file f once and checks that it is the file the manifest means:
 * its own metadata (format, step, rank, kind), then its size. */
static zs_status open_file(load_state *ls, int f, zs__st_file **out) {
    if (ls->files[f]) {
        *out = ls->files[f];
        return ZS_OK;
    }
    const zs__manifest *m = ls->m;
    const zs__ckpt_file *cf = &m->files[f];
    char path[PATH_CAPACITY];
    ZS_CHECK(zs__checkpoint_join(path, sizeof path, ls->dir, cf->name));
    zs__st_file *file = NULL;
    ZS_CHECK(zs__st_open(path, &file));
    zs_status st = ZS_OK;
    const char *format = zs__st_meta_get(file, "format");
    const char *step = zs__st_meta_get(file, "step");
    const char *rank = zs__st_meta_get(file, "rank");
    const char *kind = zs__st_meta_get(file, "kind");
    char expect[32];
    /* The file's own metadata first: it tells a file from another step or
     * another rank apart from plain damage, which the size and hashes catch. */
    if (!format || strcmp(format, "zeroshard-shard") != 0)
        st = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: not a zeroshard shard (metadata format is "
                      "'%s')", path, format ? format : "missing");
    else if (snprintf(expect, sizeof expect, "%" PRId64, m->step), !step || strcmp(step, expect) != 0)
        st = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: holds step %s but the manifest is of step %s "
                      "(a file from another checkpoint)", path, step ? step : "?", expect);
    else if (snprintf(expect, sizeof expect, "%d", cf->rank), !rank || strcmp(rank, expect) != 0)
        st = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: holds rank %s's data but the manifest lists "
                      "it as rank %s's (were files renamed or swapped?)",
                      path, rank ? rank : "?", expect);
    else if (!kind || strcmp(kind, zs__ckpt_file_kind_name(cf->kind)) != 0)
        st = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: holds '%s' data but the manifest expects '%s'",
                      path, kind ? kind : "?", zs__ckpt_file_kind_name(cf->kind));
    else if (zs__st_file_bytes(file) != cf->bytes)
        st = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: %llu bytes, but the manifest says %llu (the "
                      "file was truncated or changed)",
                      path, (unsigned long long)zs__st_file_bytes(file), (unsigned long long)cf->bytes);
    if (st != ZS_OK) {
        zs__st_close(file);
        return st;
    }
    ls->files[f] = file;
    *out = file;
    return ZS_OK;
}

/* The manifest's tensor t, found in its file with the right type and size. */
static zs_status find_entry(load_state *ls, int t, zs__st_file **file, const zs__st_entry **entry) {
    const zs__ckpt_tensor *ct = &ls->m->tensors[t];
    ZS_CHECK(open_file(ls, ct->file, file));
    const zs__st_entry *e = zs__st_find(*file, ct->key);
    const int user = ct->param < 0;
    const zs__st_dtype want = user ? ZS_ST_U8 : ZS_ST_F32;
    uint64_t expect_bytes = (uint64_t)ct->count * zs__st_dtype_size(want);
    if (!e)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: tensor '%s' listed by the manifest is missing",
                        zs__st_path(*file), ct->key);
    if (e->dtype != want || e->end - e->begin != expect_bytes)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: tensor '%s' is %s with %llu bytes, but the "
                        "manifest expects %s with %llu",
                        zs__st_path(*file), ct->key, zs__st_dtype_name(e->dtype),
                        (unsigned long long)(e->end - e->begin), zs__st_dtype_name(want),
                        (unsigned long long)expect_bytes);
    *entry = e;
    return ZS_OK;
}

/* Whether tensor t is one this rank reads: it overlaps an owned range of a
 * state this run keeps, or it is user state this rank restores. */
static int tensor_needed(const zs_ctx *zs, const load_state *ls, int t, const int *keeps) {
    const zs__ckpt_tensor *ct = &ls->m->tensors[t];
    if (ct->state == ZS_CKPT_STATE_USER_GLOBAL) return 1;
    if (ct->state == ZS_CKPT_STATE_USER_RANK)
        return ls->m->world_size == zs->world_size && ls->m->files[ct->file].rank == zs->rank;
    if (!keeps[ct->state]) return 0;
    int64_t b, e;
    if (!zs__plan_owned_range(zs->plan, ct->param, zs->rank, &b, &e)) return 0;
    return ct->offset < e && b < ct->offset + ct->count;
}

/* Verification: whole files (each by one rank, round robin) and every tensor
 * this rank will read. Reads only; nothing in the model changes. */
static zs_status verify(zs_ctx *zs, load_state *ls, const int *keeps) {
    const zs__manifest *m = ls->m;
    for (int f = zs->rank; f < m->file_count; f += zs->world_size) {
        zs__st_file *file = NULL;
        uint64_t hash = 0;
        ZS_CHECK(open_file(ls, f, &file));
        ZS_CHECK(zs__st_hash_file(file, &hash));
        if (hash != m->files[f].xxh3)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: content hash %016" PRIx64 " differs from "
                            "the manifest's %016" PRIx64 " (corrupted, or from another checkpoint)",
                            zs__st_path(file), hash, m->files[f].xxh3);
    }
    for (int t = 0; t < m->tensor_count; t++) {
        if (!tensor_needed(zs, ls, t, keeps)) continue;
        zs__st_file *file = NULL;
        const zs__st_entry *e = NULL;
        uint64_t hash = 0;
        ZS_CHECK(find_entry(ls, t, &file, &e));
        ZS_CHECK(zs__st_hash_entry(file, e, &hash));
        if (hash != m->tensors[t].xxh3)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: tensor '%s' has content hash %016" PRIx64
                            " but the manifest says %016" PRIx64,
                            zs__st_path(file), m->tensors[t].key, hash, m->tensors[t].xxh3);
    }
    return ZS_OK;
}

/* Copies this rank's owned ranges of every kept state out of the shards. */
static zs_status read_states(zs_ctx *zs, load_state *ls, const zs__ckpt_state *states, int nstates) {
    const zs__manifest *m = ls->m;
    for (int i = 0; i < zs->param_count; i++) {
        int64_t b, e;
        if (!zs__plan_owned_range(zs->plan, i, zs->rank, &b, &e)) continue;
        for (int s = 0; s < nstates; s++) {
            int64_t covered = 0;
            for (int k = ls->first_of_param[i]; k < ls->first_of_param[i + 1]; k++) {
                const int t = ls->by_param[k];
                const zs__ckpt_tensor *ct = &m->tensors[t];
                if (ct->state != states[s]) continue;
                int64_t lo = ct->offset > b ? ct->offset : b;
                int64_t hi = ct->offset + ct->count < e ? ct->offset + ct->count : e;
                if (lo >= hi) continue;
                zs__st_file *file = NULL;
                const zs__st_entry *entry = NULL;
                ZS_CHECK(find_entry(ls, t, &file, &entry));
                float *dst = zs__checkpoint_state_at(zs, states[s], i, lo);
                const uint64_t offset = (uint64_t)(lo - ct->offset) * sizeof(float);
                const uint64_t bytes = (uint64_t)(hi - lo) * sizeof(float);
                if (zs->backend->ops->host_accessible) {
                    ZS_CHECK(zs__st_read(file, entry, offset, dst, bytes));
                } else {
                    /* Device memory: read into a host copy and upload it. */
                    void *copy = malloc(bytes ? (size_t)bytes : 1);
                    if (!copy) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_load: out of host memory");
                    zs_status st = zs__st_read(file, entry, offset, copy, bytes);
                    if (st == ZS_OK) st = zs->backend->ops->upload(zs->backend, dst, copy, (size_t)bytes);
                    free(copy);
                    ZS_CHECK(st);
                }
                covered += hi - lo;
            }
            if (covered != e - b)
                return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: '%s' of parameter '%s' covers %lld "
                                "of this rank's %lld elements",
                                ls->dir, zs__ckpt_state_name(states[s]), zs->params[i]->name,
                                (long long)covered, (long long)(e - b));
        }
    }
    return ZS_OK;
}

/* Replaces the context's user state with the checkpoint's. */
static zs_status read_user_state(zs_ctx *zs, load_state *ls, const int *keeps) {
    for (int i = 0; i < zs->user_count; i++) free(zs->user[i].data);
    zs->user_count = 0;
    const zs__manifest *m = ls->m;
    for (int t = 0; t < m->tensor_count; t++) {
        const zs__ckpt_tensor *ct = &m->tensors[t];
        if (ct->param >= 0 || !tensor_needed(zs, ls, t, keeps)) continue;
        zs__st_file *file = NULL;
        const zs__st_entry *entry = NULL;
        ZS_CHECK(find_entry(ls, t, &file, &entry));
        const char *name = strchr(ct->key, ':');
        if (!name) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: user tensor '%s' has no prefix",
                                   zs__st_path(file), ct->key);
        void *data = malloc(ct->count ? (size_t)ct->count : 1);
        if (!data) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_load: out of host memory");
        zs_status st = zs__st_read(file, entry, 0, data, (uint64_t)ct->count);
        if (st == ZS_OK)
            st = zs_user_state_set(zs, name + 1, data, (size_t)ct->count,
                                   ct->state == ZS_CKPT_STATE_USER_RANK);
        free(data);
        ZS_CHECK(st);
    }
    return ZS_OK;
}

/* After the owned ranges are in: compute-dtype copies, full buffers, counters. */
static zs_status finish(zs_ctx *zs, const zs__manifest *m) {
    const zs__plan *plan = zs->plan;
    const int stage = zs->settings.zero.stage;
    zs__backend *be = zs->backend;
    if (zs->master.ptr) {
        for (int i = 0; i < zs->param_count; i++) {
            int64_t b, e;
            if (!zs__plan_owned_range(plan, i, zs->rank, &b, &e)) continue;
            const zs__plan_param *pp = &plan->params[i];
            const zs__plan_unit *pu = &plan->units[pp->unit];
            void *param = stage < 3
                ? zs__buf_at(&zs->params_full, pu->full_offset + pp->offset + b)
                : zs__buf_at(&zs->params_shard,
                             pu->shard_offset + pp->offset + b - (int64_t)zs->rank * pu->shard_numel);
            ZS_CHECK(be->ops->convert(be, param, zs->compute_dtype,
                                      zs__checkpoint_state_at(zs, ZS_CKPT_STATE_MASTER, i, b),
                                      ZS_DTYPE_FP32, e - b));
        }
    }
    /* Stages that keep full buffers gather the slices every rank loaded. */
    for (int u = 0; u < zs->unit_count; u++) {
        const zs__plan_unit *pu = &plan->units[u];
        const size_t shard = (size_t)pu->shard_numel;
        const char *name = zs->units[u]->name;
        if (stage < 3)
            ZS_CHECK(zs__comm_all_gather(zs->comm, zs__buf_at(&zs->params_full, pu->full_offset),
                                         shard, zs->compute_dtype, name));
        if (stage == 0) {
            zs__buf *full[] = {&zs->master, &zs->optim_m, &zs->optim_v};
            for (int k = 0; k < 3; k++)
                if (full[k]->ptr)
                    ZS_CHECK(zs__comm_all_gather(zs->comm, zs__buf_at(full[k], pu->full_offset),
                                                 shard, ZS_DTYPE_FP32, name));
        }
    }
    zs->step = m->step;
    zs->skipped_total = m->skipped_total;
    zs->micro = 0;
    /* The scale belongs to the dtype it was found for: it is restored when
     * this run scales dynamically in the same dtype, else it starts fresh. */
    if (zs__loss_scaler_is_dynamic(&zs->scaler) && m->compute_dtype == zs->compute_dtype) {
        zs->scaler.scale = m->scaler.scale;
        zs->scaler.cur_iter = m->scaler.cur_iter;
        zs->scaler.last_overflow_iter = m->scaler.last_overflow_iter;
        zs->scaler.cur_hysteresis = m->scaler.cur_hysteresis;
        zs->scaler.consecutive_overflows = m->scaler.consecutive_overflows;
        zs->scaler.overflows_total = m->scaler.overflows_total;
    }
    return ZS_OK;
}

/* Loads one step directory; collective; the same status on every rank. */
static zs_status load_step(zs_ctx *zs, const char *dir) {
    load_state ls;
    memset(&ls, 0, sizeof ls);
    snprintf(ls.dir, sizeof ls.dir, "%s", dir);
    zs__ckpt_state states[4];
    const int nstates = zs__checkpoint_states(zs, states);
    int keeps[ZS_CKPT_STATE_USER_RANK + 1] = {0};
    for (int s = 0; s < nstates; s++) keeps[states[s]] = 1;

    zs_status local = read_manifest(&ls);
    if (local == ZS_OK) local = check_layout(zs, &ls);
    if (local == ZS_OK) local = index_tensors(&ls);
    zs_status st = agree(zs, local, "checkpoint manifest");
    if (st == ZS_OK) st = agree(zs, verify(zs, &ls, keeps), "checkpoint verification");
    if (st == ZS_OK) {
        local = read_states(zs, &ls, states, nstates);
        if (local == ZS_OK) local = read_user_state(zs, &ls, keeps);
        st = agree(zs, local, "checkpoint read");
    }
    if (st == ZS_OK) st = agree(zs, finish(zs, ls.m), "checkpoint finish");
    if (st == ZS_OK) {
        if (ls.m->config_hash != zs->config_hash)
            ZS_INFO("%s was saved with another configuration (hash %016" PRIx64 ", now %016" PRIx64
                    "); loading it anyway", dir, ls.m->config_hash, zs->config_hash);
        ZS_INFO("loaded %s: step %lld, saved by %d rank(s) in stage %d", dir,
                (long long)ls.m->step, ls.m->world_size, ls.m->stage);
    }
    load_state_free(&ls);
    return st;
}

/* ------------------------------------------------------------ choosing */

/* Rank 0 lists what to try, best first: a step directory alone, or for a
 * root every step directory, newest step first. `latest` is written last in
 * the commit protocol and names the newest committed step, but a crash
 * between the step's rename and latest's update leaves a newer complete step
 * behind, so the order comes from the directory names and `latest` is only
 * checked (it must name a step directory, never a path). Temporary and
 * replaced directories never count. */
static zs_status list_candidates(const char *dir, char *out, size_t cap, int *explicit_dir) {
    char path[PATH_CAPACITY];
    out[0] = '\0';
    ZS_CHECK(zs__checkpoint_join(path, sizeof path, dir, ZS_CKPT_MANIFEST));
    *explicit_dir = zs__fs_is_file(path) || !zs__fs_is_dir(dir);
    if (*explicit_dir) {
        if (!zs__fs_is_dir(dir))
            return zs__fail(ZS_ERR_IO, "checkpoint '%s' does not exist or is not a directory", dir);
        snprintf(out, cap, "%s\n", dir);
        return ZS_OK;
    }
    char *latest = NULL;
    size_t bytes = 0;
    ZS_CHECK(zs__checkpoint_join(path, sizeof path, dir, ZS_CKPT_LATEST));
    if (zs__fs_is_file(path) && zs__fs_read_file(path, 64, &latest, &bytes) == ZS_OK) {
        if (bytes > 0 && latest[bytes - 1] == '\n') latest[bytes - 1] = '\0';
        if (!zs__checkpoint_is_step_name(latest))
            ZS_WARN("%s does not name a step directory (step_NNNNNNNN); ignoring it", path);
    }
    free(latest);
    zs__clear_error();
    char **names = NULL;
    int count = 0;
    ZS_CHECK(zs__fs_list(dir, &names, &count));
    size_t used = 0;
    /* zs__fs_list sorts by name, and step names are zero-padded: newest last. */
    for (int i = count - 1; i >= 0; i--) {
        if (!zs__checkpoint_is_step_name(names[i])) continue;
        if (zs__checkpoint_join(path, sizeof path, dir, names[i]) != ZS_OK) continue;
        int n = snprintf(out + used, cap - used, "%s\n", path);
        if (n < 0 || (size_t)n >= cap - used) break;
        used += (size_t)n;
    }
    zs__fs_list_free(names, count);
    return ZS_OK;
}

/* missing_ok: a root without any step directory is not an error (resume =
 * "auto" on a first run); *loaded says whether anything was loaded. */
static zs_status load_any(zs_ctx *zs, const char *dir, int missing_ok, int *loaded) {
    *loaded = 0;
    if (!zs->built) return zs__fail(ZS_ERR_STATE, "zs_load: call zs_build first");
    char *list = calloc(CANDIDATES_MAX, 1);
    if (!list) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_load: out of host memory");
    int explicit_dir = 0;
    zs_status local = ZS_OK;
    if (zs->rank == 0) {
        if (missing_ok && !zs__fs_is_dir(dir)) list[0] = '\0';
        else local = list_candidates(dir, list, CANDIDATES_MAX, &explicit_dir);
    }
    zs_status st = agree(zs, local, "checkpoint candidates");
    if (st == ZS_OK) st = zs__comm_broadcast(zs->comm, list, CANDIDATES_MAX, 0, "checkpoint candidates");
    int64_t flag = explicit_dir;
    if (st == ZS_OK) st = zs__comm_broadcast(zs->comm, &flag, sizeof flag, 0, "checkpoint candidates");
    explicit_dir = (int)flag;
    int tried = 0;
    char last_error[MESSAGE_CAPACITY] = "";
    for (char *line = list; st == ZS_OK && *line;) {
        char *end = strchr(line, '\n');
        if (!end) break;
        *end = '\0';
        tried++;
        zs_status one = load_step(zs, line);
        if (one == ZS_OK) {
            *loaded = 1;
            break;
        }
        if (explicit_dir) {
            st = one;
            break;
        }
        snprintf(last_error, sizeof last_error, "%s", zs_last_error());
        ZS_WARN("skipping checkpoint %s: %s", line, last_error);
        line = end + 1;
    }
    free(list);
    if (st != ZS_OK) return st;
    if (!*loaded && tried > 0)
        return zs__fail(ZS_ERR_IO, "no checkpoint in '%s' verifies (%d tried); the last error was: %s",
                        dir, tried, last_error);
    if (!*loaded && !missing_ok)
        return zs__fail(ZS_ERR_IO, "'%s' holds no checkpoint (no step_NNNNNNNN directory)", dir);
    return ZS_OK;
}

zs_status zs_load(zs_ctx *zs, const char *dir) {
    if (!zs || !dir) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_load: zs and dir are required");
    int loaded = 0;
    zs_status st = load_any(zs, dir, 0, &loaded);
    if (st != ZS_OK) return zs__fail_context(st, "zs_load('%s')", dir);
    return ZS_OK;
}

zs_status zs__checkpoint_resume(zs_ctx *zs) {
    const char *resume = zs->settings.checkpoint.resume;
    if (strcmp(resume, "none") == 0 || resume[0] == '\0') return ZS_OK;
    int loaded = 0;
    if (strcmp(resume, "auto") == 0) {
        ZS_CHECK(load_any(zs, zs->settings.checkpoint.dir, 1, &loaded));
        if (!loaded) ZS_INFO("no checkpoint in %s yet; starting fresh", zs->settings.checkpoint.dir);
        return ZS_OK;
    }
    zs_status st = load_any(zs, resume, 0, &loaded);
    if (st != ZS_OK) return zs__fail_context(st, "checkpoint.resume = \"%s\"", resume);
    return ZS_OK;
}
