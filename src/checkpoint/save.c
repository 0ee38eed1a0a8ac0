/* zs_save: the commit protocol (DESIGN §6).
 *   1. rank 0 opens the root (once; every later name is resolved from that
 *      descriptor, never followed through a symlink, and created new), checks
 *      that `latest` and step_N are things it may replace, and creates a
 *      temporary directory root/.tmp_step_N_<random> that must not exist;
 *   2. every rank writes its master, optim and user shards there (name.partial
 *      created new, every write checked, fsync, rename), hashing as it writes;
 *   3. the ranks agree: a failure on any rank fails every rank, and then every
 *      rank removes its files and rank 0 the temporary directory, so a failed
 *      save (a full disk) leaves nothing behind;
 *   4. rank 0 gathers the hashes, writes the commit record (commit_order.h),
 *      manifest.json and its hash file (temporary, fsync, rename), fsyncs the
 *      directory and renames it to root/step_N: that rename is the commit.
 *      Then it fsyncs the root and updates root/latest the same way;
 *   5. rank 0 runs retention (retention.c): leftovers of failed or killed
 *      saves, and step directories beyond checkpoint.keep by commit order.
 * A crash before the step rename leaves only a temporary directory, which
 * loading ignores and the next save removes; a crash after it leaves a
 * complete step with the newest commit record.
 *
 * After the commit, an error from the fsync of the root or from writing or
 * renaming `latest` means the new step may not survive a power failure (an
 * fsync error may have dropped the very pages it was to write: PostgreSQL's
 * "fsyncgate"). checkpoint.on_durability_error decides: "fail" (default)
 * takes the commit back (the step directory returns to its temporary name
 * and is removed, a step it replaced and `latest` get their old contents),
 * so the previous step stays the resume point and the save fails on every
 * rank; "warn" keeps the step and warns. Retention only warns when it fails:
 * the checkpoint is committed and loadable, and the next save repeats it. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/commit_order.h"
#include "checkpoint/fence.h"
#include "checkpoint/retention.h"
#include "checkpoint/safetensors.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"
#include "zero/agree.h"
#include "zero/job.h"
#include "zero/plan.h"
#include "zero/state_io.h"
#include "zero/update.h"

#define PATH_CAPACITY 4096
#define MESSAGE_CAPACITY 1024
#define FILES_PER_RANK 3 /* master, optim, user */

/* What each rank reports about one tensor it wrote; rank 0 builds the
 * manifest from these. Fixed size so the ranks can exchange them with one
 * all-gather. */
typedef struct tensor_record {
    int32_t param;  /* -1 for user state */
    int32_t state;  /* zs__ckpt_state */
    int64_t offset;
    int64_t count;
    uint64_t hash;
    char key[2 * ZS_CKPT_NAME_MAX + 16];
} tensor_record;

typedef struct rank_summary {
    int64_t failed;
    int64_t tensors;
    uint64_t bytes[FILES_PER_RANK];
    uint64_t hash[FILES_PER_RANK];
} rank_summary;

static const zs__ckpt_file_kind file_kinds[FILES_PER_RANK] = {
    ZS_CKPT_FILE_MASTER, ZS_CKPT_FILE_OPTIM, ZS_CKPT_FILE_USER};

static void state_key(char *out, size_t cap, const char *param, zs__ckpt_state state) {
    if (state == ZS_CKPT_STATE_MASTER) snprintf(out, cap, "%s", param);
    else snprintf(out, cap, "%s:%s", param, zs__ckpt_state_name(state));
}

typedef struct fault_ctx {
    int rank;
    int64_t step;
} fault_ctx;

static void fault_progress(void *ctx, int index) {
    const fault_ctx *f = ctx;
    if (index == 0) zs__checkpoint_fault("write", f->rank, f->step);
}

/* Where a state tensor's bytes come from while it is written: the owned
 * range [first, ...) of a parameter's array, read from wherever the state
 * lives a piece at a time, so that a save holds a few pieces of host memory
 * rather than a copy of the rank's state. */
typedef struct state_source {
    zs_ctx *zs;
    zs__state_array array;
    int param;
    int64_t first;
} state_source;

static zs_status read_state(void *ctx, uint64_t offset, void *dst, uint64_t bytes) {
    const state_source *src = ctx;
    const int64_t first = src->first + (int64_t)(offset / sizeof(float));
    /* A frozen parameter's one tensor, "master", is its value. */
    if (src->zs->params[src->param]->flags & ZS_PARAM_FROZEN)
        return zs__frozen_read(src->zs, src->param, first, (int64_t)(bytes / sizeof(float)), dst);
    return zs__state_read(src->zs, src->array, src->param, first,
                          (int64_t)(bytes / sizeof(float)), dst);
}

/* The tensors of one of this rank's files, with their records. */
typedef struct file_plan {
    state_source *sources; /* [count] the state tensors' sources */
    zs__st_tensor_spec *specs;
    tensor_record *records;
    zs__st_meta *meta;
    char (*meta_text)[2][ZS_ST_NAME_MAX + 64];
    int count, meta_count;
} file_plan;

static void file_plan_free(file_plan *f) {
    free(f->sources);
    free(f->specs);
    free(f->records);
    free(f->meta);
    free(f->meta_text);
    memset(f, 0, sizeof *f);
}

static zs_status file_plan_alloc(file_plan *f, int capacity) {
    memset(f, 0, sizeof *f);
    int cap = capacity > 0 ? capacity : 1;
    f->specs = zs__calloc((size_t)cap, sizeof *f->specs);
    f->sources = zs__calloc((size_t)cap, sizeof *f->sources);
    f->records = zs__calloc((size_t)cap, sizeof *f->records);
    f->meta = zs__calloc((size_t)cap + 8, sizeof *f->meta);
    f->meta_text = zs__calloc((size_t)cap + 8, sizeof *f->meta_text);
    if (!f->specs || !f->records || !f->meta || !f->meta_text || !f->sources) {
        file_plan_free(f);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_save: out of host memory");
    }
    return ZS_OK;
}

static void add_meta(file_plan *f, const char *key, const char *value) {
    snprintf(f->meta_text[f->meta_count][0], sizeof f->meta_text[0][0], "%s", key);
    snprintf(f->meta_text[f->meta_count][1], sizeof f->meta_text[0][1], "%s", value);
    f->meta[f->meta_count].key = f->meta_text[f->meta_count][0];
    f->meta[f->meta_count].value = f->meta_text[f->meta_count][1];
    f->meta_count++;
}

static void add_tensor(file_plan *f, const char *key, zs__st_dtype dtype, const void *data,
                       int64_t count, int param, zs__ckpt_state state, int64_t offset) {
    tensor_record *r = &f->records[f->count];
    snprintf(r->key, sizeof r->key, "%s", key);
    r->param = param;
    r->state = (int32_t)state;
    r->offset = offset;
    r->count = count;
    zs__st_tensor_spec *spec = &f->specs[f->count];
    spec->name = r->key;
    spec->dtype = dtype;
    spec->ndim = 1;
    spec->shape[0] = count;
    spec->data = data;
    spec->bytes = (uint64_t)count * zs__st_dtype_size(dtype);
    f->count++;
}

/* Plans this rank's three files: its owned range of every parameter for
 * master and each optimizer state, and its user state (rank 0 adds the
 * global entries). Metadata names the step, rank and offsets, so a file can
 * be recognized on its own. */
static zs_status plan_files(zs_ctx *zs, file_plan files[FILES_PER_RANK]) {
    zs__ckpt_state states[4];
    const int nstates = zs__checkpoint_states(zs, states);
    ZS_CHECK(file_plan_alloc(&files[0], zs->param_count));
    ZS_CHECK(file_plan_alloc(&files[1], zs->param_count * (nstates - 1)));
    ZS_CHECK(file_plan_alloc(&files[2], zs->user_count));
    for (int k = 0; k < FILES_PER_RANK; k++) {
        char text[64];
        add_meta(&files[k], "format", "zeroshard-shard");
        snprintf(text, sizeof text, "%d", ZS_CKPT_VERSION);
        add_meta(&files[k], "version", text);
        snprintf(text, sizeof text, "%" PRId64, zs->step);
        add_meta(&files[k], "step", text);
        snprintf(text, sizeof text, "%d", zs->rank);
        add_meta(&files[k], "rank", text);
        snprintf(text, sizeof text, "%d", zs->world_size);
        add_meta(&files[k], "world_size", text);
        add_meta(&files[k], "kind", zs__ckpt_file_kind_name(file_kinds[k]));
    }
    char key[2 * ZS_CKPT_NAME_MAX + 16];
    /* Double-quantized frozen values are saved as their dequantization;
     * quantizing those again on a load does not give the same scales'
     * codes back (the single-level records do), so say how to keep the
     * base exact: record it. */
    if (!zs->base.current && zs->plan->quant_double && zs->plan->quantized_units > 0 &&
        zs->rank == 0)
        ZS_WARN("zs_save: the frozen base is stored double-quantized "
                "(zero.frozen_double_quant) and saved as its dequantized values, which a load "
                "quantizes again into slightly different scales; declare the base with "
                "zs_set_frozen_base (llama_train: app.init_from) to record it instead, and "
                "every start quantizes it from the same source");
    /* Replicated across nodes (zero.shard_group = "node"), the replicas of
     * a slice hold the same state: replica 0 writes it, the others write
     * files without it (and their own per-rank user state), so the
     * checkpoint holds every element once, as a plain run's does, and loads
     * into any world size, stage and shard group. */
    for (int i = 0; i < zs->param_count && zs->replica == 0; i++) {
        int64_t b, e;
        if (!zs__plan_owned_range(zs->plan, i, zs->shard_rank, &b, &e)) continue;
        const int frozen = (zs->params[i]->flags & ZS_PARAM_FROZEN) != 0;
        /* Frozen values that are the declared base's are not copied: the
         * manifest records the base (zs_set_frozen_base). */
        if (frozen && zs->base.current) continue;
        for (int s = 0; s < nstates; s++) {
            /* Frozen: the values (as master), no optimizer state. */
            if (frozen && states[s] != ZS_CKPT_STATE_MASTER) continue;
            file_plan *f = &files[zs__ckpt_state_file_kind(states[s])];
            state_key(key, sizeof key, zs->params[i]->name, states[s]);
            /* Streamed from wherever the state lives (the writer reads it
             * piece by piece: zs__st_tensor_spec.read). */
            state_source *src = &f->sources[f->count];
            *src = (state_source){zs, zs__checkpoint_state_array(states[s]), i, b};
            add_tensor(f, key, ZS_ST_F32, NULL, e - b, i, states[s], b);
            f->specs[f->count - 1].read = read_state;
            f->specs[f->count - 1].read_ctx = src;
        }
    }
    for (int u = 0; u < zs->user_count; u++) {
        const zs__user_entry *entry = &zs->user[u];
        if (!entry->per_rank && zs->rank != 0) continue;
        snprintf(key, sizeof key, "%s:%s", entry->per_rank ? "rank" : "global", entry->name);
        add_tensor(&files[2], key, ZS_ST_U8, entry->data, (int64_t)entry->bytes, -1,
                   entry->per_rank ? ZS_CKPT_STATE_USER_RANK : ZS_CKPT_STATE_USER_GLOBAL, 0);
    }
    return ZS_OK;
}

/* Writes one shard as dirfd/final: zs__st_write_at creates final.partial
 * new relative to the directory descriptor (O_EXCL|O_NOFOLLOW), so nothing
 * planted at the name receives the data and no path string is resolved
 * again; the rename then publishes it under its final name. */
static zs_status write_one(int dirfd, const char *dir_path, const char *final, const file_plan *f,
                           zs__st_progress_fn progress, void *progress_ctx, uint64_t *hashes,
                           uint64_t *file_hash, uint64_t *file_bytes) {
    char partial[128];
    snprintf(partial, sizeof partial, "%s.partial", final);
    /* A failed write unlinks the partial file itself; a failed create leaves
     * whatever held the name alone (it is not ours). */
    ZS_CHECK(zs__st_write_at(dirfd, dir_path, partial, f->specs, f->count, f->meta, f->meta_count,
                             progress, progress_ctx, hashes, file_hash, file_bytes));
    zs_status st = zs__fs_rename_at(dirfd, dir_path, partial, dirfd, dir_path, final);
    if (st != ZS_OK) unlinkat(dirfd, partial, 0);
    return st;
}

/* Writes this rank's files into the temporary directory tmpfd; fills
 * summary and the records' hashes. */
static zs_status write_shards(zs_ctx *zs, int tmpfd, const char *tmp, file_plan files[FILES_PER_RANK],
                              rank_summary *summary) {
    fault_ctx fault = {zs->rank, zs->step};
    char name[64];
    for (int k = 0; k < FILES_PER_RANK; k++) {
        file_plan *f = &files[k];
        uint64_t *hashes = zs__calloc((size_t)(f->count ? f->count : 1), sizeof *hashes);
        if (!hashes) return zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_save: out of host memory");
        zs__ckpt_shard_name(name, sizeof name, zs->rank, file_kinds[k]);
        zs_status st = write_one(tmpfd, tmp, name, f, k == 0 ? fault_progress : NULL, &fault,
                                 hashes, &summary->hash[k], &summary->bytes[k]);
        for (int t = 0; st == ZS_OK && t < f->count; t++) f->records[t].hash = hashes[t];
        free(hashes);
        if (st != ZS_OK) return st;
    }
    ZS_CHECK(zs__fs_fsync_fd(tmpfd, tmp));
    zs__checkpoint_fault("shard", zs->rank, zs->step);
    return ZS_OK;
}

/* This rank's files in the temporary directory, after a failed save. */
static void remove_own_files(int tmpfd, int rank) {
    char name[64], partial[80];
    for (int k = 0; k < FILES_PER_RANK; k++) {
        zs__ckpt_shard_name(name, sizeof name, rank, file_kinds[k]);
        snprintf(partial, sizeof partial, "%s.partial", name);
        unlinkat(tmpfd, name, 0);
        unlinkat(tmpfd, partial, 0);
    }
}

/* Rank 0: the manifest from the model and every rank's report. */
static zs_status build_manifest(const zs_ctx *zs, const rank_summary *summaries,
                                const tensor_record *records, int64_t per_rank,
                                zs__manifest **out) {
    int64_t total = 0;
    for (int r = 0; r < zs->world_size; r++) total += summaries[r].tensors;
    if (total > ZS_CKPT_MAX_ENTRIES)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_save: %lld tensors exceed the format's limit",
                        (long long)total);
    zs__manifest *m = NULL;
    ZS_CHECK(zs__manifest_alloc(zs->unit_count, zs->param_count,
                                zs->world_size * FILES_PER_RANK, (int)total, &m));
    m->version = ZS_CKPT_VERSION;
    m->step = zs->step;
    m->skipped_total = zs->skipped_total;
    m->world_size = zs->world_size;
    m->stage = zs->settings.zero.stage;
    m->config_hash = zs->config_hash;
    m->compute_dtype = zs->compute_dtype;
    m->optimizer = (int)zs->settings.optimizer.kind;
    /* The frozen values are the declared base's: the base is recorded
     * instead (plan_files left them out). */
    if (zs->base.current) {
        m->has_base = 1;
        snprintf(m->base_path, sizeof m->base_path, "%s", zs->base.path);
        snprintf(m->base_prefix, sizeof m->base_prefix, "%s", zs->base.name_prefix);
        m->base_xxh3 = zs->base.xxh3;
        m->base_tensors = zs->base.tensors;
    }
    m->scaler = (zs__ckpt_scaler){zs->scaler.scale, zs->scaler.cur_iter,
                                  zs->scaler.last_overflow_iter, zs->scaler.cur_hysteresis,
                                  zs->scaler.consecutive_overflows, zs->scaler.overflows_total};
    for (int u = 0; u < zs->unit_count; u++)
        snprintf(m->units[u].name, sizeof m->units[u].name, "%s", zs->units[u]->name);
    for (int i = 0; i < zs->param_count; i++) {
        const zs_param *p = zs->params[i];
        zs__ckpt_param *cp = &m->params[i];
        snprintf(cp->name, sizeof cp->name, "%s", p->name);
        cp->unit = p->unit->index;
        cp->ndim = p->ndim;
        memcpy(cp->shape, p->shape, sizeof(int64_t) * (size_t)p->ndim);
        /* ZS_PARAM_QUANTIZE is how a run stores the values, not what they
         * are: the checkpoint holds them in fp32 and loads into a run that
         * stores them either way. */
        cp->flags = p->flags & ~ZS_PARAM_QUANTIZE;
    }
    int t = 0;
    for (int r = 0; r < zs->world_size; r++) {
        const tensor_record *mine = records + (size_t)r * (size_t)per_rank;
        for (int k = 0; k < FILES_PER_RANK; k++) {
            zs__ckpt_file *f = &m->files[r * FILES_PER_RANK + k];
            zs__ckpt_shard_name(f->name, sizeof f->name, r, file_kinds[k]);
            f->rank = r;
            f->kind = file_kinds[k];
            f->bytes = summaries[r].bytes[k];
            f->xxh3 = summaries[r].hash[k];
        }
        for (int64_t i = 0; i < summaries[r].tensors; i++, t++) {
            const tensor_record *rec = &mine[i];
            zs__ckpt_tensor *ct = &m->tensors[t];
            zs__ckpt_state state = (zs__ckpt_state)rec->state;
            ct->file = r * FILES_PER_RANK + (int)zs__ckpt_state_file_kind(state);
            snprintf(ct->key, sizeof ct->key, "%s", rec->key);
            ct->state = state;
            ct->param = rec->param;
            ct->offset = rec->offset;
            ct->count = rec->count;
            ct->xxh3 = rec->hash;
        }
    }
    *out = m;
    return ZS_OK;
}

/* One save's handles and names, so that every failure path cleans up the
 * same way (save_checkpoint's fail labels). */
typedef struct save_run {
    int rootfd, tmpfd;
    char tmp_name[96];         /* the temporary step directory inside the root */
    char tmp[PATH_CAPACITY];   /* its path, for messages */
    char step_name[64];        /* step_NNNNNNNN */
    char old_name[96];         /* where a step this save replaces was moved, or "" */
    int tmp_created;           /* rank 0: the temporary directory exists */
    int committed;             /* rank 0: the step directory is renamed into place */
    int had_latest;            /* rank 0: `latest` existed before the commit */
    char latest_before[80];    /* and held this */
    file_plan files[FILES_PER_RANK];
    rank_summary *summaries;   /* [world_size] every rank's report */
    tensor_record *records;    /* [world_size * per_rank] */
    int64_t per_rank;          /* records per rank (at least 1) */
} save_run;

static void save_run_close(save_run *run) {
    for (int k = 0; k < FILES_PER_RANK; k++) file_plan_free(&run->files[k]);
    free(run->summaries);
    free(run->records);
    run->summaries = NULL;
    run->records = NULL;
    if (run->tmpfd >= 0) close(run->tmpfd);
    if (run->rootfd >= 0) close(run->rootfd);
    run->tmpfd = run->rootfd = -1;
}

/* Rank 0, before the commit: what `latest` holds, so a commit taken back
 * can give it back. */
static void remember_latest(save_run *run, const char *root) {
    char *text = NULL;
    size_t bytes = 0;
    run->had_latest = 0;
    if (zs__fs_kind_at(run->rootfd, ZS_CKPT_LATEST) != ZS_FS_KIND_FILE) return;
    if (zs__fs_read_file_at(run->rootfd, root, ZS_CKPT_LATEST, sizeof run->latest_before - 1,
                            &text, &bytes) == ZS_OK) {
        memcpy(run->latest_before, text, bytes + 1);
        run->had_latest = 1;
    }
    free(text);
    zs__clear_error();
}

/* Rank 0, checkpoint.on_durability_error = "fail": takes the commit back
 * after `what` failed (its message is the last error). The step directory
 * returns to its temporary name (the failed save's clean-up removes it), a
 * step it replaced returns to the step's name, and `latest` gets its old
 * contents back, so loading picks the previous step, as if the save had
 * failed before its commit. Best effort: the storage is failing; what cannot
 * be put back is named in a warning. Returns the failure to report. */
static zs_status take_back_commit(const zs_ctx *zs, save_run *run, const char *root,
                                  const char *what) {
    char cause[MESSAGE_CAPACITY];
    snprintf(cause, sizeof cause, "%s", zs_last_error());
    if (renameat(run->rootfd, run->step_name, run->rootfd, run->tmp_name) != 0) {
        ZS_WARN("%s/%s could not be taken back after %s failed (%s); it stays committed, but it "
                "may not survive a power failure: verify it (zs-ckpt verify) before resuming "
                "from it", root, run->step_name, what, strerror(errno));
    } else {
        run->committed = 0;
        if (run->old_name[0] &&
            renameat(run->rootfd, run->old_name, run->rootfd, run->step_name) != 0)
            ZS_WARN("%s/%s could not be moved back to %s/%s (%s); it is a complete checkpoint: "
                    "rename it by hand", root, run->old_name, root, run->step_name,
                    strerror(errno));
        char *now = NULL;
        size_t bytes = 0;
        char mine[80];
        snprintf(mine, sizeof mine, "%s\n", run->step_name);
        /* `latest` names the new step only when its rename went through. */
        int names_new = zs__fs_read_file_at(run->rootfd, root, ZS_CKPT_LATEST, sizeof mine,
                                            &now, &bytes) == ZS_OK &&
                        strcmp(now, mine) == 0;
        free(now);
        if (names_new && !(run->had_latest && strcmp(run->latest_before, mine) == 0)) {
            zs_status restored =
                run->had_latest ? zs__fs_write_atomic_at(run->rootfd, root, ZS_CKPT_LATEST,
                                                         run->latest_before,
                                                         strlen(run->latest_before))
                : unlinkat(run->rootfd, ZS_CKPT_LATEST, 0) == 0
                    ? ZS_OK
                    : zs__fail(ZS_ERR_IO, "%s/%s: cannot remove: %s", root, ZS_CKPT_LATEST,
                               strerror(errno));
            if (restored != ZS_OK)
                ZS_WARN("%s/%s still names %s, which was taken back (%s); loading goes by the "
                        "commit records and skips it", root, ZS_CKPT_LATEST, run->step_name,
                        zs_last_error());
        }
        (void)zs__fs_fsync_fd(run->rootfd, root);
    }
    return zs__fail(ZS_ERR_IO,
                    "%s; the checkpoint of step %lld may not be durable, so it is not kept: the "
                    "previous checkpoint stays the one to resume from. Check the storage (the "
                    "kernel log), or set checkpoint.on_durability_error = \"warn\" to keep such "
                    "a step with a warning",
                    cause, (long long)zs->step);
}

/* Rank 0: a step after the commit point failed (`what`; its message is the
 * last error). "warn" keeps the step with a warning (`consequence` says what
 * it means) and returns ZS_OK; "fail" takes the commit back and fails. */
static zs_status durability_error(const zs_ctx *zs, save_run *run, const char *root,
                                  const char *what, const char *consequence) {
    if (zs->settings.checkpoint.on_durability_error == ZS_DURABILITY_FAIL)
        return take_back_commit(zs, run, root, what);
    ZS_WARN("%s/%s is committed, but %s failed: %s; %s (checkpoint.on_durability_error = "
            "\"warn\")", root, run->step_name, what, zs_last_error(), consequence);
    zs__clear_error();
    return ZS_OK;
}

/* Rank 0: commit record, manifest files, the rename that commits, then the
 * fsync of the root and `latest` (see the top for what their failures do). */
static zs_status commit(zs_ctx *zs, save_run *run, const char *root, const zs__manifest *m) {
    zs__ckpt_commit *order = NULL;
    int steps = 0;
    ZS_CHECK(zs__checkpoint_commit_order_at(run->rootfd, root, &order, &steps));
    const uint64_t seq = zs__checkpoint_next_seq(order, steps);
    free(order);
    ZS_CHECK(zs__checkpoint_commit_record_write(run->tmpfd, run->tmp, zs->step, seq));
    char *json = NULL;
    size_t bytes = 0;
    ZS_CHECK(zs__manifest_to_json(m, &json, &bytes));
    char hash_text[32];
    snprintf(hash_text, sizeof hash_text, "%016" PRIx64 "\n", (uint64_t)XXH3_64bits(json, bytes));
    zs_status st = zs__fs_write_atomic_at(run->tmpfd, run->tmp, ZS_CKPT_MANIFEST, json, bytes);
    free(json);
    ZS_CHECK(st);
    ZS_CHECK(zs__fs_write_atomic_at(run->tmpfd, run->tmp, ZS_CKPT_MANIFEST_HASH, hash_text,
                                    strlen(hash_text)));
    ZS_CHECK(zs__fs_fsync_fd(run->tmpfd, run->tmp));
    zs__checkpoint_fault("manifest", zs->rank, zs->step);
    /* The generation fence, as late as possible: a launcher that started a
     * newer job while this one was writing has written its generation by
     * now, and nothing visible has changed yet (checkpoint/fence.h). */
    ZS_CHECK(zs__checkpoint_fence_at(run->rootfd, root, zs__job_generation(zs),
                                     "nothing committed"));

    /* Saving a step that was saved before replaces it: the old directory is
     * moved aside first (loading ignores names starting with '.', retention
     * removes it), so a crash never leaves the step missing once the new one
     * is complete. */
    if (zs__fs_kind_at(run->rootfd, run->step_name) == ZS_FS_KIND_DIR) {
        snprintf(run->old_name, sizeof run->old_name, ZS_CKPT_OLD_PREFIX "%08" PRId64 "_%016llx",
                 zs->step, (unsigned long long)zs__fs_random());
        ZS_CHECK(zs__fs_rename_at(run->rootfd, root, run->step_name, run->rootfd, root,
                                  run->old_name));
    }
    remember_latest(run, root);
    st = zs__fs_rename_at(run->rootfd, root, run->tmp_name, run->rootfd, root, run->step_name);
    if (st != ZS_OK) {
        /* Not committed: the replaced step goes back to its name. */
        if (run->old_name[0] &&
            renameat(run->rootfd, run->old_name, run->rootfd, run->step_name) != 0)
            ZS_WARN("%s/%s could not be moved back to %s/%s (%s); it is a complete checkpoint: "
                    "rename it by hand", root, run->old_name, root, run->step_name,
                    strerror(errno));
        return st;
    }
    run->committed = 1;
    if (zs__fs_fsync_fd(run->rootfd, root) != ZS_OK)
        ZS_CHECK(durability_error(zs, run, root, "the fsync of the checkpoint root",
                                  "it may not survive a power failure"));
    zs__checkpoint_fault("rename", zs->rank, zs->step);
    char latest[80];
    snprintf(latest, sizeof latest, "%s\n", run->step_name);
    if (zs__fs_write_atomic_at(run->rootfd, root, ZS_CKPT_LATEST, latest, strlen(latest)) != ZS_OK)
        ZS_CHECK(durability_error(zs, run, root, "updating " ZS_CKPT_LATEST,
                                  "loading goes by the commit records, and the next save "
                                  "writes " ZS_CKPT_LATEST " again"));
    zs__checkpoint_fault("latest", zs->rank, zs->step);
    return ZS_OK;
}

/* Rank 0: the manifest, the commit and, once committed, retention (whose
 * failure only warns: the checkpoint is committed and loadable). */
static zs_status publish(zs_ctx *zs, save_run *run, const char *root) {
    zs__manifest *m = NULL;
    ZS_CHECK(build_manifest(zs, run->summaries, run->records, run->per_rank, &m));
    zs_status st = commit(zs, run, root, m);
    zs__manifest_free(m);
    ZS_CHECK(st);
    if (zs__checkpoint_retain(run->rootfd, root, run->step_name, zs->settings.checkpoint.keep,
                              &zs->ckpt_warned) != ZS_OK)
        ZS_WARN("checkpoint of step %lld is committed, but cleaning up '%s' failed: %s",
                (long long)zs->step, root, zs_last_error());
    zs__clear_error();
    return ZS_OK;
}

/* Rank 0, before anything is written: the root (created if missing) and
 * the names this save will replace must be ones the runtime may replace;
 * then the temporary directory, under a name no one can predict. */
static zs_status prepare_root(const zs_ctx *zs, const char *root, int *rootfd, char *tmp_name,
                              size_t cap) {
    ZS_CHECK(zs__fs_open_root(root, 1, rootfd));
    zs__fs_kind kind = zs__fs_kind_at(*rootfd, ZS_CKPT_LATEST);
    if (kind == ZS_FS_KIND_DIR || kind == ZS_FS_KIND_OTHER)
        return zs__fail(ZS_ERR_IO,
                        "%s/%s is %s, but the runtime keeps a file there naming the newest "
                        "checkpoint; nothing was saved. Move it away (mv '%s/%s' '%s/%s.bak') "
                        "and save again",
                        root, ZS_CKPT_LATEST,
                        kind == ZS_FS_KIND_DIR ? "a directory" : "not a regular file",
                        root, ZS_CKPT_LATEST, root, ZS_CKPT_LATEST);
    char step_name[64];
    zs__checkpoint_step_name(step_name, sizeof step_name, zs->step);
    kind = zs__fs_kind_at(*rootfd, step_name);
    if (kind != ZS_FS_KIND_MISSING && kind != ZS_FS_KIND_DIR)
        return zs__fail(ZS_ERR_IO,
                        "%s/%s exists and is %s, not a checkpoint directory; the runtime does not "
                        "replace what it did not write, and nothing was saved. Move it away and "
                        "save again",
                        root, step_name, kind == ZS_FS_KIND_SYMLINK ? "a symlink" : "a file");
    snprintf(tmp_name, cap, ZS_CKPT_TMP_PREFIX "%08" PRId64 "_%016llx", zs->step,
             (unsigned long long)zs__fs_random());
    return zs__fs_mkdir_new_at(*rootfd, root, tmp_name);
}

static zs_status save_checkpoint(zs_ctx *zs, const char *dir);

zs_status zs_save(zs_ctx *zs, const char *dir) {
    if (!zs) return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_save: context is NULL");
    /* Collectives run here, on this thread: nothing may be queued. */
    ZS_CHECK(zs__engine_drain(zs->engine));
    const uint64_t traced_from = zs__trace_clock(zs->trace);
    zs_status saved = save_checkpoint(zs, dir);
    zs__trace_span(zs->trace, ZS_TRACE_CHECKPOINT, "checkpoint save", traced_from,
                   zs__trace_clock(zs->trace), NULL);
    /* A checkpoint is also when the trace file is brought up to date (the
     * comm thread is idle here). */
    if (zs->trace && zs__trace_flush(zs->trace) != ZS_OK)
        ZS_WARN("trace: %s", zs_last_error());
    return saved;
}

/* Every rank: the checks that must pass before anything is written. */
static zs_status check_preconditions(const zs_ctx *zs, const char *root) {
    if (!zs->built) return zs__fail(ZS_ERR_STATE, "zs_save: call zs_build first");
    if (!root || !*root)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs_save: no directory given and checkpoint.dir "
                                                 "is empty");
    if (zs->micro != 0)
        return zs__fail(ZS_ERR_STATE, "zs_save: an accumulation window is open (%lld of %lld "
                        "micro-steps done); save after the step that ends it",
                        (long long)zs->micro, (long long)zs->settings.gradient_accumulation_steps);
    for (int u = 0; u < zs->unit_count; u++)
        if (zs->units[u]->fetched || zs__grads_declared(zs->units[u]))
            return zs__fail(ZS_ERR_STATE, "zs_save: unit '%s' is inside a step; save between "
                            "zs_step and the next zs_fetch", zs->units[u]->name);
    return ZS_OK;
}

/* Every rank: its summary to all, its records to all (rank 0 builds the
 * manifest from them). Collective. */
static zs_status gather_reports(zs_ctx *zs, const rank_summary *summary, save_run *run) {
    /* Each array is agreed on before the all-gather that fills it: a rank
     * without the memory must not leave the others in the collective. */
    ZS_CHECK(zs__calloc_agreed(zs, (size_t)zs->world_size, sizeof *run->summaries,
                               "zs_save (the ranks' reports)", (void **)&run->summaries));
    ZS_CHECK(zs__comm_all_gather_bytes(zs->comm, summary, sizeof *summary, run->summaries,
                                       "checkpoint reports"));
    run->per_rank = 1;
    for (int r = 0; r < zs->world_size; r++)
        if (run->summaries[r].tensors > run->per_rank) run->per_rank = run->summaries[r].tensors;
    const size_t n = (size_t)run->per_rank;
    tensor_record *mine = zs__calloc(n, sizeof *mine);
    zs_status st = zs__agree_status(
        zs, mine ? ZS_OK : zs__fail(ZS_ERR_OUT_OF_MEMORY, "zs_save: out of host memory for %zu "
                                    "tensor records", n),
        "zs_save (this rank's tensor records)");
    if (st == ZS_OK)
        st = zs__calloc_agreed(zs, n * (size_t)zs->world_size, sizeof *run->records,
                               "zs_save (every rank's tensor records)", (void **)&run->records);
    if (st == ZS_OK) {
        int64_t t = 0;
        for (int k = 0; k < FILES_PER_RANK; k++)
            for (int i = 0; i < run->files[k].count; i++) mine[t++] = run->files[k].records[i];
        st = zs__comm_all_gather_bytes(zs->comm, mine, sizeof *mine * n, run->records,
                                       "checkpoint reports");
    }
    free(mine);
    return st;
}

/* After a failed save, once every rank is done with the temporary
 * directory: rank 0 removes it (unless the step stayed committed). The
 * first error stays the one reported. */
static void remove_temporary(zs_ctx *zs, save_run *run, const char *root, zs_status st) {
    char message[MESSAGE_CAPACITY];
    snprintf(message, sizeof message, "%s", zs_last_error());
    /* A barrier that fails (a rank gone) changes nothing here: the save has
     * failed already, and its first error is the one to report. */
    (void)zs__comm_barrier(zs->comm, "checkpoint clean-up");
    int foreign = 0;
    char what[256];
    if (zs->rank == 0 && run->tmp_created && !run->committed &&
        (zs__checkpoint_purge_dir(run->rootfd, root, run->tmp_name, &foreign, what,
                                  sizeof what) != ZS_OK ||
         foreign > 0))
        ZS_WARN("zs_save failed, and its temporary directory %s could not be removed%s%s; the "
                "next save retries", run->tmp, foreign ? ": it holds " : "", foreign ? what : "");
    zs__fail(st, "%s", message);
}

static zs_status save_checkpoint(zs_ctx *zs, const char *dir) {
    const char *root = dir ? dir : zs->settings.checkpoint.dir;
    zs_status local = check_preconditions(zs, root);
    /* An offloaded update still running ends first: the checkpoint holds
     * the step it follows, whole (its copies back and gathers are
     * collectives every rank runs here). */
    zs_status finished = zs->built ? zs__update_finish(zs) : ZS_OK;
    if (local == ZS_OK) local = finished;
    ZS_CHECK(zs__agree_status(zs, local, "checkpoint preconditions"));

    save_run run;
    memset(&run, 0, sizeof run);
    run.rootfd = run.tmpfd = -1;
    zs__checkpoint_step_name(run.step_name, sizeof run.step_name, zs->step);
    zs_status st = ZS_OK;

    /* 1. Rank 0 makes the temporary directory and tells everyone its name;
     *    every rank opens it and works from that descriptor. */
    if (zs->rank == 0) {
        local = prepare_root(zs, root, &run.rootfd, run.tmp_name, sizeof run.tmp_name);
        run.tmp_created = local == ZS_OK;
    }
    ZS_CHECK_GOTO(zs__share_outcome(zs, local, 0, "checkpoint directory"), st, fail);
    ZS_CHECK_GOTO(zs__comm_broadcast(zs->comm, run.tmp_name, sizeof run.tmp_name, 0,
                                     "checkpoint directory"),
                  st, fail);

    /* 2. Every rank writes its shards. */
    rank_summary summary;
    memset(&summary, 0, sizeof summary);
    local = zs__checkpoint_join(run.tmp, sizeof run.tmp, root, run.tmp_name);
    if (local == ZS_OK && zs->rank != 0) local = zs__fs_open_root(root, 0, &run.rootfd);
    if (local == ZS_OK) local = zs__fs_open_dir_at(run.rootfd, root, run.tmp_name, &run.tmpfd);
    if (local == ZS_OK) local = plan_files(zs, run.files);
    if (local == ZS_OK) local = write_shards(zs, run.tmpfd, run.tmp, run.files, &summary);
    summary.failed = local != ZS_OK;
    for (int k = 0; k < FILES_PER_RANK; k++) summary.tensors += run.files[k].count;

    /* 3. Agreement, and the reports for the manifest. */
    ZS_CHECK_GOTO(zs__agree_status(zs, local, "checkpoint shards"), st, fail_shards);
    ZS_CHECK_GOTO(gather_reports(zs, &summary, &run), st, fail_shards);
    for (int k = 0; k < FILES_PER_RANK; k++) file_plan_free(&run.files[k]);

    /* 4-5. Rank 0 commits and cleans up; everyone learns the outcome. */
    local = zs->rank == 0 ? publish(zs, &run, root) : ZS_OK;
    ZS_CHECK_GOTO(zs__share_outcome(zs, local, 0, "checkpoint commit"), st, fail_commit);
    save_run_close(&run);
    zs__job_committed(zs, zs->step);
    ZS_INFO("saved checkpoint of step %lld to %s/%s", (long long)zs->step, root, run.step_name);
    return ZS_OK;

fail_shards:
    /* A failed save leaves nothing behind: every rank removes its own files
     * (each knows them, whatever another rank managed to write). */
    if (run.tmpfd >= 0) remove_own_files(run.tmpfd, zs->rank);
fail_commit:
    remove_temporary(zs, &run, root, st);
fail:
    save_run_close(&run);
    return zs__fail_context(st, "zs_save(step %lld into '%s')", (long long)zs->step, root);
}
