/* zs-ckpt: locating a step directory, loading its manifest, and verifying
 * shard files against it. Shard files and manifests are treated as hostile:
 * everything read from them is checked before it is used, and the first
 * problem is reported with the file's name. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "checkpoint/fs.h"
#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "ckpt_tool.h"
#include "core/error.h"

/* Whole-file hashing reads through one buffer of this size: large enough that
 * the per-call cost of pread vanishes, small enough that verifying a
 * terabyte checkpoint needs no more memory than a small one. It is not a
 * tuning knob (throughput is flat above a few hundred KiB). */
#define ZS_TOOL_HASH_CHUNK (1u << 20)

/* Largest `latest` file we read: a step name plus a newline, with room to
 * report a wrong one instead of a truncated one. */
#define ZS_TOOL_LATEST_MAX 256

zs_status zs__tool_join(char *out, size_t capacity, const char *dir, const char *name) {
    int n = snprintf(out, capacity, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= capacity)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "path %s/%s is longer than %zu bytes", dir,
                        name, capacity - 1);
    return ZS_OK;
}

/* ^step_[0-9]{8}$ exactly: anything else ("../x", "step_1", a slash, a
 * second line) is rejected, so `latest` can only name a sibling step. */
static int is_step_name(const char *s, size_t n) {
    static const char prefix[] = "step_";
    const size_t plen = sizeof prefix - 1;
    if (n != plen + 8 || memcmp(s, prefix, plen) != 0) return 0;
    for (size_t i = plen; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

zs_status zs__tool_resolve(const char *arg, char *step_dir, size_t capacity,
                           int *resolved_from_latest) {
    char path[PATH_MAX];
    if (!zs__fs_is_dir(arg))
        return zs__fail(ZS_ERR_IO, "%s: not a directory (give a step directory or a checkpoint root)",
                        arg);
    ZS_CHECK(zs__tool_join(path, sizeof path, arg, ZS_TOOL_MANIFEST));
    if (zs__fs_is_file(path)) {
        int n = snprintf(step_dir, capacity, "%s", arg);
        if (n < 0 || (size_t)n >= capacity)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: path too long", arg);
        if (resolved_from_latest) *resolved_from_latest = 0;
        return ZS_OK;
    }
    ZS_CHECK(zs__tool_join(path, sizeof path, arg, ZS_TOOL_LATEST));
    if (!zs__fs_is_file(path))
        return zs__fail(ZS_ERR_IO,
                        "%s: neither a step directory (no %s) nor a checkpoint root (no %s file)",
                        arg, ZS_TOOL_MANIFEST, ZS_TOOL_LATEST);
    char *text = NULL;
    size_t bytes = 0;
    zs_status s = zs__fs_read_file(path, ZS_TOOL_LATEST_MAX, &text, &bytes);
    if (s != ZS_OK) return zs__fail_context(s, "reading %s", path);
    size_t n = bytes;
    if (n > 0 && text[n - 1] == '\n') n--;
    if (memchr(text, '\0', bytes) != NULL || !is_step_name(text, n)) {
        /* Show at most the start of the first line: enough to recognize it. */
        size_t shown = strcspn(text, "\n");
        if (shown > 64) shown = 64;
        s = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                     "%s: \"%.*s\" is not a step directory name (expected step_ and 8 digits, "
                     "e.g. step_00000010); the file may be corrupt: pass a step directory instead",
                     path, (int)shown, text);
        free(text);
        return s;
    }
    text[n] = '\0';
    s = zs__tool_join(step_dir, capacity, arg, text);
    free(text);
    ZS_CHECK(s);
    if (!zs__fs_is_dir(step_dir))
        return zs__fail(ZS_ERR_IO, "%s names %s, which is not a directory", path, step_dir);
    if (resolved_from_latest) *resolved_from_latest = 1;
    return ZS_OK;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* 16 hex digits, optionally followed by one newline. */
static int parse_hash_file(const char *text, size_t bytes, uint64_t *out) {
    if (bytes == 17 && text[16] == '\n') bytes = 16;
    if (bytes != 16) return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < 16; i++) {
        int d = hex_digit(text[i]);
        if (d < 0) return 0;
        v = (v << 4) | (uint64_t)d;
    }
    *out = v;
    return 1;
}

zs_status zs__tool_load_manifest(const char *dir, int require_hash, zs__manifest **out,
                                 int *hash_state) {
    char path[PATH_MAX], hash_path[PATH_MAX];
    ZS_CHECK(zs__tool_join(path, sizeof path, dir, ZS_TOOL_MANIFEST));
    ZS_CHECK(zs__tool_join(hash_path, sizeof hash_path, dir, ZS_TOOL_MANIFEST_HASH));
    char *text = NULL, *hash_text = NULL;
    size_t bytes = 0, hash_bytes = 0;
    zs_status s = zs__fs_read_file(path, ZS_CKPT_MANIFEST_MAX, &text, &bytes);
    if (s != ZS_OK) return zs__fail_context(s, "reading the manifest");

    int state = -1;
    uint64_t expected = 0;
    if (zs__fs_is_file(hash_path) &&
        zs__fs_read_file(hash_path, 64, &hash_text, &hash_bytes) == ZS_OK &&
        parse_hash_file(hash_text, hash_bytes, &expected))
        state = XXH3_64bits(text, bytes) == expected ? 1 : 0;
    free(hash_text);
    if (require_hash && state != 1) {
        if (state == 0)
            s = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                         "%s: content hash %016llx does not match %s (%016llx): the manifest "
                         "is corrupt or was changed after the save",
                         path, (unsigned long long)XXH3_64bits(text, bytes), ZS_TOOL_MANIFEST_HASH,
                         (unsigned long long)expected);
        else
            s = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                         "%s: missing, unreadable, or not 16 hex digits; the step was not "
                         "committed completely",
                         hash_path);
        free(text);
        return s;
    }
    s = zs__manifest_from_json(text, bytes, path, out);
    free(text);
    ZS_CHECK(s);
    if (hash_state) *hash_state = state;
    return ZS_OK;
}

/* XXH3 of a whole file through one bounded buffer, before any parser sees
 * it, so a flipped byte anywhere is reported as corruption of that file. */
static zs_status hash_path(const char *path, uint64_t *hash) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return zs__fail(ZS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    zs_status s = ZS_OK;
    unsigned char *buf = malloc(ZS_TOOL_HASH_CHUNK);
    XXH3_state_t *st = XXH3_createState();
    if (!buf || !st) {
        s = zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: no memory for a %u-byte hash buffer", path,
                     ZS_TOOL_HASH_CHUNK);
        goto done;
    }
    XXH3_64bits_reset(st);
    for (;;) {
        ssize_t n = read(fd, buf, ZS_TOOL_HASH_CHUNK);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            s = zs__fail(ZS_ERR_IO, "%s: read failed: %s", path, strerror(errno));
            goto done;
        }
        if (n == 0) break;
        XXH3_64bits_update(st, buf, (size_t)n);
    }
    *hash = XXH3_64bits_digest(st);
done:
    XXH3_freeState(st);
    free(buf);
    close(fd);
    return s;
}

/* Which state kinds a file of each kind may hold. */
static int state_fits_file(zs__ckpt_state state, zs__ckpt_file_kind kind) {
    switch (kind) {
    case ZS_CKPT_FILE_MASTER: return state == ZS_CKPT_STATE_MASTER;
    case ZS_CKPT_FILE_OPTIM:
        return state == ZS_CKPT_STATE_EXP_AVG || state == ZS_CKPT_STATE_EXP_AVG_SQ ||
               state == ZS_CKPT_STATE_MOMENTUM;
    case ZS_CKPT_FILE_USER:
        return state == ZS_CKPT_STATE_USER_GLOBAL || state == ZS_CKPT_STATE_USER_RANK;
    }
    return 0;
}

static zs__st_dtype state_dtype(zs__ckpt_state state) {
    return state == ZS_CKPT_STATE_USER_GLOBAL || state == ZS_CKPT_STATE_USER_RANK ? ZS_ST_U8
                                                                                   : ZS_ST_F32;
}

/* Sorting a file's tensor indices by key, so duplicates are adjacent and an
 * entry of the file can be looked up with bsearch. */
static const zs__manifest *sort_manifest;
static int compare_key(const void *a, const void *b) {
    return strcmp(sort_manifest->tensors[*(const int *)a].key,
                  sort_manifest->tensors[*(const int *)b].key);
}
static int compare_name_to_key(const void *name, const void *index) {
    return strcmp((const char *)name, sort_manifest->tensors[*(const int *)index].key);
}

static zs_status verify_file(const char *dir, const zs__manifest *m, int fi, const int *tensors,
                             int count, const zs__tool_verify_options *o) {
    const zs__ckpt_file *f = &m->files[fi];
    char path[PATH_MAX];
    ZS_CHECK(zs__tool_join(path, sizeof path, dir, f->name));
    struct stat st;
    if (lstat(path, &st) != 0)
        return zs__fail(ZS_ERR_IO, "%s: missing (%s); the checkpoint is incomplete", path,
                        strerror(errno));
    if (!S_ISREG(st.st_mode))
        return zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: not a regular file", path);
    if ((uint64_t)st.st_size != f->bytes)
        return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                        "%s: %llu bytes, but the manifest says %llu: the file is truncated or "
                        "was overwritten",
                        path, (unsigned long long)st.st_size, (unsigned long long)f->bytes);
    if (o->whole_file_hash) {
        uint64_t h = 0;
        ZS_CHECK(hash_path(path, &h));
        if (h != f->xxh3)
            return zs__fail(ZS_ERR_INVALID_ARGUMENT,
                            "%s: content hash %016llx, but the manifest says %016llx: the file "
                            "is corrupt",
                            path, (unsigned long long)h, (unsigned long long)f->xxh3);
    }

    zs__st_file *sf = NULL;
    zs_status s = zs__st_open(path, &sf);
    if (s != ZS_OK) return s; /* the reader's message names the path and the problem */
    if (zs__st_file_bytes(sf) != f->bytes) {
        s = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: changed size while being verified", path);
        goto done;
    }

    /* Exactly the manifest's tensors: first duplicates within the manifest,
     * then entries the manifest does not list (cheap), then each listed
     * tensor's kind, dtype, count, offset, and finally the hashes (costly). */
    int *sorted = malloc(sizeof *sorted * (size_t)(count > 0 ? count : 1));
    if (!sorted) {
        s = zs__fail(ZS_ERR_OUT_OF_MEMORY, "%s: no memory for %d tensor indices", path, count);
        goto done;
    }
    memcpy(sorted, tensors, sizeof *sorted * (size_t)count);
    sort_manifest = m;
    qsort(sorted, (size_t)count, sizeof *sorted, compare_key);
    for (int i = 1; i < count; i++)
        if (strcmp(m->tensors[sorted[i]].key, m->tensors[sorted[i - 1]].key) == 0) {
            s = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: the manifest lists tensor \"%s\" twice",
                         path, m->tensors[sorted[i]].key);
            goto done_sorted;
        }
    for (int i = 0; i < zs__st_count(sf); i++) {
        const zs__st_entry *e = zs__st_entry_at(sf, i);
        if (!bsearch(e->name, sorted, (size_t)count, sizeof *sorted, compare_name_to_key)) {
            s = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                         "%s: holds tensor \"%s\", which the manifest does not list", path,
                         e->name);
            goto done_sorted;
        }
    }
    for (int i = 0; i < count; i++) {
        const zs__ckpt_tensor *t = &m->tensors[tensors[i]];
        if (!state_fits_file(t->state, f->kind)) {
            s = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                         "%s: the manifest puts tensor \"%s\" (state %s) in a %s file", path,
                         t->key, zs__ckpt_state_name(t->state), zs__ckpt_file_kind_name(f->kind));
            goto done_sorted;
        }
        const zs__st_entry *e = zs__st_find(sf, t->key);
        if (!e) {
            s = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                         "%s: tensor \"%s\", listed in the manifest, is missing", path, t->key);
            goto done_sorted;
        }
        zs__st_dtype want = state_dtype(t->state);
        if (e->dtype != want) {
            s = zs__fail(ZS_ERR_INVALID_ARGUMENT, "%s: tensor \"%s\" has dtype %s, expected %s",
                         path, t->key, zs__st_dtype_name(e->dtype), zs__st_dtype_name(want));
            goto done_sorted;
        }
        /* zs__st_open checked that the shape's product times the dtype size
         * equals the byte range, so the element count follows from it. */
        uint64_t numel = (e->end - e->begin) / zs__st_dtype_size(e->dtype);
        if (numel != (uint64_t)t->count) {
            s = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                         "%s: tensor \"%s\" holds %llu elements, the manifest says %lld", path,
                         t->key, (unsigned long long)numel, (long long)t->count);
            goto done_sorted;
        }
        char meta_key[sizeof t->key + 16];
        snprintf(meta_key, sizeof meta_key, "%s@offset", t->key);
        const char *recorded = zs__st_meta_get(sf, meta_key);
        if (recorded) {
            char *end = NULL;
            errno = 0;
            long long v = strtoll(recorded, &end, 10);
            if (errno || end == recorded || *end || v != t->offset) {
                s = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                             "%s: metadata \"%s\" is \"%s\", the manifest says offset %lld", path,
                             meta_key, recorded, (long long)t->offset);
                goto done_sorted;
            }
        }
    }
    for (int i = 0; i < count; i++) {
        const zs__ckpt_tensor *t = &m->tensors[tensors[i]];
        const zs__st_entry *e = zs__st_find(sf, t->key);
        uint64_t h = 0;
        ZS_CHECK_GOTO(zs__st_hash_entry(sf, e, &h), s, done_sorted);
        if (h != t->xxh3) {
            s = zs__fail(ZS_ERR_INVALID_ARGUMENT,
                         "%s: tensor \"%s\": content hash %016llx, but the manifest says %016llx: "
                         "the data is corrupt",
                         path, t->key, (unsigned long long)h, (unsigned long long)t->xxh3);
            goto done_sorted;
        }
    }
done_sorted:
    free(sorted);
done:
    zs__st_close(sf);
    return s;
}

zs_status zs__tool_verify_files(const char *dir, const zs__manifest *m,
                                const zs__tool_verify_options *options,
                                zs__tool_verify_totals *totals) {
    /* Group tensor indices by file with a counting sort: one pass per file
     * over all tensors would be quadratic in large world sizes. */
    int *start = calloc((size_t)m->file_count + 1, sizeof *start);
    int *order = malloc(sizeof *order * (size_t)(m->tensor_count > 0 ? m->tensor_count : 1));
    int *fill = calloc((size_t)m->file_count + 1, sizeof *fill);
    zs_status s = ZS_OK;
    if (!start || !order || !fill) {
        s = zs__fail(ZS_ERR_OUT_OF_MEMORY, "no memory to index %d tensors", m->tensor_count);
        goto done;
    }
    for (int i = 0; i < m->tensor_count; i++) start[m->tensors[i].file + 1]++;
    for (int f = 0; f < m->file_count; f++) start[f + 1] += start[f];
    for (int i = 0; i < m->tensor_count; i++) {
        int f = m->tensors[i].file;
        order[start[f] + fill[f]++] = i;
    }
    zs__tool_verify_totals sum = {0, 0, 0};
    for (int f = 0; f < m->file_count; f++) {
        if (options->master_only && m->files[f].kind != ZS_CKPT_FILE_MASTER) continue;
        int count = start[f + 1] - start[f];
        ZS_CHECK_GOTO(verify_file(dir, m, f, order + start[f], count, options), s, done);
        sum.files++;
        sum.tensors += count;
        sum.bytes += m->files[f].bytes;
    }
    if (totals) *totals = sum;
done:
    free(start);
    free(order);
    free(fill);
    return s;
}
