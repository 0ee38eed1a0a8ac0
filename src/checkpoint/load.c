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
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/select.h"
#include "checkpoint/verify.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"
#include "zero/agree.h"
#include "zero/job.h"
#include "zero/plan.h"
#include "zero/state_io.h"
#include "zero/update.h"

/* ------------------------------------------------------------ one step dir */

/* fp32 values per read of a checkpoint's state into the store. */
#define ZS_LOAD_ROUND ((int64_t)1 << 18)

typedef struct load_state {
    zs__ckpt_step step;         /* the open step directory and its verified manifest */
    const char *dir;            /* step.path */
    zs__manifest *m;            /* step.m */
    zs__st_file **files;        /* [m->file_count], opened on demand */
    int *first_of_param;        /* tensors grouped by parameter: [param_count + 1] */
    int *by_param;              /* tensor indices, ordered by parameter */
    float *round;               /* [ZS_LOAD_ROUND]: state passes through it into the store */
} load_state;

static void load_state_free(load_state *ls) {
    if (ls->files)
        for (int f = 0; f < ls->m->file_count; f++) zs__st_close(ls->files[f]);
    free(ls->files);
    free(ls->first_of_param);
    free(ls->by_param);
    free(ls->round);
    zs__ckpt_step_close(&ls->step);
    memset(ls, 0, sizeof *ls);
    ls->step.fd = -1;
}

/* The step directory and its manifest, checked by the verification zs-ckpt
 * shares (verify.h). name is NULL for an explicit step directory. */
static zs_status open_step(load_state *ls, const char *dir, const char *name) {
    int root_fd = -1;
    if (name) ZS_CHECK(zs__fs_open_root(dir, 0, &root_fd));
    zs_status st = zs__ckpt_step_open(root_fd, dir, name, &ls->step);
    if (root_fd >= 0) close(root_fd);
    ZS_CHECK(st);
    ls->dir = ls->step.path;
    ls->m = ls->step.m;
    return ZS_OK;
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
    ls->first_of_param = zs__calloc((size_t)m->param_count + 1, sizeof(int));
    ls->by_param = zs__calloc((size_t)(m->tensor_count ? m->tensor_count : 1), sizeof(int));
    ls->files = zs__calloc((size_t)(m->file_count ? m->file_count : 1), sizeof *ls->files);
    if (!ls->first_of_param || !ls->by_param || !ls->files)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_load: out of host memory");
    for (int t = 0; t < m->tensor_count; t++)
        if (m->tensors[t].param >= 0) ls->first_of_param[m->tensors[t].param + 1]++;
    for (int i = 0; i < m->param_count; i++) ls->first_of_param[i + 1] += ls->first_of_param[i];
    int *next = zs__calloc((size_t)m->param_count + 1, sizeof(int));
    if (!next) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_load: out of host memory");
    memcpy(next, ls->first_of_param, sizeof(int) * (size_t)(m->param_count + 1));
    for (int t = 0; t < m->tensor_count; t++)
        if (m->tensors[t].param >= 0) ls->by_param[next[m->tensors[t].param]++] = t;
    free(next);
    return ZS_OK;
}

/* Opens shard file f once, with the shared checks of its kind, size and
 * metadata (verify.h). */
static zs_status open_file(load_state *ls, int f, zs__st_file **out) {
    if (!ls->files[f]) ZS_CHECK(zs__ckpt_open_shard(&ls->step, f, &ls->files[f]));
    *out = ls->files[f];
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
    if (!zs__plan_owned_range(zs->plan, ct->param, zs->shard_rank, &b, &e)) return 0;
    return ct->offset < e && b < ct->offset + ct->count;
}

/* Verification: every file (each by one rank, round robin) and every tensor
 * this rank will read. Reads only; nothing in the model changes. */
static zs_status verify(zs_ctx *zs, load_state *ls, const int *keeps) {
    const zs__manifest *m = ls->m;
    /* The shared verification, its files spread over the ranks (the union
     * is what zs-ckpt verify checks); then the tensors this rank reads are
     * hashed again from the files it has open, so what it copies is what
     * was verified even if a file changed in between. */
    ZS_CHECK(zs__ckpt_verify_files(&ls->step, zs->rank, zs->world_size, 0, NULL));
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
        if (!zs__plan_owned_range(zs->plan, i, zs->shard_rank, &b, &e)) continue;
        const int frozen = (zs->params[i]->flags & ZS_PARAM_FROZEN) != 0;
        /* The base's values stay (check_base: the same content). */
        if (frozen && m->has_base) continue;
        for (int s = 0; s < nstates; s++) {
            /* Frozen: its values from the master tensor, no optimizer state. */
            if (frozen && states[s] != ZS_CKPT_STATE_MASTER) continue;
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
                const zs__state_array array = zs__checkpoint_state_array(states[s]);
                /* Through a bounded host buffer into the state, wherever it lives. */
                for (int64_t at = lo; at < hi; at += ZS_LOAD_ROUND) {
                    const int64_t n = hi - at < ZS_LOAD_ROUND ? hi - at : ZS_LOAD_ROUND;
                    const uint64_t offset = (uint64_t)(at - ct->offset) * sizeof(float);
                    ZS_CHECK(zs__st_read(file, entry, offset, ls->round, (uint64_t)n * sizeof(float)));
                    if (frozen) ZS_CHECK(zs__frozen_write(zs, i, at, n, ls->round));
                    else ZS_CHECK(zs__state_write(zs, array, i, at, n, ls->round));
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
        void *data = zs__malloc(ct->count ? (size_t)ct->count : 1);
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

/* After the owned ranges are in: the zero layer derives the rest (full
 * buffers, compute-dtype copies, zeroed gradients); then the counters and
 * the scaler. */
static zs_status finish(zs_ctx *zs, const zs__manifest *m) {
    ZS_CHECK(zs__state_loaded(zs));
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

/* A checkpoint that recorded a frozen base (frozen_base.h) holds no frozen
 * values: this run's must be that base's, the same content. */
static zs_status check_base(const zs_ctx *zs, const load_state *ls) {
    const zs__manifest *m = ls->m;
    if (!m->has_base) return ZS_OK;
    const zs__base_record *b = &zs->base;
    if (!b->path || !b->current)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s was saved on the frozen base %s (xxh3 %016" PRIx64
                        ") and holds no frozen values, but this run %s; declare that base "
                        "(zs_set_frozen_base; the example trainers: app.init_from = \"%s\")",
                        ls->dir, m->base_path, m->base_xxh3,
                        !b->path ? "declared no base"
                                 : "has other frozen values (its base was overwritten by a load "
                                   "or an import)",
                        m->base_path);
    if (b->xxh3 != m->base_xxh3)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s was saved on the frozen base %s (xxh3 %016" PRIx64
                        "), but this run's base is %s (xxh3 %016" PRIx64 "): another base's "
                        "content; resume on %s, or start a new run (a new checkpoint.dir) on "
                        "this base",
                        ls->dir, m->base_path, m->base_xxh3, b->path, b->xxh3, m->base_path);
    return ZS_OK;
}

/* Loads one step directory; collective; the same status on every rank. */
static zs_status load_step(zs_ctx *zs, const char *dir, const char *name) {
    load_state ls;
    memset(&ls, 0, sizeof ls);
    ls.step.fd = -1;
    zs__ckpt_state states[4];
    const int nstates = zs__checkpoint_states(zs, states);
    int keeps[ZS_CKPT_STATE_USER_RANK + 1] = {0};
    for (int s = 0; s < nstates; s++) keeps[states[s]] = 1;

    /* An offloaded update still running ends before the state is replaced
     * (whether it failed does not matter: the state is replaced). */
    (void)zs__update_finish(zs);
    zs__update_forget(zs);
    zs_status local = open_step(&ls, dir, name);
    if (local == ZS_OK) local = check_layout(zs, &ls);
    if (local == ZS_OK) local = check_base(zs, &ls);
    if (local == ZS_OK) local = index_tensors(&ls);
    zs_status st = zs__agree_status(zs, local, "checkpoint manifest");
    if (st == ZS_OK) st = zs__agree_status(zs, verify(zs, &ls, keeps), "checkpoint verification");
    if (st == ZS_OK) {
        /* The NVMe tier starts over (and recovers when an I/O failure lost
         * it): every owned value is written below, the rest is zero. */
        local = zs->store.tier == ZS_TIER_NVME ? zs__store_reset(&zs->store) : ZS_OK;
        if (local == ZS_OK && !(ls.round = zs__malloc(ZS_LOAD_ROUND * sizeof(float))))
            local = zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_load: out of host memory");
        if (local == ZS_OK) local = read_states(zs, &ls, states, nstates);
        if (local == ZS_OK) local = read_user_state(zs, &ls, keeps);
        st = zs__agree_status(zs, local, "checkpoint read");
    }
    if (st == ZS_OK) st = finish(zs, ls.m);
    /* Frozen values read from the checkpoint are no longer the base's. */
    if (st == ZS_OK && !ls.m->has_base) zs->base.current = 0;
    if (st == ZS_OK) {
        if (ls.m->config_hash != zs->config_hash)
            ZS_INFO("%s was saved with another configuration (hash %016" PRIx64 ", now %016" PRIx64
                    "); loading it anyway", ls.dir, ls.m->config_hash, zs->config_hash);
        ZS_INFO("loaded %s: step %lld, saved by %d rank(s) in stage %d", ls.dir,
                (long long)ls.m->step, ls.m->world_size, ls.m->stage);
    }
    load_state_free(&ls);
    return st;
}

/* ------------------------------------------------------------ choosing */

static zs_status try_step(void *ctx, const char *dir, const char *name) {
    return load_step((zs_ctx *)ctx, dir, name);
}

/* Rank 0 lists the candidates (select.h: the rule zs-ckpt uses too) and
 * every rank receives them, so all ranks try the same directories in the
 * same order; each try ends in an agreement, so they also stop together. */
static zs_status share_candidates(zs_ctx *zs, const char *dir, int missing_ok,
                                  zs__ckpt_candidates *c) {
    memset(c, 0, sizeof *c);
    zs_status local = ZS_OK;
    if (zs->rank == 0 && !(missing_ok && zs__fs_is_dir(dir) == 0))
        local = zs__ckpt_candidates_list(dir, c);
    ZS_CHECK(zs__agree_status(zs, local, "checkpoint candidates"));
    int64_t head[2] = {c->explicit_dir, c->count};
    ZS_CHECK(zs__comm_broadcast(zs->comm, head, sizeof head, 0, "checkpoint candidates"));
    if (head[1] < 0 || head[1] > ZS_CKPT_ROOT_ENTRIES_MAX)
        return zs__fail(ZS_ERR_INTERNAL, "checkpoint candidates: count %lld out of range",
                        (long long)head[1]);
    if (zs->rank != 0) {
        c->explicit_dir = (int)head[0];
        c->count = (int)head[1];
        c->names = zs__calloc((size_t)(c->count ? c->count : 1), sizeof *c->names);
        if (!c->names) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_load: out of host memory");
    }
    if (c->count > 0)
        ZS_CHECK(zs__comm_broadcast(zs->comm, c->names, (size_t)c->count * sizeof *c->names, 0,
                                    "checkpoint candidates"));
    return ZS_OK;
}

/* missing_ok: a root that does not exist or holds no step directory is not
 * an error (resume = "auto" on a first run); *loaded says whether anything
 * was loaded. */
static zs_status load_any(zs_ctx *zs, const char *dir, int missing_ok, int *loaded) {
    *loaded = 0;
    if (!zs->built) return zs__fail(ZS_ERR_STATE, "zs_load: call zs_build first");
    zs__ckpt_candidates c;
    zs_status st = share_candidates(zs, dir, missing_ok, &c);
    int chosen = -1;
    if (st == ZS_OK) st = zs__ckpt_select(dir, &c, try_step, zs, &chosen);
    zs__ckpt_candidates_free(&c);
    ZS_CHECK(st);
    *loaded = chosen >= 0;
    if (!*loaded && !missing_ok)
        return zs__fail(ZS_ERR_IO, "'%s' holds no checkpoint (no step_NNNNNNNN directory)", dir);
    return ZS_OK;
}

zs_status zs_load(zs_ctx *zs, const char *dir) {
    if (!zs || !dir) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_load: zs and dir are required");
    /* Collectives run here, on this thread: nothing may be queued. */
    ZS_CHECK(zs__engine_drain(zs->engine));
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
        /* The step resumed from counts as this job's last committed one. */
        else zs__job_committed(zs, zs->step);
        return ZS_OK;
    }
    zs_status st = load_any(zs, resume, 0, &loaded);
    if (st != ZS_OK) return zs__fail_context(st, "checkpoint.resume = \"%s\"", resume);
    zs__job_committed(zs, zs->step);
    return ZS_OK;
}
