/* The shared verification of a step directory (see verify.h): zs_load and
 * zs-ckpt call these same functions, so a directory one of them accepts the
 * other accepts too. */
#include "checkpoint/verify.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "checkpoint/checkpoint.h"
#include "core/alloc.h"
#include "core/config.h"
#include "core/error.h"
#include "core/fs.h"

#define HASH_FILE_MAX 64 /* bytes of manifest.json.xxh3: 16 digits and a newline, with room */
#define STATES 4         /* master, exp_avg, exp_avg_sq, momentum */

static zs_status join(char *out, size_t cap, const char *dir, const char *name) {
    int n = snprintf(out, cap, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= cap)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "path %s/%s is longer than %zu bytes", dir, name,
                        cap - 1);
    return ZS_OK;
}

/* ------------------------------------------------------------ the manifest */

static int state_fits_file(zs__ckpt_state state, zs__ckpt_file_kind kind) {
    return (int)state >= 0 && (int)state <= (int)ZS_CKPT_STATE_USER_RANK &&
           zs__ckpt_state_file_kind(state) == kind;
}

/* Sorting (file, param, state) triples finds a repeated one in n log n. */
typedef struct triple {
    int file, param, state, index;
} triple;

static int cmp_triple(const void *x, const void *y) {
    const triple *a = x, *b = y;
    if (a->file != b->file) return a->file < b->file ? -1 : 1;
    if (a->param != b->param) return a->param < b->param ? -1 : 1;
    if (a->state != b->state) return a->state < b->state ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

zs_status zs__ckpt_check_manifest(const zs__manifest *m, const char *where) {
    /* Files: exactly one per (rank, kind), named as the save names them. */
    const int kinds = 3;
    /* A world size whose file count would pass the manifest's limit is
     * said in words: the product would overflow, or name an impossible
     * count. */
    if (m->world_size > ZS_CKPT_MAX_ENTRIES / kinds)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: world_size %d cannot be a save's: %d ranks would write %d files each "
                        "(master, optim and user), more than the %d entries a manifest may list; "
                        "the manifest is damaged or not zeroshard's",
                        where, m->world_size, m->world_size, kinds, ZS_CKPT_MAX_ENTRIES);
    if (m->file_count != m->world_size * kinds)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: %d files listed, but a save by %d rank(s) writes exactly %d "
                        "(master, optim and user per rank)",
                        where, m->file_count, m->world_size, m->world_size * kinds);
    for (int f = 0; f < m->file_count; f++) {
        const zs__ckpt_file *cf = &m->files[f];
        char expect[ZS_CKPT_FILE_NAME_MAX + 1];
        zs__ckpt_shard_name(expect, sizeof expect, cf->rank, cf->kind);
        if (strcmp(cf->name, expect) != 0)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: files[%d] is rank %d's %s file but is not named %s", where, f,
                            cf->rank, zs__ckpt_file_kind_name(cf->kind), expect);
    }
    /* With the names fixed by (rank, kind), the manifest's unique-name check
     * makes every (rank, kind) appear once, and the count makes all appear. */

    /* States: the optimizer's, for every parameter. */
    int need[STATES] = {1, 0, 0, 0};
    int optional_momentum = 0;
    if (m->optimizer == ZS_OPTIMIZER_SGD) optional_momentum = 1;
    else need[ZS_CKPT_STATE_EXP_AVG] = need[ZS_CKPT_STATE_EXP_AVG_SQ] = 1;

    zs_status status = ZS_OK;
    triple *items = zs__malloc(sizeof *items * (size_t)(m->tensor_count > 0 ? m->tensor_count : 1));
    int *user_per_file = zs__calloc((size_t)(m->file_count > 0 ? m->file_count : 1), sizeof(int));
    unsigned char *has = zs__calloc((size_t)(m->param_count > 0 ? m->param_count : 1), STATES);
    if (!items || !user_per_file || !has) {
        status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: no memory to check %d tensors", where,
                          m->tensor_count);
        goto done;
    }
    int n = 0;
    for (int t = 0; t < m->tensor_count; t++) {
        const zs__ckpt_tensor *ct = &m->tensors[t];
        const zs__ckpt_file *cf = &m->files[ct->file];
        if (ct->state == ZS_CKPT_STATE_USER_GLOBAL || ct->state == ZS_CKPT_STATE_USER_RANK) {
            const int global = ct->state == ZS_CKPT_STATE_USER_GLOBAL;
            const char *prefix = global ? "global:" : "rank:";
            if (strncmp(ct->key, prefix, strlen(prefix)) != 0 || ct->key[strlen(prefix)] == '\0') {
                status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                                  "%s: tensors[%d] is %s user state but its key does not start "
                                  "with \"%s\" and a name",
                                  where, t, global ? "global" : "per-rank", prefix);
                goto done;
            }
            if (global && cf->rank != 0) {
                status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                                  "%s: tensors[%d] is global user state in rank %d's file; a "
                                  "save keeps global state in rank 0's file only",
                                  where, t, cf->rank);
                goto done;
            }
            if (++user_per_file[ct->file] > ZS_CKPT_USER_MAX) {
                status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                                  "%s: files[%d] has more than %d user-state entries (the most "
                                  "zs_user_state_set allows)",
                                  where, ct->file, ZS_CKPT_USER_MAX);
                goto done;
            }
            continue;
        }
        if ((int)ct->state >= STATES || (!need[ct->state] &&
                                         !(optional_momentum && ct->state == ZS_CKPT_STATE_MOMENTUM))) {
            status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                              "%s: tensors[%d] holds '%s', which the manifest's optimizer does "
                              "not keep",
                              where, t, zs__ckpt_state_name(ct->state));
            goto done;
        }
        if (ct->count == 0) {
            /* Save writes only owned ranges, which are never empty; an
             * empty tensor covers nothing and would let a manifest list
             * any number of them. */
            status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                              "%s: tensors[%d] is empty; a save writes only non-empty ranges",
                              where, t);
            goto done;
        }
        has[(size_t)ct->param * STATES + (size_t)ct->state] = 1;
        items[n++] = (triple){ct->file, ct->param, (int)ct->state, t};
    }
    if (n > 1) qsort(items, (size_t)n, sizeof *items, cmp_triple);
    for (int k = 1; k < n; k++)
        if (items[k].file == items[k - 1].file && items[k].param == items[k - 1].param &&
            items[k].state == items[k - 1].state) {
            status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                              "%s: tensors[%d] and tensors[%d] are both params[%d] '%s' in "
                              "files[%d]; a rank saves one range per parameter and state",
                              where, items[k - 1].index, items[k].index, items[k].param,
                              zs__ckpt_state_name((zs__ckpt_state)items[k].state), items[k].file);
            goto done;
        }
    int momentum_params = 0, frozen_params = 0;
    for (int p = 0; p < m->param_count; p++) {
        /* A frozen parameter keeps its values (master) and no optimizer
         * state. */
        if (m->params[p].flags & ZS_PARAM_FROZEN) {
            frozen_params++;
            for (int s = 0; s < STATES; s++)
                if (s != ZS_CKPT_STATE_MASTER &&
                    has[(size_t)p * STATES + (size_t)s]) {
                    status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                                      "%s: params[%d] is frozen but has a '%s' tensor; frozen "
                                      "parameters keep no optimizer state",
                                      where, p, zs__ckpt_state_name((zs__ckpt_state)s));
                    goto done;
                }
            continue;
        }
        for (int s = 0; s < STATES; s++)
            if (need[s] && !has[(size_t)p * STATES + (size_t)s]) {
                status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                                  "%s: params[%d] has no '%s' tensor, which its optimizer keeps",
                                  where, p, zs__ckpt_state_name((zs__ckpt_state)s));
                goto done;
            }
        momentum_params += has[(size_t)p * STATES + ZS_CKPT_STATE_MOMENTUM];
    }
    if (m->has_base && frozen_params != m->base_tensors)
        status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                          "%s: %d parameters are frozen, but frozen_base holds %d tensors",
                          where, frozen_params, m->base_tensors);
    else if (momentum_params != 0 && momentum_params != m->param_count - frozen_params)
        status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                          "%s: %d of %d parameters have a momentum tensor; SGD keeps it for all "
                          "of them or none",
                          where, momentum_params, m->param_count);
done:
    free(items);
    free(user_per_file);
    free(has);
    return status;
}

/* 16 hex digits, optionally followed by one newline. */
static int parse_hash_file(const char *text, size_t bytes, uint64_t *out) {
    if (bytes == 17 && text[16] == '\n') bytes = 16;
    if (bytes != 16) return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < 16; i++) {
        const char c = text[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return 0;
        v = (v << 4) | (uint64_t)d;
    }
    *out = v;
    return 1;
}

/* "step_" and 8 digits: the step it names, else -1. */
static int64_t step_of_name(const char *name) {
    if (!zs__checkpoint_is_step_name(name)) return -1;
    return strtoll(name + strlen(ZS_CKPT_STEP_PREFIX), NULL, 10);
}

void zs__ckpt_step_close(zs__ckpt_step *s) {
    if (!s) return;
    if (s->fd >= 0) close(s->fd);
    zs__manifest_free(s->m);
    free(s->listed);
    free(s->header_bound);
    s->fd = -1;
    s->m = NULL;
    s->listed = NULL;
    s->header_bound = NULL;
}

/* What a shard's header may hold, from the manifest alone: its listed
 * tensors, each an entry and (as older writers and the tests' fixture
 * write) a "<key>@offset" metadata value, at the longest the writer could
 * make them (zs__st_entry_bytes_bound: every name byte escaped, every
 * integer at 19 digits, any number of dimensions), plus the fixed metadata
 * (format, version, step, rank, world size, kind), braces and padding. */
#define SHARD_OFFSET_SUFFIX_BYTES 7        /* "@offset" */
#define SHARD_HEADER_SLACK ((uint64_t)64 << 10)
#define SHARD_TENSOR_SLACK 16
static zs_status shard_bounds(zs__ckpt_step *s) {
    const zs__manifest *m = s->m;
    const size_t files = (size_t)(m->file_count > 0 ? m->file_count : 1);
    s->listed = zs__calloc(files, sizeof *s->listed);
    s->header_bound = zs__calloc(files, sizeof *s->header_bound);
    if (!s->listed || !s->header_bound)
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: no memory to bound %d shard headers", s->path,
                        m->file_count);
    for (int f = 0; f < m->file_count; f++) s->header_bound[f] = SHARD_HEADER_SLACK;
    for (int t = 0; t < m->tensor_count; t++) {
        const zs__ckpt_tensor *ct = &m->tensors[t];
        const size_t key = strlen(ct->key);
        s->listed[ct->file]++;
        s->header_bound[ct->file] +=
            zs__st_entry_bytes_bound(key, ZS_ST_MAX_DIMS) +
            zs__st_entry_bytes_bound(key + SHARD_OFFSET_SUFFIX_BYTES, 0);
    }
    return ZS_OK;
}

zs_status zs__ckpt_step_open(int root_fd, const char *root_path, const char *name,
                             zs__ckpt_step *out) {
    memset(out, 0, sizeof *out);
    out->fd = -1;
    zs_status status = ZS_OK;
    char path[ZS_CKPT_PATH_MAX], hash_path[ZS_CKPT_PATH_MAX];
    char *text = NULL, *hash_text = NULL;
    size_t bytes = 0, hash_bytes = 0;
    const char *base = name;
    if (name) {
        ZS_CHECK(join(out->path, sizeof out->path, root_path, name));
        ZS_CHECK(zs__fs_open_dir_at(root_fd, root_path, name, &out->fd));
    } else {
        int n = snprintf(out->path, sizeof out->path, "%s", root_path);
        if (n < 0 || (size_t)n >= sizeof out->path)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: path too long", root_path);
        ZS_CHECK(zs__fs_open_root(root_path, 0, &out->fd));
        base = strrchr(root_path, '/') ? strrchr(root_path, '/') + 1 : root_path;
    }
    ZS_CHECK_GOTO(join(path, sizeof path, out->path, ZS_CKPT_MANIFEST), status, fail);
    ZS_CHECK_GOTO(join(hash_path, sizeof hash_path, out->path, ZS_CKPT_MANIFEST_HASH), status,
                  fail);
    ZS_CHECK_GOTO(zs__fs_read_file_at(out->fd, out->path, ZS_CKPT_MANIFEST_HASH, HASH_FILE_MAX,
                                      &hash_text, &hash_bytes),
                  status, fail);
    uint64_t expected = 0;
    if (!parse_hash_file(hash_text, hash_bytes, &expected)) {
        status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                          "%s: expected 16 lowercase hex digits and a newline; the step was not "
                          "committed completely or the file is damaged",
                          hash_path);
        goto fail;
    }
    ZS_CHECK_GOTO(zs__fs_read_file_at(out->fd, out->path, ZS_CKPT_MANIFEST, ZS_CKPT_MANIFEST_MAX,
                                      &text, &bytes),
                  status, fail);
    const uint64_t actual = XXH3_64bits(text, bytes);
    if (actual != expected) {
        status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                          "%s: content hash %016" PRIx64 " differs from %s (%016" PRIx64
                          "): the manifest is corrupted or was changed after the save",
                          path, actual, ZS_CKPT_MANIFEST_HASH, expected);
        goto fail;
    }
    ZS_CHECK_GOTO(zs__manifest_from_json(text, bytes, path, &out->m), status, fail);
    ZS_CHECK_GOTO(zs__ckpt_check_manifest(out->m, path), status, fail);
    ZS_CHECK_GOTO(shard_bounds(out), status, fail);
    const int64_t named = step_of_name(base);
    if (named >= 0 && named != out->m->step) {
        status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                          "%s: the directory is named for step %lld but its manifest is of step "
                          "%lld (a directory renamed or copied over another)",
                          out->path, (long long)named, (long long)out->m->step);
        goto fail;
    }
    free(text);
    free(hash_text);
    return ZS_OK;
fail:
    free(text);
    free(hash_text);
    zs__ckpt_step_close(out);
    return status;
}

/* ------------------------------------------------------------ the shards */

/* Metadata `key` must be exactly `expect`; the file's value is never
 * printed (it is file content), only what was expected. */
static zs_status check_meta(const zs__st_file *f, const char *key, const char *expect,
                            const char *why) {
    const char *value = zs__st_meta_get(f, key);
    if (!value)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: the shard metadata has no \"%s\" (expected \"%s\"); not a zeroshard "
                        "shard of this checkpoint",
                        zs__st_path(f), key, expect);
    if (strcmp(value, expect) != 0)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: shard metadata \"%s\" is not \"%s\" as the "
                        "manifest says (%s)",
                        zs__st_path(f), key, expect, why);
    return ZS_OK;
}

zs_status zs__ckpt_open_shard(const zs__ckpt_step *s, int file, zs__st_file **out) {
    *out = NULL;
    const zs__manifest *m = s->m;
    const zs__ckpt_file *cf = &m->files[file];
    char path[ZS_CKPT_PATH_MAX];
    ZS_CHECK(join(path, sizeof path, s->path, cf->name));
    zs__st_file *f = NULL;
    /* Bounded by what the manifest lists: a header that claims far more is
     * refused before it is read or parsed, in time and memory proportional
     * to the manifest. The bounds need not be tight to do that, and are
     * not: a header a little off (a file swapped with another rank's, one
     * tensor too many) is parsed, so that the checks below and
     * verify_file name what is wrong with it. */
    char expected[96];
    snprintf(expected, sizeof expected, "the %d tensor%s the manifest lists in it",
             s->listed[file], s->listed[file] == 1 ? "" : "s");
    const zs__st_limits limits = {.max_header_bytes = s->header_bound[file],
                                  .max_tensors = SHARD_TENSOR_SLACK + 2 * s->listed[file],
                                  .expected = expected};
    zs_status status = zs__st_open_at_limited(s->fd, s->path, cf->name, &limits, &f);
    /* A shard the manifest lists but the directory lacks: say what that
     * means for the checkpoint, not only for the file. */
    if (status != ZS_OK && zs__fs_kind_at(s->fd, cf->name) == ZS_FS_KIND_MISSING)
        return zs__fail_context(status, "the checkpoint is incomplete (a file the manifest "
                                "lists is missing)");
    if (status != ZS_OK) return status;
    char text[32];
    /* The file's own metadata before its size and hashes: it tells a file
     * from another step, rank or run apart from plain damage. */
    ZS_CHECK_GOTO(check_meta(f, "format", "zeroshard-shard", "not a zeroshard shard"), status,
                  fail);
    snprintf(text, sizeof text, "%d", ZS_CKPT_VERSION);
    ZS_CHECK_GOTO(check_meta(f, "version", text, "written by another format version"), status,
                  fail);
    snprintf(text, sizeof text, "%" PRId64, m->step);
    ZS_CHECK_GOTO(check_meta(f, "step", text, "a file from another checkpoint"), status, fail);
    snprintf(text, sizeof text, "%d", cf->rank);
    ZS_CHECK_GOTO(check_meta(f, "rank", text, "were files renamed or swapped?"), status, fail);
    snprintf(text, sizeof text, "%d", m->world_size);
    ZS_CHECK_GOTO(check_meta(f, "world_size", text, "a file from a run of another world size"),
                  status, fail);
    ZS_CHECK_GOTO(check_meta(f, "kind", zs__ckpt_file_kind_name(cf->kind),
                             "a file of another kind under this name"),
                  status, fail);
    if (zs__st_file_bytes(f) != cf->bytes) {
        status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                          "%s: %llu bytes, but the manifest says %llu (the file was truncated "
                          "or changed)",
                          path, (unsigned long long)zs__st_file_bytes(f),
                          (unsigned long long)cf->bytes);
        goto fail;
    }
    *out = f;
    return ZS_OK;
fail:
    zs__st_close(f);
    return status;
}

static zs__st_dtype state_dtype(zs__ckpt_state state) {
    return state == ZS_CKPT_STATE_USER_GLOBAL || state == ZS_CKPT_STATE_USER_RANK ? ZS_ST_U8
                                                                                   : ZS_ST_F32;
}

/* One file: whole hash, then the exact tensor set, then each tensor. */
typedef struct read_counter {
    zs__ckpt_verify_progress_fn fn; /* NULL: nobody is watching */
    void *user;
    uint64_t bytes;                 /* read so far by this verification */
} read_counter;

static void count_read(read_counter *rc, uint64_t bytes) {
    rc->bytes += bytes;
    if (rc->fn) rc->fn(rc->user, rc->bytes);
}

static zs_status verify_file(const zs__ckpt_step *s, int fi, const int *tensors, int count,
                             read_counter *rc) {
    const zs__manifest *m = s->m;
    zs__st_file *sf = NULL;
    ZS_CHECK(zs__ckpt_open_shard(s, fi, &sf));
    const char *path = zs__st_path(sf);
    zs_status status = ZS_OK;
    uint64_t h = 0;
    ZS_CHECK_GOTO(zs__st_hash_file(sf, &h), status, done);
    count_read(rc, m->files[fi].bytes);
    if (h != m->files[fi].xxh3) {
        status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                          "%s: content hash %016" PRIx64 " differs from the manifest's %016" PRIx64
                          " (corrupted, or from another checkpoint)",
                          path, h, m->files[fi].xxh3);
        goto done;
    }
    /* Exactly the manifest's tensors: the counts equal and every listed one
     * present means no entry of the header is unlisted (keys are unique
     * within a file, in the manifest and in the header). */
    if (zs__st_count(sf) != count) {
        status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                          "%s: the header holds %d tensors but the manifest lists %d for this "
                          "file",
                          path, zs__st_count(sf), count);
        goto done;
    }
    for (int i = 0; i < count; i++) {
        const int t = tensors[i];
        const zs__ckpt_tensor *ct = &m->tensors[t];
        if (!state_fits_file(ct->state, m->files[fi].kind)) {
            status = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: the manifest puts tensors[%d] (%s) in "
                              "a %s file", path, t, zs__ckpt_state_name(ct->state),
                              zs__ckpt_file_kind_name(m->files[fi].kind));
            goto done;
        }
        const zs__st_entry *e = zs__st_find(sf, ct->key);
        /* The key as messages show it: the manifest's bytes, escaped, since
         * zs-ckpt prints them to a terminal. */
        char key[4 * sizeof ct->key + 8];
        zs__st_printable(ct->key, key, sizeof key);
        if (!e) {
            status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                              "%s: tensor '%s' (manifest tensors[%d]) is missing from the file",
                              path, key, t);
            goto done;
        }
        const zs__st_dtype want = state_dtype(ct->state);
        /* zs__st_open checked that shape x dtype size is the byte range. */
        const uint64_t want_bytes = (uint64_t)ct->count * zs__st_dtype_size(want);
        if (e->dtype != want || e->end - e->begin != want_bytes) {
            status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                              "%s: tensor '%s' is %s with %llu bytes, but the manifest expects %s "
                              "with %llu",
                              path, key, zs__st_dtype_name(e->dtype),
                              (unsigned long long)(e->end - e->begin), zs__st_dtype_name(want),
                              (unsigned long long)want_bytes);
            goto done;
        }
        char meta_key[sizeof ct->key + 16], expect[32];
        snprintf(meta_key, sizeof meta_key, "%s@offset", ct->key);
        if (zs__st_meta_get(sf, meta_key)) {
            snprintf(expect, sizeof expect, "%" PRId64, ct->offset);
            ZS_CHECK_GOTO(check_meta(sf, meta_key, expect, "the element offset differs"), status,
                          done);
        }
        uint64_t th = 0;
        ZS_CHECK_GOTO(zs__st_hash_entry(sf, e, &th), status, done);
        count_read(rc, e->end - e->begin);
        if (th != ct->xxh3) {
            status = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                              "%s: tensor '%s' has content hash %016" PRIx64
                              " but the manifest says %016" PRIx64,
                              path, key, th, ct->xxh3);
            goto done;
        }
    }
done:
    zs__st_close(sf);
    return status;
}

uint64_t zs__ckpt_verify_read_bytes(const zs__ckpt_step *s, int part, int parts, int without_optim) {
    uint64_t bytes = 0;
    if (parts < 1 || part < 0) return 0;
    for (int f = part; f < s->m->file_count; f += parts)
        if (!without_optim || s->m->files[f].kind != ZS_CKPT_FILE_OPTIM)
            bytes += 2 * s->m->files[f].bytes;
    return bytes;
}

zs_status zs__ckpt_verify_files(const zs__ckpt_step *s, int part, int parts, int without_optim,
                                zs__ckpt_verify_totals *totals) {
    return zs__ckpt_verify_files_progress(s, part, parts, without_optim, totals, NULL, NULL);
}

zs_status zs__ckpt_verify_files_progress(const zs__ckpt_step *s, int part, int parts,
                                         int without_optim, zs__ckpt_verify_totals *totals,
                                         zs__ckpt_verify_progress_fn progress, void *user) {
    const zs__manifest *m = s->m;
    if (parts < 1 || part < 0 || part >= parts)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "zs__ckpt_verify_files: part %d of %d", part,
                        parts);
    /* Tensors grouped by file with a counting sort: a pass over all tensors
     * per file would be quadratic in the world size. */
    int *start = zs__calloc((size_t)m->file_count + 1, sizeof *start);
    int *fill = zs__calloc((size_t)m->file_count + 1, sizeof *fill);
    int *order = zs__malloc(sizeof *order * (size_t)(m->tensor_count > 0 ? m->tensor_count : 1));
    zs_status status = ZS_OK;
    if (!start || !fill || !order) {
        status = zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: no memory to index %d tensors", s->path,
                          m->tensor_count);
        goto done;
    }
    for (int i = 0; i < m->tensor_count; i++) start[m->tensors[i].file + 1]++;
    for (int f = 0; f < m->file_count; f++) start[f + 1] += start[f];
    for (int i = 0; i < m->tensor_count; i++) {
        const int f = m->tensors[i].file;
        order[start[f] + fill[f]++] = i;
    }
    zs__ckpt_verify_totals sum = {0, 0, 0};
    read_counter rc = {progress, user, 0};
    uint64_t whole = 0; /* twice the bytes of the files done: the header's bytes count too */
    for (int f = part; f < m->file_count; f += parts) {
        if (without_optim && m->files[f].kind == ZS_CKPT_FILE_OPTIM) continue;
        const int count = start[f + 1] - start[f];
        ZS_CHECK_GOTO(verify_file(s, f, order + start[f], count, &rc), status, done);
        whole += 2 * m->files[f].bytes;
        rc.bytes = whole;
        if (progress) progress(user, rc.bytes);
        sum.files++;
        sum.tensors += count;
        sum.bytes += m->files[f].bytes;
    }
    if (totals) *totals = sum;
done:
    free(start);
    free(fill);
    free(order);
    return status;
}
